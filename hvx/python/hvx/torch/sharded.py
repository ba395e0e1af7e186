"""ShardedOptimizer: ZeRO stages 1 and 2 for any torch optimizer, which Horovod does not have.

    opt = hvd.ShardedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-3),
                               named_parameters=model.named_parameters(), stage=2)
    loss.backward(); opt.step(); opt.zero_grad()

Each parameter is flattened and cut into one slice per rank of the process set (the rows a
reducescatter gives each rank: the first numel % size ranks hold one more element), so every rank
keeps and steps 1/size of the optimizer state whatever the tensors' sizes. The wrapped optimizer
steps this rank's slices; step() then allgathers every parameter ("zero.param.<name>").

- stage=1: each gradient is allreduced as DistributedOptimizer does ("grad.<name>"); a slice's
  gradient is its part of the average.
- stage=2: each gradient is reduce-scattered as soon as backward produced it, so this rank keeps
  only its slice of the average; the parameters' .grad are released by step().

As torch.distributed.optim.ZeroRedundancyOptimizer: param_groups are the whole parameters' (an LR
scheduler works on them), consolidate_state_dict(to=0) gathers the state on one rank, whose
state_dict() then loads into a plain optimizer over the same parameters, and load_state_dict()
takes such a state (from a plain optimizer or a ShardedOptimizer of any size or stage). Unlike it,
the optimizer is given constructed and gradients are averaged here (no DDP needed), and the split
is by element, not by whole tensors.
"""

import torch

from hvx.torch import mpi_ops
from hvx.torch.compression import Compression
from hvx.torch.mpi_ops import Average, global_process_set
from hvx.torch.optimizer import _checked_names, _register_gradient_hook


