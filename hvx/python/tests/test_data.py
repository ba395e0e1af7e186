"""hvx.torch.data.DistributedSampler and hvx.data's record readers: the shard plan's guarantees
(disjoint, balanced, covering, deterministic per epoch, mid-epoch resume at another world size),
on this job's real ranks and on simulated world sizes, and TFRecord files of tf.train.Example
records written here and read back through hvx's C++ reader."""
import os
import struct

import pytest
import torch
import torch.utils.data

import hvx.data
import hvx.torch as hvd
from hvx.torch.data import DistributedSampler


class Items(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


@pytest.mark.parametrize("n", [1, 7, 97, 100])
@pytest.mark.parametrize("w", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_plan_disjoint_balanced_covering(n, w, drop_last):
    plans = [list(DistributedSampler(Items(n), w, r, seed=3, drop_last=drop_last))
             for r in range(w)]
    assert len({len(p) for p in plans}) == 1, "ranks got different numbers of samples"
    flat = [i for p in plans for i in p]
    if drop_last:
        assert len(set(flat)) == len(flat) and n - len(flat) < w
    else:
        assert set(flat) == set(range(n)) and len(flat) - n < w
    assert all(len(p) == len(DistributedSampler(Items(n), w, r, drop_last=drop_last))
               for r, p in enumerate(plans))


def test_plan_is_deterministic_and_changes_per_epoch():
    a, b = DistributedSampler(Items(50), 2, 1, seed=9), DistributedSampler(Items(50), 2, 1, seed=9)
    a.set_epoch(4)
    b.set_epoch(4)
    assert list(a) == list(b)
    a.set_epoch(5)
    b.set_epoch(4)
    assert list(a) != list(b)
    assert list(DistributedSampler(Items(50), 2, 1, seed=10)) != list(
        DistributedSampler(Items(50), 2, 1, seed=9))


def test_unshuffled_layout_is_pytorchs():
    for w in [1, 2, 3]:
        for r in range(w):
            ours = list(DistributedSampler(Items(23), w, r, shuffle=False))
            theirs = list(torch.utils.data.DistributedSampler(Items(23), w, r, shuffle=False))
            assert ours == theirs


@pytest.mark.parametrize("w1,w2", [(3, 2), (2, 4), (4, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_mid_epoch_at_another_world_size(w1, w2, drop_last):
    n, epoch, taken = 101, 2, 9
    seen = []
    states = []
    for r in range(w1):
        s = DistributedSampler(Items(n), w1, r, seed=5, drop_last=drop_last)
        s.set_epoch(epoch)
        it = iter(s)
        seen += [next(it) for _ in range(taken)]
        states.append(s.state_dict())
    assert all(st == states[0] for st in states), "ranks disagree on the position"
    assert states[0]["consumed"] == taken * w1 and states[0]["epoch"] == epoch
    rest = []
    for r in range(w2):
        s = DistributedSampler(Items(n), w2, r, seed=0)
        s.load_state_dict(states[0])
        s.set_epoch(epoch)  # as a training loop does; keeps the loaded position
        part = list(s)
        assert len(part) == len(s.__class__(Items(n - taken * w1), w2, r, drop_last=drop_last))
        rest += part
    everything = seen + rest
    if drop_last:
        assert len(set(everything)) == len(everything) and n - len(everything) < w2
    else:
        assert set(everything) == set(range(n)) and len(everything) - n < w2
        assert len(set(seen + rest[:n - len(seen)])) == n, "a sample trained twice"
    # The uninterrupted epoch's permutation, in order: the resumed run continues it.
    s = DistributedSampler(Items(n), 1, 0, seed=5, drop_last=False)
    s.set_epoch(epoch)
    order = list(s)
    assert sorted(seen) == sorted(order[:taken * w1])


def test_state_dict_of_another_dataset_is_refused():
    s = DistributedSampler(Items(10), 1, 0)
    with pytest.raises(ValueError, match="dataset of 10 samples, this one has 11"):
        DistributedSampler(Items(11), 1, 0).load_state_dict(s.state_dict())


def test_sampler_on_the_real_ranks(rank, size):
    s = DistributedSampler(Items(1001), seed=1)  # rank and size from hvx
    assert (s.rank, s.num_replicas) == (rank, size)
    s.set_epoch(3)
    mine = list(s)
    every = hvd.allgather_object(mine)
    flat = [i for p in every for i in p]
    assert set(flat) == set(range(1001)) and len(flat) - 1001 < size
    assert len({len(p) for p in every}) == 1


# ------------------------------------------------------------------------------- record files

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def _masked_crc(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _field(number, payload):  # length-delimited
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(features):
    """A serialized tf.train.Example: name -> list of int, float or bytes."""
    entries = b""
    for key, values in sorted(features.items()):
        if isinstance(values[0], bytes):
            feature = _field(1, b"".join(_field(1, v) for v in values))
        elif isinstance(values[0], float):
            feature = _field(2, _field(1, struct.pack("<%df" % len(values), *values)))
        else:
            feature = _field(3, _field(1, b"".join(_varint(v) for v in values)))
        entries += _field(1, _field(1, key.encode()) + _field(2, feature))
    return _field(1, entries)


def _write_records(path, payloads):
    with open(path, "wb") as f:
        for p in payloads:
            header = struct.pack("<Q", len(p))
            f.write(header + struct.pack("<I", _masked_crc(header)) + p +
                    struct.pack("<I", _masked_crc(p)))


@pytest.fixture
def record_dir(tmp_path_factory, rank):
    # Every rank writes its own copy of the same files.
    d = tmp_path_factory.mktemp("records-rank%d" % rank)
    for shard in range(2):
        _write_records(str(d / ("train-%d-of-2" % shard)), [
            _example({"id": [shard * 30 + i], "label": [(shard * 30 + i) % 7],
                      "x": [float(i), 0.5], "name": [b"sample-%d" % (shard * 30 + i)]})
            for i in range(30)])
    return d


def test_record_files_read_back(record_dir):
    files = hvx.data.RecordFiles(str(record_dir / "train-*"))
    assert len(files) == 60 and [os.path.basename(f) for f in files.files] == \
        ["train-0-of-2", "train-1-of-2"]
    ex = files.example(31, ["id", "x", "name"])
    assert ex["id"].tolist() == [31] and ex["x"].tolist() == [1.0, 0.5]
    assert ex["name"] == [b"sample-31"]
    assert files[31] == _example({"id": [31], "label": [31 % 7], "x": [1.0, 0.5],
                                  "name": [b"sample-31"]})
    with pytest.raises(ValueError, match="'missing'"):
        files.example(0, ["missing"])
    with pytest.raises(IndexError):
        files[60]


def test_record_dataset_partitions_over_the_ranks(record_dir, rank, size):
    ds = hvx.data.RecordDataset(str(record_dir / "train-*"), features=["id", "label"], seed=4)
    ds.set_epoch(1)
    ids = [int(item["id"]) for item in ds]
    assert all(int(item["label"]) == int(item["id"]) % 7 for item in ds)
    every = hvd.allgather_object(ids)
    flat = [i for p in every for i in p]
    assert set(flat) == set(range(60)) and len(flat) - 60 < size
    # The same ids as a DistributedSampler over the same number of records.
    s = DistributedSampler(Items(60), seed=4)
    s.set_epoch(1)
    assert ids == list(s)
    loader = torch.utils.data.DataLoader(
        hvx.data.RecordDataset(str(record_dir / "train-*"), features=["id"], seed=4),
        batch_size=None, num_workers=2)
    assert sorted(int(item["id"]) for item in loader) == sorted(
        list(DistributedSampler(Items(60), seed=4)))


def test_corrupt_record_names_file_and_sample(record_dir):
    path = record_dir / "train-1-of-2"
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # inside the first record's payload (its header is bytes 0-11)
    path.write_bytes(bytes(data))
    files = hvx.data.RecordFiles(str(record_dir / "train-*"))
    bad = [i for i in range(30, 60) if _raises(files, i)]
    assert len(bad) == 1
    with pytest.raises(RuntimeError, match="train-1-of-2"):
        files[bad[0]]


def _raises(files, i):
    try:
        files[i]
        return False
    except RuntimeError:
        return True
