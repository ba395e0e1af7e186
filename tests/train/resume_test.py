"""Resume equivalence on CPU: a run stopped after 17 of 24 steps (mid-epoch) and resumed from its
checkpoint has exactly the per-step losses and learning rates of an uninterrupted run, and the same
evaluation at the end (each rank's BatchNorm statistics survive the checkpoint). Two processes
(self-launched), the CNN (BatchNorm, dropout), SGD with momentum, cosine schedule; then the same
with four processes, whose float sums depend on the reduction order. Then: re-running the
finished config says the run is complete and trains nothing; --fresh moves the old checkpoints
aside and starts over from step 1, once per job: hvxrun's restart of a job started with --fresh
resumes what its first attempt wrote.
"""
import glob
import os
import re

import pytest

from trainer_harness import Trainer, steps_of, tool

SCHEDULE = "optimizer { schedule: COSINE warmup_epochs: 0.5 lr_scaling: BY_WORLD_SIZE }"
TWO = 'launch { num_processes: "2" }'
FOUR = 'launch { num_processes: "4" }'


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("resume"))
    trainer.config = trainer.tiny_config("cnn", 240, 40, batch=10, epochs=2)
    return trainer


def train(trainer, name, ckpt_dir, *args, processes=TWO):
    return trainer.run(name, "--config=" + trainer.config, *args,
                       overrides=[processes + " " + SCHEDULE,
                                  'checkpoint { dir: "%s" }' % trainer.path(ckpt_dir)]).check()


@pytest.fixture(scope="module")
def full(trainer):
    return train(trainer, "full", "ck_full")


@pytest.fixture(scope="module")
def stopped(trainer):
    return train(trainer, "first", "ck_resume", "--max_steps=17")


@pytest.fixture(scope="module")
def resumed(trainer, stopped):
    return train(trainer, "second", "ck_resume")


@pytest.fixture(scope="module")
def again(trainer, resumed):
    return train(trainer, "again", "ck_resume")


@pytest.fixture(scope="module")
def fresh(trainer, again):
    return train(trainer, "fresh", "ck_resume", "--fresh", "--max_steps=3")


def test_the_stopped_run_checkpoints_step_17(trainer, stopped):
    # Two ranks seeing one directory: checkpoint.format AUTO writes a directory, a shard per rank.
    path = trainer.path("ck_resume", "ckpt-17")
    assert os.path.isfile(os.path.join(path, "index.json"))
    assert "checkpoint.format AUTO: SHARDED" in stopped.output
    assert stopped.checkpoints[-1]["path"] == path
    assert stopped.checkpoints[-1]["global_step"] == 17
    assert (stopped.end["state"], stopped.end["global_step"]) == ("done", 17)


def test_the_second_run_resumes_from_step_17(trainer, resumed):
    path = trainer.path("ck_resume", "ckpt-17")
    assert resumed.start["resumed_from"] == path
    assert (resumed.start["epoch"], resumed.start["global_step"]) == (2, 17)
    assert "resuming from %s (epoch 2, step 17)" % path in resumed.output


def test_losses_and_learning_rates_are_the_uninterrupted_runs_step_by_step(full, stopped, resumed):
    assert [p["global_step"] for p in full.progress] == list(range(1, 25))
    assert (len(stopped.progress), len(resumed.progress)) == (17, 7)
    # Exact doubles: the metrics file carries every digit, where the log prints 7.
    assert steps_of(stopped, resumed) == full.steps()


def test_the_resumed_run_evaluates_exactly_like_the_uninterrupted_one(full, resumed):
    assert [e["epoch"] for e in full.evals] == [1, 2]
    assert [e["epoch"] for e in resumed.evals] == [2]
    keys = ("epoch", "global_step", "accuracy", "loss", "samples", "top5")
    assert {k: resumed.evals[-1][k] for k in keys} == {k: full.evals[-1][k] for k in keys}
    assert full.evals[-1]["samples"] == 40


def test_the_final_checkpoint_is_written_and_at_most_keep_are_kept(trainer, resumed):
    names = [n for n in os.listdir(trainer.path("ck_resume")) if re.fullmatch(r"ckpt-\d+", n)]
    assert "ckpt-24" in names
    assert len(names) <= 3, names
    assert resumed.end == dict(resumed.end, state="done", global_step=24)


