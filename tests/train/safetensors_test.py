"""A sharded checkpoint (checkpoint.format SHARDED) is read by other tools as it lies: every shard
file loads with the `safetensors` package alone, the index says which pieces make each tensor, and
the model assembled from them in Python equals, bit for bit, the model of the same run's
single-file checkpoint as the trainer exports it. Needs the `safetensors` package (PyPI): the
torch 2 pass of tools/test has it; Debian's Python has none, and the test skips there saying so.
"""
import json
import os

import pytest
import torch

safetensors_torch = pytest.importorskip(
    "safetensors.torch", reason="the safetensors package is not installed for this Python "
    "(tools/torch_venv setup installs it in the torch 2 venv)")

from trainer_harness import Trainer

STEPS = 12
RUN = 'launch { num_processes: "2" } optimizer { kind: ADAM lr: 0.002 }'


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("safetensors"))
    trainer.config = trainer.tiny_config("cnn", 400, 40, batch=10, epochs=1)
    return trainer


@pytest.fixture(scope="module")
def runs(trainer):
    """The same 12 steps twice: into a sharded checkpoint, and into a single file whose model the
    trainer exports as a state dict."""
    for fmt in ("SHARDED", "SINGLE_FILE"):
        trainer.run(fmt, "--config=" + trainer.config, "--max_steps=%d" % STEPS,
                    overrides=[RUN + ' checkpoint { dir: "%s" format: %s }'
                               % (trainer.path(fmt), fmt)], timeout=300).check()
    trainer.run("export", "--config=" + trainer.config,
                "--export=" + trainer.path("file_model.pt"),
                "--export_from=" + trainer.path("SINGLE_FILE", "ckpt-%d.pt" % STEPS)).check()
    return trainer.path("SHARDED", "ckpt-%d" % STEPS)


def index_of(checkpoint):
    with open(os.path.join(checkpoint, "index.json")) as f:
        return json.load(f)


def assemble(checkpoint, index, name):
    """Tensor `name` from its pieces, as any reader of the index does."""
    entry = index["tensors"][name]
    parts = []
    for piece in entry["pieces"]:
        path = os.path.join(checkpoint, index["files"][piece["file"]]["name"])
        parts.append(safetensors_torch.load_file(path)[piece["key"]].reshape(-1))
    return torch.cat(parts).reshape(entry["shape"])


def test_every_shard_file_loads_with_safetensors_alone(runs):
    index = index_of(runs)
    assert index["format"] == "hvx-checkpoint" and index["step"] == STEPS
    names = sorted(f["name"] for f in index["files"])
    assert [n.split("-shard-")[1] for n in names] == ["0-of-2.safetensors", "1-of-2.safetensors"]
    keys = set()
    for name in names:
        loaded = safetensors_torch.load_file(os.path.join(runs, name))
        assert loaded, name
        keys |= set(loaded)
    # Every piece the index names is in a file, and nothing else is.
    pieces = {p["key"] for t in index["tensors"].values() for p in t["pieces"]}
    assert keys == pieces


def test_the_model_assembled_in_python_is_the_single_files_bit_for_bit(trainer, runs):
    index = index_of(runs)
    exported = torch.load(trainer.path("file_model.pt"))
    assert exported, "the export of the single file is empty"
    for name, tensor in exported.items():
        mine = assemble(runs, index, "model/" + name)
        assert mine.dtype == tensor.dtype and mine.shape == tensor.shape, name
        assert torch.equal(mine, tensor), name


def test_the_optimizer_state_has_each_parameters_shape(runs):
    index = index_of(runs)
    params = {n[len("model/"):]: t["shape"] for n, t in index["tensors"].items()
              if n.startswith("model/")}
    moments = [n for n in index["tensors"] if n.endswith("/exp_avg")]
    assert moments
    for name in moments:
        param = name[len("optimizer/"):-len("/exp_avg")]
        assert index["tensors"][name]["shape"] == params[param], name
        step = assemble(runs, index, "optimizer/%s/step" % param)
        assert step.item() == STEPS, name


def test_hvx_torch_loads_the_trainers_checkpoint_into_the_python_model(trainer, runs):
    """hvx.torch.load_checkpoint (one process) takes the trainer's sharded checkpoint into
    hvx.models.SmallCnn and a torch Adam: the model equals the single file's export bit for bit
    and the optimizer has every parameter's moments and step."""
    import hvx.models
    import hvx.torch as hvd
    hvd.init()
    try:
        model = hvx.models.SmallCnn(num_classes=10)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.002)
        info = hvd.load_checkpoint(runs, model, optimizer)
    finally:
        hvd.shutdown()
    assert info["step"] == STEPS and info["world_size"] == 2
    exported = torch.load(trainer.path("file_model.pt"))
    state = model.state_dict()
    for name, tensor in exported.items():
        assert torch.equal(state[name], tensor), name
    moments = optimizer.state_dict()["state"]
    assert len(moments) == len(list(model.parameters()))
    for entry in moments.values():
        assert set(entry) >= {"exp_avg", "exp_avg_sq", "step"} and float(entry["step"]) == STEPS
