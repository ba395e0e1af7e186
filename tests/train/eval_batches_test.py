"""logging { max_eval_batches: N } stops every rank's evaluation after N batches without reading
further: with the last evaluation record corrupted, 2 processes evaluating 1 batch of 16 each
(samples 0..31 of 40) finish and count 32 samples; evaluating everything fails on that record.
"""
import glob

import pytest

from trainer_harness import Trainer

TWO_SHORT = 'launch { num_processes: "2" } logging { max_steps_per_epoch: 2 }'


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("eval_batches"))
    trainer.config = trainer.tiny_config("mlp", 80, 40, batch=10, epochs=1)
    return trainer


def train(trainer, name, *overrides):
    return trainer.run(name, "--config=" + trainer.config, overrides=(TWO_SHORT,) + overrides)


@pytest.fixture(scope="module")
def corrupted(trainer):
    """Trains on the intact set, then flips the last byte of the one evaluation shard: the data
    CRC of its last record, sample 39."""
    intact = train(trainer, "intact").check()
    shards = [p for p in glob.glob(trainer.path("tiny_shards", "test-*")) if p[-1].isdigit()]
    assert len(shards) == 1, shards
    with open(shards[0], "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0x5A]))
    return intact


def test_the_intact_set_evaluates_all_40(corrupted):
    assert [(e["epoch"], e["samples"]) for e in corrupted.evals] == [(1, 40)]


def test_one_batch_per_rank_never_reads_the_corrupt_record(trainer, corrupted):
    limited = train(trainer, "limited", "logging { max_eval_batches: 1 }").check()
    assert [e["samples"] for e in limited.evals] == [32], "2 ranks x 1 batch of 16"
    assert limited.end["state"] == "done"


def test_the_whole_evaluation_set_fails_on_sample_39(trainer, corrupted):
    whole = train(trainer, "whole")
    assert whole.rc not in (0, None)
    assert "reading sample 39" in whole.output
    assert whole.evals == []
    # Rank 0's own end record, when it got to write one before the job ended, says it failed.
    assert all(end["state"] == "failed" for end in whole.events("end"))
