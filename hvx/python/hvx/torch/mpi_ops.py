"""Collectives on torch tensors: horovod.torch's names, arguments and results, over hvx's engine.

Every op is submitted to hvx's background thread under a name that must be the same on every rank
(an unnamed op gets "<op>.noname.<n>", counted per op and process set, which agrees as long as
the members of each set make their unnamed calls on it in the same order). An `_async` op returns
an integer handle for `poll` and `synchronize`; the tensors it reads and writes are kept alive
until then. Ops without `_` return new tensors and are differentiable (see the autograd classes
at the end).

Errors: a bad argument raises ValueError at the call; an op that fails raises HvxInternalError, a
RuntimeError, from `synchronize` on every rank it failed on: HvxInvalidArgumentError (also a
ValueError) when the ranks' arguments disagree or are wrong (shape, dtype, root, splits), and a
plain HvxInternalError when a peer died or did not submit the op within HVX_COLLECTIVE_TIMEOUT_S.

With a process set, `root_rank` is a global rank (a member of the set), as in Horovod.

Over 700 lines in one module because it is horovod.torch's `mpi_ops`: programs and Horovod's own
tests import each op from it by name, and each op is a short translation onto `_C`.
"""

import collections
import faulthandler
import io
import itertools
import pickle
import threading

import torch

from hvx import _C
from hvx.torch.compression import Compression

HvxInternalError = _C.HvxInternalError
HvxInvalidArgumentError = _C.HvxInvalidArgumentError
# Horovod's name for the same error, for scripts that catch it.
HorovodInternalError = HvxInternalError

# Reduction ops: hvx::ReduceOp's values, from the native module.
Average = _C.Average
Sum = _C.Sum
Min = _C.Min
Max = _C.Max
Product = _C.Product
Adasum = _C.Adasum
_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product",
             Adasum: "Adasum"}


# ---------------------------------------------------------------------------------------- basics

def _check_initialized(what):
    if not _C.is_initialized():
        raise ValueError("hvx has not been initialized; call hvx.torch.init() before %s()" % what)


class ProcessSet:
    """A group of ranks that runs collectives among themselves (Horovod's ProcessSet).

    Made from a list of global ranks; registered on every rank by init(process_sets=[...]) or
    add_process_set(). Collective ops take it as `process_set=`.
    """

    def __init__(self, ranks_or_comm):
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise ValueError("ProcessSet takes a list of global ranks (mpi4py communicators are "
                             "not supported)")
        self.ranks = sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("process set %s is not registered: pass it to hvx.torch.init("
                             "process_sets=...) or hvx.torch.add_process_set()" % self.ranks)
        return self.process_set_id

    def size(self):
        return _C.process_set_size(self._id())

    def rank(self):
        """This process's index in the set, or -1 when it is not a member."""
        return _C.process_set_rank(self._id())

    def included(self):
        return self.rank() >= 0

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        self.process_set_id = 0

    @property
    def ranks(self):
        return _C.process_set_ranks(0) if _C.is_initialized() else []


global_process_set = _GlobalProcessSet()


def init(comm=None, process_sets=None):
    """Starts hvx on this rank (collective: every rank calls it). Ranks, sizes and the transport
    come from the launcher's environment (hvxrun, mpiexec, srun, ...). A process started alone
    where a multi-process job is evident fails with the command that starts it correctly.

    process_sets: ProcessSet objects (or rank lists) to register, the same on every rank."""
    if comm is not None:
        raise ValueError("hvx.torch.init(comm=...) is not supported: hvx takes its ranks from "
                         "the launcher; use process sets for subgroups")
    if _C.is_initialized():
        return
    sets = [s if isinstance(s, ProcessSet) else ProcessSet(s) for s in (process_sets or [])]
    _C.init([])
    _register_python_stacks()
    for s in sets:
        add_process_set(s)


def _register_python_stacks():
    """Under hvxrun, when the wrapper asks for this rank's stacks (hvx/common/stack_dump.h), every
    Python thread's frames go to its pipe first (faulthandler, on the signal hvx's helper thread
    sends for them), then each thread's native stack."""
    fd = _C.stack_dump_fd()
    if fd < 0:
        return
    faulthandler.register(_C.python_stack_signal(), file=fd, all_threads=True, chain=False)
    _C.enable_python_stacks()


