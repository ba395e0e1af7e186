"""Sharded checkpoints of a model and its optimizer, in the trainer's format
(hvx/train/sharded_checkpoint.h): a directory of safetensors files, one per rank, and index.json,
written last, which maps each tensor to its file and byte range with every file's checksums.

    hvd.save_checkpoint("/ckpt/run/ckpt-1000", model, optimizer, step=1000)
    info = hvd.load_checkpoint("/ckpt/run/ckpt-1000", model, optimizer)   # any world size
    info["step"], info["metadata"], info["bytes_read"]

Both are collective over every rank. Saving, each rank writes about 1/size of the bytes: a
ShardedOptimizer's state where it lives (each rank its slices), and everything the ranks hold alike
(parameters, floating-point buffers averaged over the ranks, a replicated optimizer's state)
divided among them, whole tensors, largest first to the rank that has written least. The index is
written by rank 0 only once every rank's file is on disk and rank 0 sees them all (the directory
must be on a file system every host mounts), so a directory without index.json is not a
checkpoint, and a failure raises on every rank. Loading, each rank reads the model and only the
optimizer state it holds (its slices for a ShardedOptimizer), whatever world size and optimizer
wrote the checkpoint; the trainer's checkpoints of hvx.models.SmallCnn load too. The optimizer may
be a plain torch optimizer over the model's parameters, a DistributedOptimizer or a
ShardedOptimizer; tensors are named "model/<state_dict key>" and "optimizer/<parameter>/<field>",
and Python's safetensors package reads every file.
"""

import json
import math
import os
import socket
import warnings

import torch

from hvx import _C
from hvx.torch import mpi_ops
from hvx.torch.sharded import ShardedOptimizer

