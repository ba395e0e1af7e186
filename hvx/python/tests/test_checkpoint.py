"""hvx.torch's sharded checkpoints (save_checkpoint, load_checkpoint) on every rank of the job:
a run saved and loaded continues exactly, a ShardedOptimizer's checkpoint loads into a replicated
optimizer and back (each rank reading only its slices), failures raise on every rank, and Python's
safetensors reads the files where it is installed."""
import glob
import json
import os

import pytest
import torch

import hvx.torch as hvd
import hvx.torch.checkpoint as checkpoint_module


def shared_dir(name):
    """A directory every rank of this one-host job sees (the tests run in one working
    directory)."""
    return os.path.abspath("checkpoint_%s_%d" % (name, hvd.size()))


class Net(torch.nn.Module):
    def __init__(self, width=10):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, width)
        self.bn = torch.nn.BatchNorm1d(width)
        self.fc2 = torch.nn.Linear(width, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def make(seed, sharded=False, stage=2, width=10):
    torch.manual_seed(seed)
    model = Net(width)
    inner = torch.optim.Adam(model.parameters(), lr=0.01)
    if sharded:
        opt = hvd.ShardedOptimizer(inner, named_parameters=model.named_parameters(), stage=stage)
    else:
        opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters())
    return model, opt


def batch(step):
    g = torch.Generator().manual_seed(1000 * step + hvd.rank())
    return torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)


def train(model, opt, steps, first):
    losses = []
    for step in range(first, first + steps):
        x, y = batch(step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_saved_run_loaded_elsewhere_continues_exactly():
    path = shared_dir("exact")
    model, opt = make(1)
    train(model, opt, 3, 0)
    hvd.save_checkpoint(path, model, opt, step=3, metadata={"epoch": 1, "note": "after 3"})
    assert os.path.exists(os.path.join(path, "index.json"))
    expected = train(model, opt, 2, 3)

    other, other_opt = make(2)
    info = hvd.load_checkpoint(path, other, other_opt)
    assert info["step"] == 3 and info["metadata"] == {"epoch": 1, "note": "after 3"}
    assert info["world_size"] == hvd.size()
    assert train(other, other_opt, 2, 3) == expected


def test_each_rank_writes_about_its_share_and_the_index_names_every_file():
    path = shared_dir("share")
    model, opt = make(1)
    train(model, opt, 1, 0)
    hvd.save_checkpoint(path, model, opt, step=1)
    index = json.load(open(os.path.join(path, "index.json")))
    assert index["world_size"] == hvd.size() and len(index["files"]) == hvd.size()
    assert sorted(f["name"] for f in index["files"]) == sorted(
        os.path.basename(p) for p in glob.glob(os.path.join(path, "*.safetensors")))
    sizes = [f["bytes"] for f in index["files"]]
    total = sum(sizes)
    # Whole tensors, largest first to the rank with least: no rank writes more than its share plus
    # the largest tensor (fc1's and its two Adam moments, 60 floats each).
    assert max(sizes) <= total / hvd.size() + 2 * 60 * 4 + 4096, sizes
    names = set(index["tensors"])
    assert {"model/fc1.weight", "model/bn.running_mean", "optimizer/fc1.weight/exp_avg",
            "optimizer/fc1.weight/step"} <= names, names


def test_a_sharded_optimizer_loads_into_a_replicated_one_and_back():
    path = shared_dir("sharded")
    # Wide enough that the state spans many of the index's 64 KiB checksum blocks.
    wide = 65536
    model, opt = make(1, sharded=True, width=wide)
    train(model, opt, 3, 0)
    hvd.save_checkpoint(path, model, opt, step=3)
    expected = train(model, opt, 2, 3)

    plain, plain_opt = make(5, width=wide)
    whole = hvd.load_checkpoint(path, plain, plain_opt)
    torch.testing.assert_close(train(plain, plain_opt, 2, 3), expected, rtol=1e-5, atol=0)

    again, again_opt = make(6, sharded=True, stage=1, width=wide)
    slices = hvd.load_checkpoint(path, again, again_opt)
    torch.testing.assert_close(train(again, again_opt, 2, 3), expected, rtol=1e-5, atol=0)
    if hvd.size() > 1:
        # Each rank read the model and its slices of the state: of the two Adam moments (as large
        # as the model together), about 1/size each.
        model_bytes = sum(t.numel() * 4 for t in model.state_dict().values())
        share = model_bytes + 2 * model_bytes / hvd.size()
        assert slices["bytes_read"] < share + 8 * 65536 < whole["bytes_read"], (slices, whole)


def test_a_replicated_checkpoint_loads_into_a_sharded_optimizer_with_its_slices():
    path = shared_dir("to_sharded")
    model, opt = make(1)
    train(model, opt, 2, 0)
    hvd.save_checkpoint(path, model, opt, step=2)
    sharded, sharded_opt = make(3, sharded=True)
    hvd.load_checkpoint(path, sharded, sharded_opt)
    state = opt.state_dict()["state"]
    inner = sharded_opt._inner.state_dict()["state"]
    for i, p in enumerate(sharded_opt._params):
        b, n = sharded_opt._ranges[i]
        assert torch.equal(inner[i]["exp_avg"], state[i]["exp_avg"].reshape(-1)[b:b + n])
        assert float(inner[i]["step"]) == float(state[i]["step"]) == 2


def test_a_damaged_file_fails_every_rank_naming_it():
    path = shared_dir("damaged")
    model, opt = make(1)
    hvd.save_checkpoint(path, model, opt, step=0)
    if hvd.rank() == 0:
        index = json.load(open(os.path.join(path, "index.json")))
        victim = os.path.join(path, index["files"][-1]["name"])
        with open(victim, "r+b") as f:
            f.seek(os.path.getsize(victim) - 3)
            f.write(b"\xff\xfe\xfd")
    hvd.barrier()
    with pytest.raises(RuntimeError, match="checkpoint load of .* failed: rank .*safetensors"):
        hvd.load_checkpoint(path, *make(2))


def test_another_model_is_refused_naming_the_tensors():
    path = shared_dir("other_model")
    model, opt = make(1)
    hvd.save_checkpoint(path, model, opt)
    other = torch.nn.Linear(6, 3)
    before = other.weight.detach().clone()
    with pytest.raises(RuntimeError, match="does not match the model: missing .*'weight'"):
        hvd.load_checkpoint(path, other)
    assert torch.equal(other.weight, before)


def test_saving_again_replaces_the_checkpoint_and_its_old_files():
    path = shared_dir("again")
    model, opt = make(1)
    hvd.save_checkpoint(path, model, opt, step=1)
    first = set(os.listdir(path))
    hvd.barrier()
    train(model, opt, 1, 0)
    hvd.save_checkpoint(path, model, opt, step=2)
    hvd.barrier()
    files = set(os.listdir(path))
    assert not (first & files) - {"index.json"}, (first, files)
    other, other_opt = make(2)
    assert hvd.load_checkpoint(path, other, other_opt)["step"] == 2
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a, b)


