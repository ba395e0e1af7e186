"""--export: the trainer's final weights, and those of a checkpoint (--export_from), load in PyTorch
(torch.load, load_state_dict into the same CNN defined in Python) and reproduce the trainer's
evaluation; a run already complete exports the same weights again, and a sharded checkpoint
directory exports the weights the same run's single file does.
"""
import os

import pytest
import torch

from export_check import evaluate
from trainer_harness import Trainer


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("export"))
    trainer.config = trainer.tiny_config("cnn", 400, 60, batch=10, epochs=2)
    return trainer


def train(trainer, name, *args):
    return trainer.run(name, "--config=" + trainer.config, *args,
                       overrides=['checkpoint { dir: "%s" keep: 10 format: SINGLE_FILE }'
                                  % trainer.path("ck")],
                       timeout=300)


@pytest.fixture(scope="module")
def trained(trainer):
    return train(trainer, "train", "--export=" + trainer.path("final.pt")).check()


def test_rank_0_says_where_it_exported(trainer, trained):
    assert "exported the weights to %s" % trainer.path("final.pt") in trained.out


def test_pytorch_reproduces_the_final_evaluation(trainer, trained):
    final = trained.evals[-1]
    python = evaluate(trainer.path("final.pt"), trainer.path("tiny_idx"))
    assert (final["epoch"], final["samples"]) == (2, python["samples"]) == (2, 60)
    assert python["accuracy"] == pytest.approx(final["accuracy"], abs=1e-6)


def test_an_exported_checkpoint_reproduces_its_epochs_evaluation(trainer, trained):
    # The checkpoint after epoch 1: 40 steps of 10 samples on one rank.
    epoch1 = trained.evals[0]
    assert (epoch1["epoch"], epoch1["global_step"]) == (1, 40)
    assert trainer.path("ck", "ckpt-40.pt") in [c["path"] for c in trained.checkpoints]
    exported = train(trainer, "from_ckpt", "--export_from=" + trainer.path("ck", "ckpt-40.pt"),
                     "--export=" + trainer.path("epoch1.pt")).check()
    assert exported.records == [], "--export_from trains nothing and records no run"
    python = evaluate(trainer.path("epoch1.pt"), trainer.path("tiny_idx"))
    assert python["accuracy"] == pytest.approx(epoch1["accuracy"], abs=1e-6)
    assert python["loss"] == pytest.approx(epoch1["loss"], abs=1e-4)


def test_a_run_already_complete_exports_the_same_weights(trainer, trained):
    again = train(trainer, "again", "--export=" + trainer.path("again.pt")).check()
    assert again.end["state"] == "already_complete"
    assert "already complete" in again.out
    a, b = torch.load(trainer.path("final.pt")), torch.load(trainer.path("again.pt"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_export_from_without_export_is_refused(trainer, trained):
    bad = trainer.run("bad", "--config=" + trainer.config,
                      "--export_from=" + trainer.path("ck", "ckpt-40.pt"), timeout=60)
    assert bad.rc not in (0, None)
    assert "--export_from needs --export=PATH" in bad.output


def test_a_sharded_checkpoint_exports_the_weights_the_same_runs_file_does(trainer, trained):
    sharded = trainer.run("sharded", "--config=" + trainer.config, timeout=300, overrides=[
        'checkpoint { dir: "%s" keep: 10 format: SHARDED }' % trainer.path("ck_sharded")]).check()
    assert trainer.path("ck_sharded", "ckpt-40") in [c["path"] for c in sharded.checkpoints]
    # Written in the background, each is recorded once whole: its index is there, with its size
    # and the pause training saw.
    for c in sharded.checkpoints:
        assert os.path.exists(os.path.join(c["path"], "index.json")), c
        assert c["bytes"] > 0 and 0 <= c["pause_s"] <= c["seconds"], c
    for name, checkpoint in (("file40.pt", trainer.path("ck", "ckpt-40.pt")),
                             ("dir40.pt", trainer.path("ck_sharded", "ckpt-40"))):
        train(trainer, "export_" + name, "--export_from=" + checkpoint,
              "--export=" + trainer.path(name)).check()
    a, b = torch.load(trainer.path("file40.pt")), torch.load(trainer.path("dir40.pt"))
    assert a and a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
