"""A preemption notice: SIGTERM to the trainer's launcher mid-epoch. hvxrun forwards it as a
checkpoint request; both ranks stop after the same step, rank 0 saves that step's checkpoint, every
rank exits 75 and so does hvxrun (run again to resume). Running the same command again resumes
there, and the losses and learning rates of both runs are those of an uninterrupted run, step by
step. A second signal stops at once.

SIGTERM to a rank itself (a process manager that signals every process of the job) is the same
request: the ranks agree on it at the next step, and hvxrun ends with 75 as well. A trainer without
a launcher does the same. A rank that ends with 75 while the others go on is a failure once
--stop-timeout has passed, and hvxrun then exits 1.
"""
import os
import re
import signal
import subprocess
import time

import pytest

from trainer_harness import Trainer, read_metrics, steps_of, tool, wait_for

TWO = 'launch { num_processes: "2" }'


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("preempt"))
    trainer.config = trainer.tiny_config("cnn", 480, 40, batch=10, epochs=2)
    return trainer


def ckpt(trainer, name, extra=""):
    return 'checkpoint { dir: "%s" %s }' % (trainer.path(name), extra)


def sharded(trainer, name, step):
    """The checkpoint of `step` written by default (checkpoint.format AUTO: one directory, a
    shard per rank), and whether it is whole (its index written)."""
    path = trainer.path(name, "ckpt-%d" % step)
    return path, os.path.isfile(os.path.join(path, "index.json"))


@pytest.fixture(scope="module")
def full(trainer):
    return trainer.run("full", "--config=" + trainer.config,
                       overrides=[TWO, ckpt(trainer, "ck_full")]).check()


def until_step(run, proc, step):
    """Returns once rank 0 recorded `step` of epoch 1, or the trainer ended."""
    wait_for(lambda: at_step(run, step)() or proc.poll() is not None, timeout=120,
             what="step %d" % step)


def sigterm_at_step(trainer, name, step, overrides=()):
    """The trainer, sent SIGTERM once rank 0 recorded `step` of epoch 1; the finished Run."""
    run, proc = trainer.start(name, "--config=" + trainer.config, overrides=list(overrides))
    try:
        until_step(run, proc, step)
    finally:
        proc.send_signal(signal.SIGTERM)
    return trainer.finish(run, proc)


@pytest.fixture(scope="module")
def preempted(trainer):
    """The 2-process trainer, sent SIGTERM at step 8 of epoch 1."""
    return sigterm_at_step(trainer, "preempted", 8, [TWO, ckpt(trainer, "ck")])


def at_step(run, step, epoch=1):
    return lambda: any(r["event"] == "progress" and r["epoch"] == epoch and r["step"] >= step
                       for r in read_metrics(run.metrics_path, growing=True))


def rank_pids(top, train):
    """{HVX_RANK: pid} of the trainer processes under `top` (hvxrun in the trainer's process) that
    run `train` themselves: the ranks, not their wrappers."""
    parent = {}
    for name in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % name) as f:
                parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            pass
    ranks = {}
    for pid in parent:
        p = pid
        while p in parent and p != top and p > 1:
            p = parent[p]
        if p != top or pid == top:
            continue
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode()
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if os.path.basename(argv0) == os.path.basename(train) and b"HVX_RANK" in env:
            ranks[int(env[b"HVX_RANK"])] = pid
    return ranks


@pytest.fixture(scope="module")
def rank_signalled(trainer):
    """The 2-process trainer whose rank 1 alone got SIGTERM at step 8 of epoch 1."""
    run, proc = trainer.start("rank_sigterm", "--config=" + trainer.config,
                              overrides=[TWO, ckpt(trainer, "ck_rank")])
    try:
        until_step(run, proc, 8)
        ranks = rank_pids(proc.pid, trainer.train)
        assert sorted(ranks) == [0, 1], ranks
        os.kill(ranks[1], signal.SIGTERM)
    except BaseException:
        proc.kill()
        raise
    return trainer.finish(run, proc)