_DTYPES = {
    torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_TORCH_DTYPES = {name: dtype for dtype, name in _DTYPES.items()}


def _dtype_name(tensor, name):
    if tensor.dtype not in _DTYPES:
        raise ValueError("checkpoint: %s is %s, which the format does not store" %
                         (name, tensor.dtype))
    return _DTYPES[tensor.dtype]


def _param_names(model, optimizer):
    """(name, parameter, index in the optimizer's state_dict order) of each optimized parameter,
    named as in model.named_parameters()."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    params = optimizer._params if isinstance(optimizer, ShardedOptimizer) else [
        p for g in optimizer.param_groups for p in g["params"]]
    out = []
    for i, p in enumerate(params):
        if id(p) not in name_of:
            raise ValueError("checkpoint: the optimizer's parameter %d is not one of the model's "
                             "parameters" % i)
        out.append((name_of[id(p)], p, i))
    return out


def _jsonable(value):
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if torch.is_tensor(value) and value.numel() == 1:
        return value.item()
    raise ValueError("checkpoint: %r cannot be stored in the index's metadata" % (value,))


def _optimizer_state(model, optimizer):
    """The optimizer's state as (tensor name, value, slice): slice is None for a tensor every rank
    holds alike, or (begin, count, whole shape) for this rank's slice of a ShardedOptimizer's.
    Also the non-tensor values by "<parameter>/<field>" and the param groups' options."""
    sharded = isinstance(optimizer, ShardedOptimizer)
    inner = optimizer._inner if sharded else optimizer
    state = inner.state_dict()["state"]
    tensors, values = [], {}
    for name, p, i in _param_names(model, optimizer):
        for key, value in sorted(state.get(i, {}).items()):
            full = "optimizer/%s/%s" % (name, key)
            if not torch.is_tensor(value):
                values["%s/%s" % (name, key)] = _jsonable(value)
            elif key == "step":
                # As the trainer stores it: an int64 scalar.
                tensors.append((full, torch.tensor(int(value.item()), dtype=torch.int64), None))
            elif sharded and value.dim() == 1 and value.numel() == optimizer._ranges[i][1]:
                b, n = optimizer._ranges[i]
                tensors.append((full, value, (b, n, list(p.shape))))
            else:
                tensors.append((full, value, None))
    groups = [{k: _jsonable(v) for k, v in g.items() if k != "params"}
              for g in optimizer.param_groups]
    return tensors, values, groups


def _model_state(model):
    """model.state_dict()'s tensors, floating-point buffers averaged over the ranks (as the
    trainer's checkpoints hold them: the model evaluation uses)."""
    params = {n for n, _ in model.named_parameters()}
    out = []
    for key, value in model.state_dict().items():
        if not torch.is_tensor(value):
            continue
        if key not in params and value.is_floating_point() and mpi_ops.size() > 1:
            value = mpi_ops.allreduce(value.detach(), name="checkpoint.buffer." + key)
        out.append(("model/" + key, value.detach(), None))
    return out


def _divide(alike, size):
    """The rank that writes each of the tensors every rank holds alike: largest first to the rank
    that has written least (the same on every rank)."""
    load = [0] * size
    owner = {}
    for name, value, _ in sorted(alike, key=lambda t: (-t[1].numel() * t[1].element_size(),
                                                       t[0])):
        r = min(range(size), key=lambda q: (load[q], q))
        owner[name] = r
        load[r] += value.numel() * value.element_size()
    return owner


def _same_everywhere_error(local_error, what):
    """Every rank's error (or None), gathered; raises one RuntimeError naming each failed rank
    on every rank. Returns every rank's host name."""
    errors = mpi_ops.allgather_object((socket.gethostname(), local_error),
                                      name="checkpoint." + what)
    failed = ["rank %d (host %s): %s" % (r, host, e)
              for r, (host, e) in enumerate(errors) if e is not None]
    if failed:
        raise RuntimeError("checkpoint %s failed: %s" % (what, "; ".join(failed)))
    return [host for host, _ in errors]


def _checked(model, optimizer, step, metadata):
    """What a save needs that each rank can check alone, before any collective: an integer step,
    JSON-able metadata, a ShardedOptimizer over every rank, and tensors of dtypes the format
    stores. Returns (step, the optimizer's state, its non-tensor values, its param groups)."""
    if isinstance(step, bool) or int(step) != step:
        raise ValueError("step must be an integer, got %r" % (step,))
    json.dumps(metadata if metadata is not None else {})
    if isinstance(optimizer, ShardedOptimizer) and optimizer._process_set.size() != \
            mpi_ops.size():
        raise ValueError("a ShardedOptimizer over a process set of %d of the %d ranks: "
                         "checkpoints hold the slices of one set over every rank" %
                         (optimizer._process_set.size(), mpi_ops.size()))
    state, values, groups = ([], {}, []) if optimizer is None else _optimizer_state(model,
                                                                                     optimizer)
    for key, value in model.state_dict().items():
        if torch.is_tensor(value):
            _dtype_name(value, "model/" + key)
    for name, value, _ in state:
        _dtype_name(value, name)
    return int(step), state, values, groups


def save_checkpoint(path, model, optimizer=None, step=0, metadata=None):
    """Writes `model` (and `optimizer`) as the checkpoint directory `path`; collective. `step` (an
    integer) and `metadata` (JSON-able) come back from load_checkpoint. A checkpoint already at
    `path` is replaced: the new index replaces the old at once, then the old files the new one
    does not name go. Any rank's failure raises RuntimeError on every rank naming it; the files
    of a failed save are removed and the checkpoint at `path`, if any, stays as it was."""
    size, rank = mpi_ops.size(), mpi_ops.rank()
    error = None
    try:
        step, state, values, groups = _checked(model, optimizer, step, metadata)
    except Exception as e:  # noqa: BLE001 (every rank must hear of it)
        error = "%s: %s" % (type(e).__name__, e)
    _same_everywhere_error(error, "save of %s" % path)
    tensors = _model_state(model) + state
    owner = _divide([t for t in tensors if t[2] is None], size)
    token = mpi_ops.broadcast_object(os.urandom(4).hex() if rank == 0 else None, 0,
                                     name="checkpoint.token")
    file_path = os.path.join(path, _C.checkpoint_shard_file_name(token, rank, size))
    error, shard = None, None
    try:
        pieces = []
        for name, value, piece in tensors:
            if piece is None and owner[name] != rank:
                continue
            data = value.detach().to("cpu").contiguous().reshape(-1)
            if piece is None:
                pieces.append((name, _dtype_name(value, name), list(value.shape), 0,
                               data.numel(), data))
            elif piece[1] > 0:
                pieces.append((name, _dtype_name(value, name), piece[2], piece[0], piece[1],
                               data))
        os.makedirs(path, exist_ok=True)
        shard = _C.checkpoint_write_shard(
            path, os.path.basename(file_path), pieces,
            {"format": "hvx-checkpoint shard", "step": str(step),
             "rank": "%d of %d" % (rank, size)})
    except Exception as e:  # noqa: BLE001
        error = "%s: %s" % (type(e).__name__, e)
    try:
        hosts = _same_everywhere_error(error, "save of %s" % path)
        shards = mpi_ops.allgather_object(shard, name="checkpoint.shards")
        error = None
        if rank == 0:
            try:
                _commit(path, step, shards, hosts, {
                    "format": "hvx.torch", "step": step, "world_size": size,
                    "optimizer_shard": ("SLICES" if isinstance(optimizer, ShardedOptimizer)
                                        else "NONE"),
                    "optimizer_values": values, "param_groups": groups,
                    "scalar_state": [name for name, value, _ in state
                                     if torch.is_tensor(value) and value.dim() == 0],
                    "user": metadata if metadata is not None else {}})
            except Exception as e:  # noqa: BLE001
                error = "%s: %s" % (type(e).__name__, e)
        _same_everywhere_error(error, "commit of %s" % path)
    except RuntimeError:
        # No index names this save's files: each rank removes its own.
        if shard is not None and os.path.exists(file_path):
            os.remove(file_path)
        raise


def _commit(path, step, shards, hosts, metadata):
    """Rank 0: checks it sees every rank's file whole, writes the index, then removes the files
    of the index it replaced that the new one does not name."""
    for r, text in enumerate(shards):
        shard = json.loads(text)
        file_path = os.path.join(path, shard["name"])
        seen = os.stat(file_path).st_size if os.path.exists(file_path) else None
        if seen != shard["bytes"]:
            raise RuntimeError(
                "rank %d on host %s wrote %s (%d bytes), which rank 0 on host %s does not see%s: "
                "the checkpoint directory must be one file system that every host mounts" %
                (r, hosts[r], file_path, shard["bytes"], socket.gethostname(),
                 "" if seen is None else " whole (%d bytes)" % seen))
    replaced = []
    index_path = os.path.join(path, "index.json")
    if os.path.exists(index_path):
        try:
            with open(index_path) as f:
                replaced = [entry["name"] for entry in json.load(f)["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            replaced = []
    _C.checkpoint_commit_index(path, step, shards, json.dumps(metadata))
    kept = {json.loads(text)["name"] for text in shards}
    for name in replaced:
        if name not in kept and "/" not in name:
            try:
                os.remove(os.path.join(path, name))
            except FileNotFoundError:
                pass
            except OSError as e:  # the checkpoint is whole: a file left over is only space
                warnings.warn("checkpoint %s: could not remove %s, which the replaced index "
                              "named: %s" % (path, name, e))


def _read(reader, tensors, name, shape, begin=0, count=None):
    """Elements [begin, begin + count) of the checkpoint's tensor `name` (all of it by default)
    as a CPU tensor of the dtype it was stored in, once its whole shape is checked to be `shape`
    (the caller converts)."""
    entry = tensors.get(name)
    if entry is None:
        raise ValueError("checkpoint has no %s" % name)
    shape = list(shape)
    if entry["shape"] != shape:
        raise ValueError("checkpoint's %s is %s, here %s" % (name, entry["shape"], shape))
    dtype = _TORCH_DTYPES.get(entry["dtype"])
    if dtype is None:
        raise ValueError("checkpoint's %s is %s, which hvx.torch does not read" %
                         (name, entry["dtype"]))
    whole = math.prod(shape)
    n = whole if count is None else count
    out = torch.empty(n, dtype=dtype)
    if n > 0:
        reader.read(name, begin, out)
    return out if count is not None else out.reshape(shape)


def load_checkpoint(path, model, optimizer=None, strict=True):
    """Loads the checkpoint directory `path` into `model` (and `optimizer`); collective. Returns
    {"step", "metadata" (save_checkpoint's), "world_size" (that wrote it), "bytes_read" (by this
    rank)}. Any rank's failure (a tensor the checkpoint lacks or has of another shape, with
    `strict` one the model lacks, a damaged file) raises RuntimeError naming that rank and what
    was wrong on every rank; the model and optimizer change only once every rank has read its
    part (torch's own load_state_dict then refuses the state of another kind of optimizer)."""
    error, read = None, None
    try:
        read = _load(path, model, optimizer, strict)
    except Exception as e:  # noqa: BLE001 (every rank must hear of it)
        error = "%s: %s" % (type(e).__name__, e)
    _same_everywhere_error(error, "load of %s" % path)
    apply, result = read
    apply()
    return result


def _load(path, model, optimizer, strict):
    reader = _C.CheckpointReader(path)
    index = json.loads(reader.index())
    tensors = index["tensors"]
    meta = index.get("metadata", {})
    state = model.state_dict()
    stored = {n[len("model/"):] for n in tensors if n.startswith("model/")}
    if strict:
        missing = sorted(k for k in state if torch.is_tensor(state[k]) and k not in stored)
        unexpected = sorted(stored - set(state))
        if missing or unexpected:
            raise ValueError("checkpoint %s does not match the model: missing %s, unexpected %s"
                             % (path, missing or "none", unexpected or "none"))
    loaded = {}
    for key, live in state.items():
        if torch.is_tensor(live) and key in stored:
            value = _read(reader, tensors, "model/" + key, live.shape)
            loaded[key] = value.to(live.dtype)
    take_optimizer = (_load_optimizer(reader, tensors, meta, model, optimizer)
                      if optimizer is not None else (lambda: None))

    def apply():
        """Takes what was read, once every rank has read its part."""
        with torch.no_grad():
            for key, value in loaded.items():
                state[key].copy_(value)
        take_optimizer()

    return apply, {"step": meta.get("step", index.get("step", 0)), "metadata": meta.get("user", {}), "world_size": index["world_size"],
            "bytes_read": reader.bytes_read}


def _load_optimizer(reader, tensors, meta, model, optimizer):
    """Reads this rank's part of the optimizer's state; returns what loads it."""
    sharded = isinstance(optimizer, ShardedOptimizer)
    values = meta.get("optimizer_values", {})
    scalar_state = set(meta.get("scalar_state", []))
    state = {}
    for name, p, i in _param_names(model, optimizer):
        prefix = "optimizer/%s/" % name
        entry = {}
        for full in sorted(t for t in tensors if t.startswith(prefix)):
            key = full[len(prefix):]
            stored_shape = tensors[full]["shape"]
            if key == "step":
                entry[key] = torch.tensor(float(_read(reader, tensors, full, stored_shape).item()))
            elif sharded and stored_shape == list(p.shape) and full not in scalar_state:
                # Per element of the parameter: this rank's slice.
                b, n = optimizer._ranges[i]
                entry[key] = _read(reader, tensors, full, p.shape, begin=b, count=n).to(p.dtype)
            else:
                entry[key] = _read(reader, tensors, full, stored_shape)
        for key, value in values.items():
            if key.startswith(name + "/"):
                entry[key[len(name) + 1:]] = value
        if entry:
            state[i] = entry
    groups = meta.get("param_groups")
    inner = optimizer._inner if sharded else optimizer
    target = inner.state_dict()["param_groups"]
    new_groups = []
    for k, own in enumerate(target):
        group = dict(own)
        if groups is not None and k < len(groups):
            for key, value in groups[k].items():
                group[key] = tuple(value) if isinstance(own.get(key), tuple) else value
        new_groups.append(group)

    def take():
        inner.load_state_dict({"state": state, "param_groups": new_groups})
        if sharded:
            for outer, group in zip(optimizer.param_groups, new_groups):
                for key, value in group.items():
                    if key != "params":
                        outer[key] = value
            optimizer._consolidated = None

    return take
