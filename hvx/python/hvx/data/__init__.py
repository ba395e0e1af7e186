"""Record files (TFRecord framing, hvx/data/record_format.h) read through hvx's C++ data layer.

    files = hvx.data.RecordFiles("/data/train-*")            # map-style: files[i] -> bytes
    ds = hvx.data.RecordDataset("/data/train-*", features=["image/encoded", "label"])
    loader = torch.utils.data.DataLoader(ds, batch_size=None)

RecordDataset is an IterableDataset over this rank's samples of each epoch, partitioned by the
same shard plan as hvx.torch.data.DistributedSampler and the C++ trainer: disjoint, balanced,
deterministic per (seed, epoch), resumable mid-epoch at any world size. Each item is the record's
bytes or, with `features`, a dict of its tf.train.Example features (int64 and float lists as
tensors, bytes lists as lists of bytes). A corrupt record raises naming its file, offset and
sample id; nothing is skipped silently.
"""

import torch.utils.data

from hvx import _C
from hvx.torch.data import DistributedSampler


class RecordFiles:
    """The records of the files matching `patterns` (sorted per pattern), numbered 0..N-1 in
    file order: files[i] is record i's payload, its CRCs checked."""

    def __init__(self, patterns, verify_crc=True):
        if isinstance(patterns, str):
            patterns = [patterns]
        self._records = _C.Records(list(patterns), verify_crc)

    def __len__(self):
        return len(self._records)

    def __getitem__(self, i):
        return self._records.read(int(i))

    @property
    def files(self):
        return self._records.files

    def example(self, i, features):
        """Record i parsed as a tf.train.Example: {key: value} for each key in `features`."""
        return self._records.read_example(int(i), list(features))

    def describe(self, i):
        """"file:offset (sample i)"."""
        return self._records.describe(int(i))


class RecordDataset(torch.utils.data.IterableDataset):
    """This rank's records of the current epoch, in shard-plan order.

    rank, size: default hvx's (after hvx.torch.init()), else 0 and 1. shuffle, seed, drop_last:
    as DistributedSampler's. features: keys of tf.train.Example features to parse; None yields
    the raw bytes. With DataLoader workers, each worker takes every k-th of the rank's samples.
    """

    def __init__(self, patterns, rank=None, size=None, shuffle=True, seed=0, drop_last=False,
                 features=None, verify_crc=True):
        self.files = RecordFiles(patterns, verify_crc)
        if rank is None and size is None and not _C.is_initialized():
            rank, size = 0, 1
        self.sampler = DistributedSampler(self.files, num_replicas=size, rank=rank,
                                          shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.features = list(features) if features is not None else None

    def set_epoch(self, epoch):
        self.sampler.set_epoch(epoch)

    def state_dict(self, samples_done=None):
        return self.sampler.state_dict(samples_done)

    def load_state_dict(self, state):
        self.sampler.load_state_dict(state)

    def __len__(self):
        return len(self.sampler)

    def __iter__(self):
        worker = torch.utils.data.get_worker_info()
        for k, i in enumerate(self.sampler):
            if worker is not None and k % worker.num_workers != worker.id:
                continue
            if self.features is None:
                yield self.files[i]
            else:
                yield self.files.example(i, self.features)