@pytest.fixture(scope="module")
def resumed(trainer, preempted):
    return trainer.run("resumed", "--config=" + trainer.config,
                       overrides=[TWO, ckpt(trainer, "ck")])


def test_sigterm_mid_epoch_ends_the_job_with_75(preempted):
    preempted.check(rc=75)
    assert ("hvxrun: preempted: every rank ended cleanly after the checkpoint request (signal 15); "
            "exit status 75") in preempted.err


def test_both_ranks_stopped_at_one_step_of_epoch_1_whose_checkpoint_is_there(trainer, preempted):
    end = preempted.end
    at = end["global_step"]
    assert end["state"] == "preempted"
    assert 8 <= at < 24
    path, whole = sharded(trainer, "ck", at)
    assert end["checkpoint"] == path and whole
    assert preempted.checkpoints[-1]["path"] == path
    assert "preempted at step %d; checkpoint %s" % (at, path) in preempted.err
    assert [p["global_step"] for p in preempted.progress] == list(range(1, at + 1))


def test_the_same_command_resumes_there_and_repeats_the_uninterrupted_run(
        trainer, full, preempted, resumed):
    resumed.check()
    at = preempted.end["global_step"]
    assert resumed.start["resumed_from"] == trainer.path("ck", "ckpt-%d" % at)
    assert "resuming from %s (epoch" % trainer.path("ck", "ckpt-%d" % at) in resumed.output
    assert len(full.progress) == 48
    assert steps_of(preempted, resumed) == full.steps()


def test_sigterm_to_one_rank_checkpoints_every_rank_and_hvxrun_exits_75(trainer, rank_signalled):
    rank_signalled.check(rc=75)
    assert ("hvxrun: preempted: every rank ended cleanly after a stop request sent to the ranks "
            "themselves (rank 0 on host ") in rank_signalled.err
    at = rank_signalled.end["global_step"]
    assert rank_signalled.end["state"] == "preempted" and 8 <= at < 24
    assert sharded(trainer, "ck_rank", at)[1]
    # Neither rank was taken for a failure: nothing was aborted.
    assert "ranks to fail" not in rank_signalled.err


def test_after_a_rank_sigterm_the_same_command_repeats_the_uninterrupted_run(
        trainer, full, rank_signalled):
    again = trainer.run("rank_resumed", "--config=" + trainer.config,
                        overrides=[TWO, ckpt(trainer, "ck_rank")]).check()
    at = rank_signalled.end["global_step"]
    assert again.start["resumed_from"] == trainer.path("ck_rank", "ckpt-%d" % at)
    assert steps_of(rank_signalled, again) == full.steps()


def test_a_trainer_without_a_launcher_checkpoints_on_sigterm_and_exits_75(trainer):
    run = sigterm_at_step(trainer, "alone", 8, [ckpt(trainer, "ck_alone")]).check(rc=75)
    at = run.end["global_step"]
    assert run.end["state"] == "preempted" and at >= 8
    # One rank: checkpoint.format AUTO writes its directory in the background, and the preemption
    # waits for it.
    assert sharded(trainer, "ck_alone", at)[1]
    assert "checkpoint.format AUTO: SHARDED (one rank: its checkpoints are written in" in run.err
    assert "preempted at step %d" % at in run.err


def test_a_stop_request_without_a_checkpoint_dir_saves_nothing_and_exits_1(trainer):
    # 75 would promise that running again goes on from here.
    run = sigterm_at_step(trainer, "nodir", 4).check(rc=1)
    assert run.end["state"] == "preempted"
    assert ("train: stopped early on a checkpoint request (SIGTERM or hvxrun's SIGUSR1), but "
            "checkpoint.dir is empty: nothing was saved, and running again starts over") in run.err


def test_without_every_seconds_or_every_steps_no_checkpoint_mid_epoch_but_the_preemptions(
        trainer, resumed):
    names = [n for n in os.listdir(trainer.path("ck")) if n.startswith("ckpt-")]
    assert len(names) <= 4, names
    assert [c["global_step"] for c in resumed.checkpoints] == [24, 48]