def test_python_safetensors_reads_every_piece():
    safetensors = pytest.importorskip("safetensors.torch")
    path = shared_dir("safetensors")
    model, opt = make(1, sharded=True)
    train(model, opt, 1, 0)
    hvd.save_checkpoint(path, model, opt)
    index = json.load(open(os.path.join(path, "index.json")))
    files = [safetensors.load_file(os.path.join(path, f["name"])) for f in index["files"]]
    for name, tensor in index["tensors"].items():
        parts = []
        for piece in sorted(tensor["pieces"], key=lambda p: p["elements"][0]):
            parts.append(files[piece["file"]][piece["key"]].reshape(-1))
        whole = torch.cat(parts).reshape(tensor["shape"])
        if name == "model/fc2.weight":
            assert torch.equal(whole, model.fc2.weight.detach())


def test_what_a_rank_cannot_store_fails_every_rank_before_anything_is_written():
    path = shared_dir("refused")
    model, opt = make(1)
    with pytest.raises(RuntimeError, match="step must be an integer"):
        hvd.save_checkpoint(path, model, opt, step=1.5)
    with pytest.raises(RuntimeError, match="not JSON serializable"):
        hvd.save_checkpoint(path, model, opt, metadata={"when": object()})
    # A buffer of a dtype the format has no name for, on the rank that would write it only.
    if hvd.rank() == hvd.size() - 1:
        model.register_buffer("phase", torch.zeros(3, dtype=torch.complex64))
    with pytest.raises(RuntimeError, match="model/phase is torch.complex64"):
        hvd.save_checkpoint(path, model, opt)
    assert not os.path.exists(path) or not os.listdir(path)


def test_a_save_that_fails_on_one_rank_removes_its_files_and_keeps_the_checkpoint(monkeypatch):
    path = shared_dir("failed_save")
    model, opt = make(1)
    hvd.save_checkpoint(path, model, opt, step=1)
    hvd.barrier()
    before = sorted(os.listdir(path))
    if hvd.rank() == hvd.size() - 1:
        def full_disk(*args):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(checkpoint_module._C, "checkpoint_write_shard", full_disk)
    train(model, opt, 1, 0)
    with pytest.raises(RuntimeError, match="rank %d .*No space left on device" % (hvd.size() - 1)):
        hvd.save_checkpoint(path, model, opt, step=2)
    monkeypatch.undo()
    hvd.barrier()
    assert sorted(os.listdir(path)) == before
    assert hvd.load_checkpoint(path, *make(2))["step"] == 1