def shutdown():
    """Stops hvx; pending ops fail. hvx cannot be initialized again in this process."""
    _C.shutdown()


def is_initialized():
    return _C.is_initialized()


def _topology(fn, what):
    def query():
        _check_initialized(what)
        return fn()
    query.__name__ = what
    query.__doc__ = "hvx::%s() (hvx/core/api.h); ValueError before init()." % what
    return query


rank = _topology(_C.rank, "rank")
size = _topology(_C.size, "size")
local_rank = _topology(_C.local_rank, "local_rank")
local_size = _topology(_C.local_size, "local_size")
cross_rank = _topology(_C.cross_rank, "cross_rank")
cross_size = _topology(_C.cross_size, "cross_size")
is_homogeneous = _topology(_C.is_homogeneous, "is_homogeneous")


def stragglers():
    """What hvx's straggler detection concluded so far, the same on every rank: a dict with
    `rank` (the rank the others keep waiting for, -1 for none), `late_ms` and `wait_share` (per
    rank, of the last window: how much later than the median of the others it submitted its
    collectives, and the fraction of the window the others spent waiting beyond its own wait),
    `windows` (windows measured), `window_s` and `warning` (the last warning logged, "" if none).
    The window is HVX_STRAGGLER_CHECK_S (0.25 s; 0 turns detection off)."""
    _check_initialized("stragglers")
    return _C.stragglers()


def mpi_threads_supported():
    _check_initialized("mpi_threads_supported")
    return True  # hvx's engine makes every MPI call from its one background thread


# What this build has: the CPU data plane over MPICH (and shared memory within a host).
def mpi_built():
    return True


def mpi_enabled():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return False  # the Python module links the CPU transport only