def test_every_seconds_checkpoints_at_the_first_step_boundary_after_the_interval(trainer):
    # A tiny interval: a checkpoint after every step.
    timed = trainer.run("time", "--config=" + trainer.config, "--max_steps=5",
                        overrides=[TWO, ckpt(trainer, "ck_time", "every_seconds: 0.000001 keep: 100")])
    timed.check()
    assert [c["global_step"] for c in timed.checkpoints] == [1, 2, 3, 4, 5]
    names = sorted(n for n in os.listdir(trainer.path("ck_time")) if re.fullmatch(r"ckpt-\d", n))
    assert names == ["ckpt-%d" % s for s in range(1, 6)]


# A program that ignores the request: a second signal, or the grace period, stops it.
IGNORING = ["/bin/sh", "-c", 'trap "" USR1; sleep 30']


def hvxrun(tmp, name, *flags, program=IGNORING):
    err = open(os.path.join(tmp, name + ".err"), "w")
    proc = subprocess.Popen([tool("HVX_HVXRUN"), "--timeout", "60", "--mpiexec", tool("HVX_MPIEXEC")]
                            + list(flags) + ["-np", "2", "--"] + program,
                            stdout=subprocess.DEVNULL, stderr=err)
    return proc, err.name


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def test_a_second_sigterm_stops_a_job_that_ignores_the_request(trainer):
    proc, err = hvxrun(trainer.dir, "twice")
    # The ranks' shells have set their trap a second after the job started (hvxrun's first line,
    # when it prints one early).
    try:
        wait_for(lambda: read(err), timeout=5)
    except AssertionError:
        pass
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "asked the ranks to checkpoint" in read(err), timeout=5,
             what="the checkpoint request")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    seconds = time.monotonic() - t0
    assert rc == 143 and seconds < 12, (rc, seconds, read(err))
    assert "hvxrun: stopped the job on signal 15" in read(err)


def test_preempt_grace_stops_the_job_a_second_after_the_notice(trainer):
    t0 = time.monotonic()
    proc, err = hvxrun(trainer.dir, "grace", "--preempt-grace", "1")
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    seconds = time.monotonic() - t0
    assert rc == 143 and seconds < 14, (rc, seconds, read(err))


def rank_program(rank0, rank1):
    return ["/bin/sh", "-c", 'if [ "$HVX_RANK" = 0 ]; then %s; else %s; fi' % (rank0, rank1)]


@pytest.mark.parametrize("rank1", ["exit 75", "exit 0"])
def test_ranks_that_end_with_75_and_0_after_a_stop_request_end_the_job_with_75(trainer, rank1):
    proc, err = hvxrun(trainer.dir, "both75", program=rank_program("exit 75", rank1))
    rc = proc.wait(timeout=60)
    assert rc == 75, (rc, read(err))
    assert ("hvxrun: preempted: every rank ended cleanly after a stop request sent to the ranks "
            "themselves (rank 0 on host ") in read(err)


def test_a_rank_that_ends_with_75_while_the_others_go_on_is_a_failure_after_the_stop_timeout(
        trainer):
    # A program may exit 75 on an error of its own: its peers would wait for it forever.
    t0 = time.monotonic()
    proc, err = hvxrun(trainer.dir, "lone75", "--stop-timeout", "2",
                       program=rank_program("exit 75", "exec sleep 30"))
    rc = proc.wait(timeout=60)
    seconds = time.monotonic() - t0
    assert rc == 1 and seconds < 20, (rc, seconds, read(err))
    assert re.search(r"hvxrun: rank 0 on host \S+ \(local rank 0\) ended with status 75 \(stopped "
                     r"to be run again\), but the other ranks did not end within --stop-timeout "
                     r"\(2 s\); it was the first of 2 ranks to fail", read(err)), read(err)
