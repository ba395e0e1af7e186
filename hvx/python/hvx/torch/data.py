"""hvx.torch.data.DistributedSampler: which samples this rank reads, from hvx's shard plan
(hvx/data/shard_plan.h), the same plan the C++ trainer and hvx.data use.

Each epoch is a permutation P of [0, N) drawn from (seed, epoch) alone, the same on every rank;
rank r of W takes positions r, r + W, r + 2W, ... Ranks are disjoint, equal in count and together
cover the epoch: drop_last=False pads with fewer than W duplicates from the start of P,
drop_last=True leaves out fewer than W samples. state_dict() records the samples of the epoch
consumed over all ranks, so load_state_dict() resumes mid-epoch at any world size, every
remaining sample exactly once.
"""

import torch.utils.data

from hvx import _C


def _world(num_replicas, rank):
    if num_replicas is None or rank is None:
        if not _C.is_initialized():
            raise ValueError("DistributedSampler: pass num_replicas and rank, or call "
                             "hvx.torch.init() first")
        num_replicas = _C.size() if num_replicas is None else num_replicas
        rank = _C.rank() if rank is None else rank
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError("DistributedSampler: rank %d is not in [0, %d)" % (rank, num_replicas))
    return num_replicas, rank


class DistributedSampler(torch.utils.data.Sampler):
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        self.dataset = dataset
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.epoch = 0
        self._start = 0      # samples of the epoch consumed (all ranks) before this iteration
        self._yielded = 0    # ids this rank's current iteration handed out

    def _plan(self):
        return _C.shard_plan(len(self.dataset), self.rank, self.num_replicas, self.epoch,
                             self.seed, not self.drop_last, self.shuffle, self._start)

    def __iter__(self):
        self._yielded = 0
        for i in self._plan().ids:
            self._yielded += 1
            yield i
        # The epoch is over; a state_dict() now points at the next one.
        self.epoch += 1
        self._start = 0
        self._yielded = 0

    def __len__(self):
        remaining = max(0, len(self.dataset) - self._start)
        w = self.num_replicas
        return remaining // w if self.drop_last else (remaining + w - 1) // w

    def set_epoch(self, epoch):
        """Selects the epoch's permutation, starting at its beginning (or, after
        load_state_dict, at the saved position of that epoch)."""
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch

    def state_dict(self, samples_done=None):
        """Where this epoch stands. samples_done: the samples this rank has trained on in the
        current iteration, when a DataLoader with workers has drawn more indices than the loop
        consumed; by default, the indices handed out."""
        done = self._yielded if samples_done is None else int(samples_done)
        return {"epoch": self.epoch, "seed": self.seed, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "num_samples": len(self.dataset),
                "consumed": self._start + done * self.num_replicas}

    def load_state_dict(self, state):
        if state["num_samples"] != len(self.dataset):
            raise ValueError("DistributedSampler.load_state_dict: the state is of a dataset of "
                             "%d samples, this one has %d" % (state["num_samples"],
                                                               len(self.dataset)))
        self.epoch = state["epoch"]
        self.seed = state["seed"]
        self.shuffle = state["shuffle"]
        self.drop_last = state["drop_last"]
        self._start = min(state["consumed"], len(self.dataset))
        self._yielded = 0
