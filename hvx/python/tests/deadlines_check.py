"""No wait without a deadline: a rank that skips a collective fails every rank within
HVX_COLLECTIVE_TIMEOUT_S (set low by the test that runs this file), naming the op and the ranks
that did not come, and the job goes on; a join waits while the others run collectives and fails
when none completes in that time. Run on 2 ranks by tests/deadline_test.sh, not by the main
suite (whose timeout is 60 s)."""
import os
import time

import pytest
import torch

import hvx.torch as hvd

TIMEOUT = float(os.environ["HVX_COLLECTIVE_TIMEOUT_S"])


def _within_the_timeout(start):
    waited = time.time() - start
    assert TIMEOUT - 1 <= waited < TIMEOUT + 5, waited


def test_a_rank_that_skips_a_collective_fails_every_rank(rank, size):
    # Horovod's suite once hung here for good: rank 1 failed and went on to its next test, rank 0
    # waited in remove_process_set's barrier.
    start = time.time()
    if rank == 0:
        with pytest.raises(hvd.HvxInternalError, match=r"BARRIER 'barrier' timed out after \d+ s "
                           r"\(HVX_COLLECTIVE_TIMEOUT_S\): rank 1 \(host [^)]+\) did not submit it "
                           r"\(submitted by rank 0\)"):
            hvd.barrier()
    else:
        with pytest.raises(hvd.HvxInternalError, match=r"ALLREDUCE 'grad\.w' timed out .*rank 0 "
                           r"\(host [^)]+\) did not submit it \(submitted by rank 1\)"):
            hvd.allreduce(torch.ones(2), name="grad.w")
    _within_the_timeout(start)
    # Nothing is left behind: the next collective runs on every rank.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after.skip").item() == size


def test_a_cached_collective_one_rank_skips(rank, size):
    for _ in range(2):  # now agreed through the response cache
        hvd.allreduce(torch.ones(3), name="cached")
    start = time.time()
    if rank == 0:
        with pytest.raises(hvd.HvxInternalError, match="ALLREDUCE 'cached' timed out .*rank 1 "):
            hvd.allreduce(torch.ones(3), name="cached")
        _within_the_timeout(start)
    else:
        time.sleep(TIMEOUT + 1)  # busy elsewhere, in no collective
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after.cached").item() == size


def test_optimizer_step_on_one_rank_fails_in_time(rank, size):
    model = torch.nn.Linear(2, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    start = time.time()
    if rank == 1:
        model(torch.ones(1, 2)).sum().backward()
        with pytest.raises(hvd.HvxInternalError, match=r"grad\.(weight|bias)' timed out .*rank 0 "):
            opt.step()
        _within_the_timeout(start)
    else:
        with pytest.raises(hvd.HvxInternalError, match="BROADCAST 'lonely.size' timed out .*rank 1 "):
            hvd.broadcast_object("only rank 0 asks", root_rank=0, name="lonely")
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after.step").item() == size


def test_join_waits_while_the_others_train_and_fails_when_they_stop(rank, size):
    start = time.time()
    if rank == 0:
        # The others keep running allreduces for longer than the timeout: the join waits.
        assert hvd.join() == 1
        assert time.time() - start >= TIMEOUT
        start = time.time()
        with pytest.raises(hvd.HvxInternalError, match=r"JOIN timed out after \d+ s "
                           r"\(HVX_COLLECTIVE_TIMEOUT_S\): rank 1 \(host [^)]+\) neither joined "
                           r"nor ran a collective in that time \(joined: rank 0\)"):
            hvd.join()
        _within_the_timeout(start)
    else:
        for i in range(int(TIMEOUT * 1.5 / 0.25)):
            out = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="still.training")
            assert out.item() == size - 1  # the joined rank counts as zero
            time.sleep(0.25)
        hvd.join()
        time.sleep(TIMEOUT + 1)  # busy elsewhere, in no collective, not joined
    # The job goes on: both join, and a collective runs on every rank.
    hvd.join()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after.join").item() == size