def cuda_built():
    return False


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks) on every rank; collective, in the same order
    everywhere. Returns the ProcessSet."""
    _check_initialized("add_process_set")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("%r is already registered" % process_set)
    process_set.process_set_id = _C.add_process_set(process_set.ranks)
    _forget_names(process_set.process_set_id)
    return process_set


def remove_process_set(process_set):
    """Makes a process set unusable on every rank (collective: a barrier on the global set
    first, so no rank still runs an op on it). Its communicator is released at shutdown. Returns
    True when the set was registered."""
    _check_initialized("remove_process_set")
    if process_set.process_set_id in (None, 0):
        return False
    barrier()
    _C.remove_process_set(process_set.process_set_id)
    process_set.process_set_id = None
    return True


# --------------------------------------------------------------------------------------- handles

_handles = {}  # handle -> (native handle, result(native) -> value, its key in _taken)
_handles_lock = threading.Lock()
_next_handle = itertools.count(1)
# Unnamed ops are counted per (process set, op): the members of a set run its ops in the same
# order, but ranks outside it do not run them at all, so one count for every set would drift apart
# between ranks as soon as two sets ran different numbers of ops. A set's counts restart when its
# id is registered (ids are reused after remove_process_set). Horovod counts every op of the
# process in one sequence.
_noname = collections.defaultdict(itertools.count)


def _name(op, name, process_set):
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string, got %r" % (name,))
        return name
    set_id = getattr(process_set, "process_set_id", None) or 0
    count = next(_noname[(set_id, op)])
    if set_id == 0:
        return "%s.noname.%d" % (op, count)
    return "%s.set%d.noname.%d" % (op, set_id, count)


def _forget_names(set_id):
    for key in [k for k in _noname if k[0] == set_id]:
        del _noname[key]


# A name stays taken from its op's submission until synchronize() collects the op's handle, per
# process set and kind of op: a second op of that kind with that name on this rank is refused
# with a ValueError. The engine itself frees a name when the op completes, which, for a second
# submission right after the first, depended on how fast the other ranks were: when they had
# already submitted, the first op could complete in between, and the duplicate went through on one
# rank only (Horovod's duplicate-name tests passed or failed with the machine's speed). A handle
# that is never synchronized keeps its name, as it keeps its tensors.
_taken = {}  # (set id, op, name) -> handle


def _submit(op, name, process_set, start, result):
    """Starts op `op` under `name` (or its unnamed count) with start(resolved name) -> native
    handle, the name taken until synchronize; returns the handle, whose synchronize returns
    result(native)."""
    name = _name(op, name, process_set)
    key = (getattr(process_set, "process_set_id", None) or 0, op, name)
    h = next(_next_handle)
    with _handles_lock:
        holder = _taken.setdefault(key, h)
    if holder != h:
        raise ValueError(
            "tensor '%s': another %s with this name is still in flight on this rank: it is "
            "not synchronized yet (handle %s); a name stays taken until synchronize() returns "
            "its result (synchronize the first, or choose another name)" % (name, op, holder))
    try:
        native = start(name)
    except BaseException:
        with _handles_lock:
            del _taken[key]
        raise
    # One step after the op has started, as for every other handle: Horovod's tests poll right
    # after an async call and expect to find an op still running at least once.
    with _handles_lock:
        _handles[h] = (native, result, key)
    return h


def poll(handle):
    """True once the op has completed (synchronize then returns at once)."""
    if isinstance(handle, _SparseHandle):
        handle = handle.handle
    with _handles_lock:
        entry = _handles.get(handle)
    if entry is None:
        raise ValueError("unknown handle %r (already synchronized?)" % (handle,))
    return entry[0].poll()


def synchronize(handle):
    """Waits for the op and returns its result; raises HvxInternalError if it failed."""
    if isinstance(handle, _SparseHandle):
        handle = handle.handle
    with _handles_lock:
        entry = _handles.pop(handle, None)
        if entry is not None:
            del _taken[entry[2]]
    if entry is None:
        raise ValueError("unknown handle %r (already synchronized?)" % (handle,))
    native, result, _ = entry
    native.wait()
    return result(native)


def _process_set_id(process_set):
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a hvx.torch.ProcessSet, got %r" % (process_set,))
    return process_set._id()


def _root_in_set(root_rank, process_set):
    """The index within `process_set` of the global rank `root_rank` (Horovod's convention)."""
    root_rank = int(root_rank)
    if process_set.process_set_id == 0:
        return root_rank
    ranks = process_set.ranks
    if root_rank not in ranks:
        raise ValueError("root_rank %d is not a member of %r: with a process set, root_rank is "
                         "the global rank of one of its members" % (root_rank, process_set))
    return ranks.index(root_rank)


def _op_of(average, op, what):
    if op is not None and average is not None:
        raise ValueError("%s: pass either op or the deprecated average, not both" % what)
    if op is None:
        op = Sum if average is False else Average
    if op not in _OP_NAMES:
        raise ValueError("%s: unknown op %r" % (what, op))
    return op


def _contiguous_target(tensor):
    """The memory an in-place op writes: `tensor` itself, or a contiguous copy written back."""
    if tensor.is_contiguous():
        return tensor, lambda: tensor
    work = tensor.contiguous()

    def write_back():
        tensor.copy_(work)
        return tensor
    return work, write_back


# ------------------------------------------------------------------------------------- allreduce

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                     done):
    _check_initialized("allreduce")
    return _submit("allreduce", name, process_set,
                   lambda n: _C.allreduce_async(tensor, output, n, op, float(prescale_factor),
                                                float(postscale_factor),
                                                _process_set_id(process_set)),
                   lambda _: done())


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts an allreduce of `tensor` into a new tensor; synchronize returns it."""
    op = _op_of(average, op, "allreduce")
    source = tensor.contiguous()
    output = torch.empty_like(source)
    return _allreduce_async(source, output, name, op, prescale_factor, postscale_factor,
                            process_set, lambda: output)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`; synchronize returns it."""
    op = _op_of(average, op, "allreduce")
    work, done = _contiguous_target(tensor)
    return _allreduce_async(work, work, name, op, prescale_factor, postscale_factor, process_set,
                            done)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over the process set, as a new tensor (differentiable: the
    gradient is reduced with the same op). compression: how it travels (Compression.fp16, ...)."""
    op = _op_of(average, op, "allreduce")
    compressed, ctx = compression.compress(tensor)
    summed = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                              process_set)
    return compression.decompress(summed, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """allreduce in place; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_async(inputs, outputs, name, op, prescale_factor, postscale_factor, process_set,
                   done):
    _check_initialized("grouped_allreduce")
    if not inputs:
        raise ValueError("grouped_allreduce: no tensors")
    return _submit("grouped_allreduce", name, process_set,
                   lambda n: _C.grouped_allreduce_async(list(inputs), list(outputs), n, op,
                                                        float(prescale_factor),
                                                        float(postscale_factor),
                                                        _process_set_id(process_set)),
                   lambda _: done())


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts one allreduce of several tensors (negotiated and fused together); synchronize
    returns the list of new tensors."""
    op = _op_of(average, op, "grouped_allreduce")
    inputs = [t.contiguous() for t in tensors]
    outputs = [torch.empty_like(t) for t in inputs]
    return _grouped_async(inputs, outputs, name, op, prescale_factor, postscale_factor,
                          process_set, lambda: outputs)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _op_of(average, op, "grouped_allreduce")
    targets = [_contiguous_target(t) for t in tensors]
    works = [w for w, _ in targets]
    return _grouped_async(works, works, name, op, prescale_factor, postscale_factor, process_set,
                          lambda: [done() for _, done in targets])


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """allreduce of several tensors as one op; differentiable."""
    op = _op_of(average, op, "grouped_allreduce")
    compressed = [compression.compress(t) for t in tensors]
    outputs = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                      *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ------------------------------------------------------------------------------------- allgather

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: every rank's tensor concatenated along dim 0 in rank order (first
    dimensions may differ)."""
    _check_initialized("allgather")
    return _submit("allgather", name, process_set,
                   lambda n: _C.allgather_async(tensor.contiguous(), n,
                                                _process_set_id(process_set)),
                   lambda n: n.output)


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along dim 0; differentiable."""
    return _Allgather.apply(tensor, name, process_set)


def _grouped(op, tensors, name, process_set, submit):
    """Submits submit(tensor, name_i) for each tensor under one base name; one handle for all."""
    if not tensors:
        raise ValueError("%s: no tensors" % op)
    return _submit(op, name, process_set,
                   lambda base: _GroupWait([submit(t, "%s.%d" % (base, i))
                                            for i, t in enumerate(tensors)]),
                   lambda g: g.results())


class _GroupWait:
    """The native handles of a grouped op as one: wait() waits for all, then raises the first
    error; results() lists the outputs."""

    def __init__(self, natives):
        self.natives = natives

    def poll(self):
        return all(n.poll() for n in self.natives)

    def wait(self):
        error = None
        for n in self.natives:
            try:
                n.wait()
            except HvxInternalError as e:
                error = error or e
        if error is not None:
            raise error

    def results(self):
        return [n.output for n in self.natives]


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of each tensor; synchronize returns the list of results."""
    _check_initialized("grouped_allgather")
    ps = _process_set_id(process_set)
    return _grouped("grouped_allgather", tensors, name, process_set,
                    lambda t, n: _C.allgather_async(t.contiguous(), n, ps))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor; returns the list of results (differentiable)."""
    base = _name("grouped_allgather", name, process_set)
    return [allgather(t, "%s.%d" % (base, i), process_set) for i, t in enumerate(tensors)]


# ------------------------------------------------------------------------------------- broadcast

def _broadcast_async(tensor, root_rank, name, process_set, done):
    _check_initialized("broadcast")
    root = _root_in_set(root_rank, process_set)
    return _submit("broadcast", name, process_set,
                   lambda n: _C.broadcast_async(tensor, root, n, _process_set_id(process_set)),
                   lambda _: done())


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root_rank's tensor into a new tensor on every rank."""
    output = tensor.detach().clone(memory_format=torch.contiguous_format)
    return _broadcast_async(output, root_rank, name, process_set, lambda: output)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    work, done = _contiguous_target(tensor)
    return _broadcast_async(work, root_rank, name, process_set, done)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor, as a new tensor on every rank; differentiable (the gradient is the
    average of every rank's, on root_rank, and zero elsewhere, as in Horovod). With a process
    set, root_rank is the global rank of one of its members."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """broadcast in place; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# -------------------------------------------------------------------------------------- alltoall

def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64) or splits.dim() != 1:
            raise ValueError("alltoall: splits must be a 1-D int32 or int64 tensor")
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def _alltoall_async(tensor, splits, name, process_set, with_received_splits):
    _check_initialized("alltoall")
    splits = _splits_list(splits)
    if with_received_splits:
        def result(n):
            return n.output, torch.tensor(n.received_splits, dtype=torch.int32)
    else:
        def result(n):
            return n.output
    return _submit("alltoall", name, process_set,
                   lambda n: _C.alltoall_async(tensor.contiguous(), splits, n,
                                               _process_set_id(process_set)),
                   result)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: splits[j] rows of `tensor` go to rank j (equal splits when None).
    synchronize returns (output, received_splits) when splits were given, else output."""
    return _alltoall_async(tensor, splits, name, process_set, splits is not None)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Differentiable alltoall (the gradient travels back by the received splits)."""
    output, received = _Alltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