def _slice_of(numel, size, rank):
    begin = sum(numel // size + (1 if q < numel % size else 0) for q in range(rank))
    return begin, numel // size + (1 if rank < numel % size else 0)


class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, optimizer, named_parameters=None, stage=1, compression=Compression.none,
                 backward_passes_per_step=1, process_set=global_process_set):
        if stage not in (1, 2):
            raise ValueError("ShardedOptimizer: stage must be 1 or 2, got %r" % (stage,))
        if any(optimizer.state.values()):
            raise ValueError("ShardedOptimizer: the optimizer has state already; wrap it before "
                             "its first step and load state with load_state_dict()")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %d"
                             % backward_passes_per_step)
        groups = [dict(g) for g in optimizer.param_groups]
        params = [p for g in groups for p in g["params"]]
        named = _checked_names(named_parameters, groups, "sharded")
        name_of = {id(p): n for n, p in named}
        self._names = [name_of[id(p)] for p in params]
        self._stage = stage
        self._compression = compression
        self._process_set = process_set
        self._passes = backward_passes_per_step
        self._params = params
        size, rank = process_set.size(), process_set.rank()
        self._ranges = [_slice_of(p.numel(), size, rank) for p in params]
        with torch.no_grad():
            self._slices = [p.detach().reshape(-1)[b:b + n].clone()
                            for p, (b, n) in zip(params, self._ranges)]
        torch.optim.Optimizer.__init__(self, groups, optimizer.defaults)
        # The wrapped optimizer keeps its class and options, and steps the slices.
        self._inner = optimizer
        k = 0
        for group in optimizer.param_groups:
            group["params"] = self._slices[k:k + len(group["params"])]
            k += len(group["params"])
        optimizer.state.clear()
        self._handles = {}
        self._delay = {p: backward_passes_per_step for p in params}
        self._consolidated = None
        self._hooks = [_register_gradient_hook(p, self._make_hook(i))
                       for i, p in enumerate(params) if p.requires_grad]

    # ------------------------------------------------------------------------------- exchange

    def _submit(self, i):
        p = self._params[i]
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        compressed, ctx = self._compression.compress(p.grad)
        name = "grad." + self._names[i]
        if self._stage == 2:
            handle = mpi_ops.reducescatter_async(compressed.reshape(-1), name=name, op=Average,
                                                 process_set=self._process_set)
        else:
            handle = mpi_ops.allreduce_async_(compressed, name=name, op=Average,
                                              process_set=self._process_set)
        self._handles[i] = (handle, compressed, ctx)

    def _make_hook(self, i):
        p = self._params[i]

        def hook(*ignore):
            if i in self._handles or self._delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
            self._delay[p] -= 1
            if self._delay[p] == 0:
                self._submit(i)
        return hook

    def synchronize(self):
        """Waits for every gradient's exchange (starting those backward did not, as zeros where
        there is no gradient); each slice's .grad then holds its part of the average."""
        for i, p in enumerate(self._params):
            if p.requires_grad and i not in self._handles:
                self._submit(i)
        try:
            for i, (handle, compressed, ctx) in sorted(self._handles.items()):
                output = self._compression.decompress(mpi_ops.synchronize(handle), ctx)
                p, s, (b, n) = self._params[i], self._slices[i], self._ranges[i]
                if self._stage == 2:
                    s.grad = output.to(p.dtype).reshape(-1)
                    p.grad = None
                else:
                    if output is not p.grad:
                        p.grad.copy_(output)
                    s.grad = p.grad.reshape(-1)[b:b + n]
        finally:
            self._handles.clear()
            for p in self._params:
                self._delay[p] = self._passes

    # ----------------------------------------------------------------------------------- step

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.synchronize()
        # Options (lr from a scheduler, ...) set on the whole parameters' groups apply.
        for outer, inner in zip(self.param_groups, self._inner.param_groups):
            for key, value in outer.items():
                if key != "params":
                    inner[key] = value
        with torch.no_grad():
            for p, s, (b, n) in zip(self._params, self._slices, self._ranges):
                s.copy_(p.detach().reshape(-1)[b:b + n])
            self._inner.step()
            handles = [mpi_ops.allgather_async(s, name="zero.param." + name,
                                               process_set=self._process_set)
                       for s, name in zip(self._slices, self._names)]
            for p, h in zip(self._params, handles):
                p.copy_(mpi_ops.synchronize(h).view_as(p))
        return loss

    def zero_grad(self, set_to_none=True):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        for p in self._params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()
        for s in self._slices:
            s.grad = None

    # ---------------------------------------------------------------------------------- state

    def consolidate_state_dict(self, to=0):
        """Collective over the process set: rank `to` (a global rank) receives every rank's
        slices of the state, kept for its state_dict()."""
        inner = self._inner.state_dict()
        full = {}
        handles = []
        for i, p in enumerate(self._params):
            entry = inner["state"].get(i)
            if entry is None:
                continue
            out = {}
            for key, value in sorted(entry.items()):
                if torch.is_tensor(value) and value.dim() == 1 and \
                        value.numel() == self._ranges[i][1]:
                    handles.append((out, key, p, mpi_ops.allgather_async(
                        value, name="zero.state.%s.%s" % (self._names[i], key),
                        process_set=self._process_set)))
                else:
                    # Step counts, the same on every rank; copies, as the live ones change.
                    out[key] = value.clone() if torch.is_tensor(value) else value
            full[i] = out
        for out, key, p, h in handles:
            out[key] = mpi_ops.synchronize(h).view_as(p)
        groups = []
        for g, inner_group in zip(self.param_groups, inner["param_groups"]):
            group = {k: v for k, v in g.items() if k != "params"}
            group["params"] = inner_group["params"]
            groups.append(group)
        self._consolidated = ({"state": full, "param_groups": groups}
                              if mpi_ops.rank() == to else None)

    def state_dict(self):
        """The state consolidate_state_dict(to=this rank) gathered, as a plain optimizer over
        the whole parameters has it."""
        if self._consolidated is None:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Call "
                               "consolidate_state_dict(to=%d) on every rank first"
                               % mpi_ops.rank())
        return self._consolidated

    def load_state_dict(self, state_dict):
        """Takes a plain optimizer's state over the same parameters (what state_dict() returns),
        keeping this rank's slices."""
        state = {}
        for i, entry in state_dict["state"].items():
            i = int(i)
            b, n = self._ranges[i]
            numel = self._params[i].numel()
            # Copies throughout: PyTorch 2's load_state_dict keeps the tensors it is given, so a
            # step count shared with the state's source would advance twice per step.
            state[i] = {key: (value.reshape(-1)[b:b + n].clone()
                              if torch.is_tensor(value) and value.dim() > 0 and
                              value.numel() == numel else
                              value.clone() if torch.is_tensor(value) else value)
                        for key, value in entry.items()}
        inner_groups = []
        for g, own in zip(state_dict["param_groups"], self._inner.state_dict()["param_groups"]):
            group = dict(g)
            group["params"] = own["params"]
            inner_groups.append(group)
        self._inner.load_state_dict({"state": state, "param_groups": inner_groups})
        for outer, g in zip(self.param_groups, state_dict["param_groups"]):
            for key, value in g.items():
                if key != "params":
                    outer[key] = value
        self._consolidated = None

    def state_bytes(self):
        """Bytes of optimizer state this rank holds."""
        return sum(v.numel() * v.element_size() for entry in self._inner.state.values()
                   for v in entry.values() if torch.is_tensor(v))
