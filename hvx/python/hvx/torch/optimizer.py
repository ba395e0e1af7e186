"""DistributedOptimizer and state broadcast, as horovod.torch's.

DistributedOptimizer(opt, named_parameters=model.named_parameters()) returns an optimizer of a
subclass of opt's class sharing opt's param_groups. A hook on each parameter's gradient
accumulator (register_post_accumulate_grad_hook on PyTorch >= 2.1, which torch.compile'd models
also run) starts the allreduce of that gradient (named after the parameter) as soon as backward
has produced it, so communication overlaps the rest of backward; step() waits for all, writes the
averages into .grad and steps. A parameter that got no gradient on this rank (an unused branch)
is exchanged as zeros by synchronize(), so no rank waits for it.
"""

import contextlib
import warnings

import torch

from hvx.torch import mpi_ops
from hvx.torch.compression import Compression
from hvx.torch.mpi_ops import Adasum, Average, global_process_set


def _register_gradient_hook(p, hook):
    """Runs hook() each time backward has produced p's gradient; returns what keeps it alive."""
    if hasattr(p, "register_post_accumulate_grad_hook"):
        # PyTorch >= 2.1: runs once p.grad holds this backward's gradient, also for
        # torch.compile'd models and compiled autograd.
        return p.register_post_accumulate_grad_hook(hook)
    # The accumulator of p's gradient; its hook runs once the gradient is final (as Horovod
    # does).
    accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
    accumulator.register_hook(hook)
    return accumulator


