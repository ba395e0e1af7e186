"""Resuming at another world size or batch size: a run stopped in the middle of its first epoch and
resumed with 2 -> 4 processes, 4 -> 2 processes, and batch 64 -> 32 trains each position of the
epoch's permutation not yet seen exactly once (under DROP the remainder of the new global batch
left out, as every epoch leaves it out; under PAD all of it, the last step short), says how many
samples remain, and from there has the step counters and learning rates of an uninterrupted run at
the new size, whose second epoch it also trains sample for sample.
"""
import filecmp
import os
import subprocess
import sys

import pytest

from trainer_harness import Trainer, tool

N = 320
# The rates depend on the world size and on the steps per epoch.
SCHEDULE = "optimizer { schedule: COSINE lr_scaling: BY_WORLD_SIZE }"
TWO = 'launch { num_processes: "2" }'
FOUR = 'launch { num_processes: "4" }'
PAD = "data { remainder: PAD }"
BATCH64 = "data { batch_size: 64 }"
BATCH32 = "data { batch_size: 32 }"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("resize_resume"))
    trainer.config = trainer.tiny_config("mlp", N, 40, batch=10, epochs=2)
    return trainer


def train(trainer, name, override, *args):
    """The trainer with its sample log in <name>.log."""
    return trainer.run(name, "--config=" + trainer.config, "--sample_log=" + trainer.path(name + ".log"),
                       *args, overrides=[SCHEDULE + " " + override]).check()


REFERENCES = {"ref4": FOUR, "ref2": TWO, "ref2b32": TWO + " " + BATCH32}


@pytest.fixture(scope="module")
def references(trainer):
    """Uninterrupted runs at each new size: 8 steps of 40 per epoch on 4 processes (320 fill 4 x 10
    evenly, so it is also PAD's run), 16 of 20 on 2, 5 of 64 on 2 with batch 32."""
    return {name: train(trainer, name, override) for name, override in REFERENCES.items()}


def schedule_of(run):
    """(epoch, step, steps_per_epoch, lr) of each progress record: what runs at one size share."""
    return [(p["epoch"], p["step"], p["steps_per_epoch"], p["lr"]) for p in run.progress]


# name, stopped run's override and processes, resumed run's override and processes, reference,
# steps before the stop, samples of epoch 1 they trained, the new size's step counter before the
# resumed run's first step, the positions epoch 1 trains in all, global steps at the end, and what
# the resumed run says about the rest of the epoch.
CASES = [
    # 2 -> 4: 100 of 320 seen; 220 remain, 5 steps of 40 take 200 (from step 4/8), the last 20 of
    # the permutation are less than one global batch and are left out.
    ("grow", TWO, 2, FOUR, 4, "ref4", 5, 100, 3, 300, 18,
     "epoch 1 resumes at step 4/8: 220 of its 320 samples remain; 5 steps of 4 ranks x batch 10 "
     "train 200 of them, the last 20 (less than one global batch) are left out (data.remainder: "
     "DROP)"),
    # The same under PAD: 220 remain, 55 per rank, 6 steps from step 3/8 of which the last trains 5
    # rows per rank; nothing is left out.
    ("grow_pad", TWO + " " + PAD, 2, FOUR + " " + PAD, 4, "ref4", 5, 100, 2, 320, 19,
     "epoch 1 resumes at step 3/8: 220 of its 320 samples remain; 6 steps of 4 ranks x batch 10 "
     "train all of them"),
    # 4 -> 2: 120 seen; 200 remain, 10 steps of 20 from step 7/16.
    ("shrink", FOUR, 4, TWO, 2, "ref2", 3, 120, 6, 320, 29,
     "epoch 1 resumes at step 7/16: 200 of its 320 samples remain; 10 steps of 2 ranks x batch 10 "
     "train all of them"),
    # Batch 64 -> 32 on 2 processes: 128 seen; 192 remain, 3 steps of 64 from step 3/5.
    ("batch", TWO + " " + BATCH64, 2, TWO + " " + BATCH32, 2, "ref2b32", 1, 128, 2, 320, 9,
     "epoch 1 resumes at step 3/5: 192 of its 320 samples remain; 3 steps of 2 ranks x batch 32 "
     "train all of them"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_resuming_at_another_size(trainer, references, case):
    name, old, old_np, new, new_np, ref, stop, consumed, first, end, done, line = case
    ckpt = ' checkpoint { dir: "%s" }' % trainer.path("ck_" + name)
    stopped = train(trainer, name + "-stopped", old + ckpt, "--max_steps=%d" % stop)
    # More than one rank, one directory: checkpoint.format AUTO writes a shard per rank.
    path = trainer.path("ck_" + name, "ckpt-%d" % stop)
    assert stopped.checkpoints[-1]["path"] == path and os.path.isfile(os.path.join(path, "index.json"))
    resumed = train(trainer, name + "-resumed", new + ckpt)
    assert resumed.start["resumed_from"] == path
    assert "resuming from %s (epoch 1, step %d)" % (path, stop) in resumed.err
    assert line in resumed.err
    # Epoch 1 over both runs: positions 0..end-1 of its permutation once each.
    audit = subprocess.run(
        [sys.executable, tool("HVX_EPOCH_AUDIT"), str(N), "0", trainer.path(ref + ".log"), str(new_np),
         str(end), "%s:%d:0" % (trainer.path(name + "-stopped.log"), old_np),
         "%s:%d:%d" % (trainer.path(name + "-resumed.log"), new_np, consumed)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert audit.returncode == 0, audit.stdout
    # From the new size's step first + 1 on, the step counters and learning rates of the
    # uninterrupted run.
    assert schedule_of(resumed) == schedule_of(references[ref])[first:]
    # Epoch 2 trains the uninterrupted run's samples on every rank.
    for r in range(new_np):
        log = "rank%d-epoch1.txt" % r
        assert filecmp.cmp(trainer.path(ref + ".log", log), trainer.path(name + "-resumed.log", log),
                           shallow=False), log
    assert resumed.end["global_step"] == done
    if name == "batch":
        assert ("world size or batch size changed since the checkpoint: 2 ranks x batch 64, now 2 "
                "ranks x batch 32") in resumed.err