def test_a_finished_run_says_it_is_complete_and_trains_nothing(trainer, again):
    assert ("the run in %s is already complete (2 of 2 epochs done, 24 steps); nothing to train. "
            "To start fresh, pass --fresh" % trainer.path("ck_resume")) in again.out
    assert again.progress == []
    assert (again.end["state"], again.end["global_step"]) == ("already_complete", 24)


def test_fresh_moves_the_old_checkpoints_aside_and_starts_at_step_1(trainer, full, fresh):
    assert "moved the previous checkpoints to %s/replaced-" % trainer.path("ck_resume") in fresh.output
    assert glob.glob(trainer.path("ck_resume", "replaced-*", "ckpt-24", "index.json"))
    assert os.path.isfile(trainer.path("ck_resume", "ckpt-3", "index.json"))
    assert not os.path.exists(trainer.path("ck_resume", "ckpt-24"))
    assert fresh.start["resumed_from"] is None
    assert fresh.steps() == full.steps()[:3]


def test_a_run_stopped_in_its_first_epoch_reports_its_throughput(fresh):
    assert re.search(r"^\[0\] done: 3 steps in [0-9.]+ s, [1-9][0-9]* samples/s$", fresh.out, re.M)
    assert fresh.end["samples_per_s"] > 0


def test_a_restarted_job_applies_fresh_once_and_resumes(trainer, full):
    # An earlier run left ckpt-5. The job is started with --fresh under hvxrun --max-restarts 1;
    # its first attempt sets ckpt-5 aside, writes ckpt-6 and fails writing its second checkpoint
    # (step 9, max_steps). hvxrun starts the same command again: that attempt must resume from
    # ckpt-6, not set it aside and start over (whose second checkpoint would fail again).
    train(trainer, "earlier", "ck_restart", "--max_steps=5")
    launcher = [tool("HVX_HVXRUN"), "-np", "2", "--slots-per-host", "2", "--max-restarts", "1",
                "--host-failure-limit", "2", "-x", "HVX_ALLOW_FAILPOINTS=1",
                "-x", "HVX_FAILPOINT=checkpoint:0:exit:2", "--"]
    run = trainer.run("restarted", "--config=" + trainer.config, "--fresh", "--max_steps=9",
                      launcher=launcher,
                      overrides=[SCHEDULE, 'checkpoint { dir: "%s" every_steps: 6 }'
                                 % trainer.path("ck_restart")]).check()
    assert "hvx failpoint checkpoint: rank 0 exit" in run.output
    assert "hvxrun: restart 1 of 1: rank 0 on host" in run.output
    # Rank 0's lines (hvxrun repeats a failed rank's last lines untagged).
    assert len(re.findall(r"^\[0\] .*--fresh: moved the previous checkpoints to", run.output,
                          re.M)) == 1, run.tail(40)
    assert glob.glob(trainer.path("ck_restart", "replaced-*", "ckpt-5", "index.json"))
    assert "this start of it resumes" in run.output
    assert "resuming from %s (epoch 1, step 6)" % trainer.path("ck_restart", "ckpt-6") in run.output
    assert [r["global_step"] for r in run.checkpoints][-1] == 9
    # The second attempt trained steps 7 to 9 as the uninterrupted run did.
    assert run.steps()[-3:] == full.steps()[6:9]


def test_four_processes_resume_to_the_same_losses(trainer):
    # With more than two ranks a float sum's rounding depends on the order of the additions; the
    # engine keeps one order per element whatever it fuses (before, each run of these 12 steps
    # had different losses).
    full4 = train(trainer, "full4", "ck_full4", processes=FOUR)
    first4 = train(trainer, "first4", "ck_resume4", "--max_steps=7", processes=FOUR)
    second4 = train(trainer, "second4", "ck_resume4", processes=FOUR)
    assert (len(full4.progress), len(first4.progress), len(second4.progress)) == (12, 7, 5)
    assert steps_of(first4, second4) == full4.steps()