# --------------------------------------------------------------------------------- reducescatter

def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
    """Starts a reduce-scatter: the reduction of `tensor` over the set, of which rank r keeps
    its block of rows (rows divide as evenly as possible, the first ranks get one more)."""
    _check_reducescatter_op(op)
    return _submit("reducescatter", name, process_set,
                   lambda n: _C.reducescatter_async(tensor.contiguous(), n, op,
                                                    float(prescale_factor),
                                                    float(postscale_factor),
                                                    _process_set_id(process_set)),
                   lambda n: n.output)


def _check_reducescatter_op(op):
    _check_initialized("reducescatter")
    if op not in (Average, Sum):
        # A ValueError, and a RuntimeError as Horovod's is.
        raise HvxInvalidArgumentError("reducescatter: op must be Average or Sum, got %s"
                                      % _OP_NAMES.get(op, op))


def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=global_process_set):
    """Starts a reduce-scatter of each tensor; synchronize returns the list of this rank's
    blocks."""
    _check_reducescatter_op(op)
    ps = _process_set_id(process_set)
    return _grouped("grouped_reducescatter", tensors, name, process_set,
                    lambda t, n: _C.reducescatter_async(t.contiguous(), n, op,
                                                        float(prescale_factor),
                                                        float(postscale_factor), ps))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set):
    """Reduce-scatter of each tensor as one op; differentiable (each gradient is the allgather
    of its output's)."""
    _check_reducescatter_op(op)
    compressed = [compression.compress(t) for t in tensors]
    outputs = _GroupedReduceScatter.apply(name, op, prescale_factor, postscale_factor,
                                          process_set, *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Differentiable reduce-scatter (the gradient is the allgather of the output's)."""
    compressed, ctx = compression.compress(tensor)
    out = _ReduceScatter.apply(compressed, name, op, prescale_factor, postscale_factor,
                               process_set)
    return compression.decompress(out, ctx)


# -------------------------------------------------------------------------------- sparse tensors

class _SparseHandle:
    """A sparse allreduce's handle: callable, as Horovod's is, and accepted by poll and
    synchronize like any other."""

    def __init__(self, handle):
        self.handle = handle

    def __call__(self):
        return synchronize(self.handle)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts the allreduce of a sparse COO tensor: every rank's indices and values are
    allgathered, so the result (from synchronize) holds every rank's entries, uncoalesced; with
    Average the values are divided by the set size. op: Average or Sum."""
    _check_initialized("sparse_allreduce")
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce: op must be Average or Sum, got %s"
                         % _OP_NAMES.get(op, op))
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce: the tensor is not sparse (layout %s)" % tensor.layout)
    ps = _process_set_id(process_set)
    size = tensor.size()

    def result(gathered):
        indices, values = gathered.results()
        if op == Average:
            values = values / process_set.size()
        # Gathered along dim 0, so the indices travelled as [nnz, sparse_dim].
        return torch.sparse_coo_tensor(indices.t(), values, size, dtype=values.dtype)
    return _SparseHandle(_submit(
        "sparse_allreduce", name, process_set,
        lambda n: _GroupWait([
            _C.allgather_async(tensor._indices().t().contiguous(), n + ".indices", ps),
            _C.allgather_async(tensor._values().contiguous(), n + ".values", ps)]),
        result))


# ---------------------------------------------------------------------------------- barrier, join

def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier."""
    _check_initialized("barrier")
    native = _C.barrier_async(_process_set_id(process_set))
    native.wait()


def join(device=-1):
    """Declares that this rank has no more data: until every rank has joined it takes part in
    the others' allreduces with zeros (Average still divides by the full size). Returns the rank
    that joined last, the same on every rank."""
    _check_initialized("join")
    native = _C.join_async()
    native.wait()
    return native.last_joined_rank


# ------------------------------------------------------------------------------------- objects

def _to_bytes(obj):
    buf = io.BytesIO()
    pickle.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _from_bytes(t):
    return pickle.loads(t.numpy().tobytes())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's picklable object, on every rank."""
    name = _name("broadcast_object", name, process_set)
    _check_initialized("broadcast_object")
    is_root = _C.rank() == root_rank
    payload = _to_bytes(obj) if is_root else None
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
    broadcast_(length, root_rank, name + ".size", process_set)
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name + ".data", process_set)
    return obj if is_root else _from_bytes(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's picklable object, as a list in rank order."""
    name = _name("allgather_object", name, process_set)
    payload = _to_bytes(obj)
    sizes = synchronize(allgather_async(torch.tensor([payload.numel()], dtype=torch.int64),
                                        name + ".sizes", process_set)).tolist()
    gathered = synchronize(allgather_async(payload, name + ".data", process_set))
    out, offset = [], 0
    for n in sizes:
        out.append(_from_bytes(gathered[offset:offset + n]))
        offset += n
    return out


# ------------------------------------------------------------------------------------- autograd

class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        ctx.name = name
        return synchronize(allreduce_async(tensor, name=name, op=op,
                                           prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, ps = ctx.args
        name = None if ctx.name is None else ctx.name + ".grad"
        grad = synchronize(allreduce_async(grad_output, name=name, op=op, prescale_factor=pre,
                                           postscale_factor=post, process_set=ps))
        return grad, None, None, None, None, None


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(
            list(tensors), name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        reduced = synchronize(grouped_allreduce_async(list(grads), op=op, prescale_factor=pre,
                                                      postscale_factor=post, process_set=ps))
        return (None, None, None, None, None) + tuple(reduced)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 0
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        grad = synchronize(allreduce_async(grad_output, op=Average, process_set=ps))
        rows = synchronize(allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                                           process_set=ps))
        offset = int(rows[:ps.rank()].sum().item())
        return grad.narrow(0, offset, ctx.rows), None, None


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.name = name
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        # A named broadcast's gradient is named after it, so that ranks of a process set do not
        # move the unnamed-op counters alone.
        name = None if ctx.name is None else ctx.name + ".grad"
        grad = synchronize(allreduce_async(grad_output, name=name, op=Average,
                                           process_set=ctx.process_set))
        if _C.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        out, received = synchronize(_alltoall_async(tensor, splits, name, process_set, True))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad_output, _):
        grad, _ = synchronize(_alltoall_async(grad_output, ctx.received, None,
                                              ctx.process_set, True))
        return grad, None, None, None


def _reducescatter_grad(grad_output, op, process_set):
    grad = synchronize(allgather_async(grad_output, process_set=process_set))
    return grad * process_set.size() if op == Sum else grad


class _GroupedReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 5 + tuple(_reducescatter_grad(g, ctx.op, ctx.process_set)
                                   for g in grads)


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op = op
        ctx.process_set = process_set
        return synchronize(reducescatter_async(tensor, name, op, prescale_factor,
                                               postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        return (_reducescatter_grad(grad_output, ctx.op, ctx.process_set),
                None, None, None, None, None)