def _checked_names(named_parameters, param_groups, prefix):
    """named_parameters as a list of (name, parameter), checked as Horovod checks them; names of
    the form "<prefix>.noname.<group>.<index>" when None."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("%s.noname.%d.%d" % (prefix, g, i), p)
                            for g, group in enumerate(param_groups)
                            for i, p in enumerate(group["params"])]
    if any(not isinstance(entry, tuple) for entry in named_parameters):
        raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                         "usually produced by model.named_parameters()")
    names = [name for name, _ in named_parameters]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(duplicates))
    named_ids = {id(p) for _, p in named_parameters}
    unnamed = [id(p) for group in param_groups for p in group["params"]
               if id(p) not in named_ids]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: %s"
                         % ", ".join(str(i) for i in unnamed))
    return named_parameters


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse_as_dense, process_set):
        self._hvx_base.__init__(self, params)
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._predivide = gradient_predivide_factor
        self._process_set = process_set
        all_params = [p for group in self.param_groups for p in group["params"]]
        named_parameters = _checked_names(named_parameters, self.param_groups, "allreduce")
        self._parameter_names = {p: name for name, p in sorted(named_parameters,
                                                               key=lambda e: e[0])}
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %d"
                             % backward_passes_per_step)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}
        self._densified = {}  # parameter -> sparse_dim of the gradient exchanged dense
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        if process_set.included() and process_set.size() > 1:
            self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    self._grad_accs.append(_register_gradient_hook(p, self._make_hook(p)))

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Unused on this rank this step: the others still wait for it.
            p.grad = torch.zeros_like(p)
        name = "grad." + self._parameter_names[p]
        if p.grad.is_sparse:
            if not self._sparse_as_dense:
                return mpi_ops.sparse_allreduce_async(p.grad, name, self._op,
                                                      self._process_set), None
            # Exchanged dense; written back sparse for optimizers that need it (SparseAdam).
            self._densified[p] = p.grad.sparse_dim()
            p.grad = p.grad.to_dense()
        prescale, postscale = 1.0, 1.0
        if self._op == Average and self._predivide != 1.0:
            prescale, postscale = 1.0 / self._predivide, self._predivide
        compressed, ctx = self._compression.compress(p.grad)
        handle = mpi_ops.allreduce_async_(compressed, name=name, op=self._op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self._process_set)
        return handle, (compressed, ctx)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to accumulate "
                        "gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those backward did not) and writes the
        results into .grad. Call it yourself to clip or inspect averaged gradients, then step()
        inside `with optimizer.skip_synchronize():`."""
        for p in sorted(self._requires_update - set(self._handles),
                        key=lambda q: self._parameter_names[q]):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        try:
            for p, (handle, ctx) in self._handles.items():
                output = mpi_ops.synchronize(handle)
                self._allreduce_delay[p] = self.backward_passes_per_step
                if ctx is None:  # a sparse gradient, allreduced as sparse
                    p.grad = output
                    continue
                compressed, ctx = ctx
                if output is not p.grad:
                    p.grad.copy_(self._compression.decompress(output, ctx))
                if p in self._densified:
                    p.grad = p.grad.to_sparse(self._densified[p])
        finally:
            self._handles.clear()
            self._densified.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (you called synchronize() already)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(): the gradients are exchanged again. "
                              "Use `with optimizer.skip_synchronize(): optimizer.step()`.")
            self.synchronize()
        self._synchronized = False
        return self._hvx_base.step(self, closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return self._hvx_base.zero_grad(self, *args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so that step() applies gradients averaged (op) over the process set.

    compression: Compression.none | fp16 | bf16, how gradients travel.
    backward_passes_per_step: gradients accumulate locally over this many backward passes.
    op: Average, Sum or Adasum (Adasum reduces the gradients; power-of-two set sizes).
    gradient_predivide_factor: with Average, gradients are scaled by 1/f before the sum and by
        f/size after it (keeps half-precision sums in range).
    num_groups / groups: accepted for compatibility; hvx fuses whatever is ready in the same
        cycle, up to HVX_FUSION_THRESHOLD, without explicit groups.
    sparse_as_dense: sparse gradients (nn.Embedding(sparse=True)) are allreduced dense and
        handed back sparse; otherwise every rank's entries are allgathered (sparse_allreduce).
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op not in (Average, mpi_ops.Sum, Adasum):
        raise ValueError("DistributedOptimizer: op must be Average, Sum or Adasum")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__, _hvx_base=optimizer.__class__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, sparse_as_dense, process_set)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Every rank's tensors take root_rank's values, in place. params: a state_dict (or any
    name -> tensor mapping) or a list of (name, tensor) such as model.named_parameters()."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        if any(not isinstance(p, tuple) for p in params):
            raise ValueError("params must be a dict or a list of (name, tensor) tuples")
    else:
        try:
            params = list(params)
        except TypeError:
            raise ValueError("invalid params of type: %s" % type(params))
    handles = []
    with torch.no_grad():
        for name, p in params:
            if p is None:
                continue
            handles.append(mpi_ops.broadcast_async_(p, root_rank, name="param." + name,
                                                    process_set=process_set))
    for h in handles:
        mpi_ops.synchronize(h)


def _initialize_state(optimizer, model):
    """Gives an optimizer that has not stepped yet its state, as Horovod does: every parameter
    that requires a gradient gets a zero .grad (sparse where the optimizer or an
    nn.Embedding(sparse=True) of `model` wants one) and the wrapped optimizer steps once without
    exchanging anything. Unlike Horovod's, the parameters keep their values: a step on zero
    gradients still applies weight decay, which would move a resumed rank away from the root."""
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
            p.grad = p.grad.to_sparse()
    step = getattr(optimizer, "_hvx_base", type(optimizer)).step
    step(optimizer)
    with torch.no_grad():
        for p, value in zip(params, saved):
            p.copy_(value)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Every rank's optimizer takes root_rank's state (momentum buffers, moments, step counts)
    and param-group options (lr, momentum, betas, ...). Ranks must wrap the same parameters.
    root_rank is a global rank (a member of process_set). An optimizer that has not stepped yet
    is first given its state (see _initialize_state), so every rank ends with the same state and
    a zero .grad on each parameter that requires one. model: identifies sparse embeddings."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer, model)
    is_root = mpi_ops.rank() == root_rank
    state = mpi_ops.broadcast_object(optimizer.state_dict() if is_root else None, root_rank,
                                     name="optimizer.state", process_set=process_set)
    if not is_root:
        optimizer.load_state_dict(state)
