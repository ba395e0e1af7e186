"""hvx.torch: horovod.torch's API on hvx. A Horovod script changes one line,

    import hvx.torch as hvd

and is launched with hvxrun (`hvxrun -np 4 -H a:2,b:2 -- python3 train.py`), under which init()
finds its rank, size, local and cross ranks.
"""

from hvx.torch.checkpoint import load_checkpoint, save_checkpoint
from hvx.torch.compression import Compression
from hvx.torch.mpi_ops import (
    Adasum, Average, HorovodInternalError, HvxInternalError, HvxInvalidArgumentError, Max, Min,
    Product, ProcessSet, Sum, add_process_set, allgather, allgather_async, allgather_object,
    allreduce, allreduce_,
    allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_,
    broadcast_async, broadcast_async_, broadcast_object, ccl_built, cross_rank, cross_size,
    cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled, grouped_allgather,
    grouped_allgather_async, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async,
    init, is_homogeneous, is_initialized, join, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, poll, rank, reducescatter, reducescatter_async,
    remove_process_set, rocm_built, shutdown, size, sparse_allreduce_async, stragglers,
    synchronize)
from hvx.torch.optimizer import (
    DistributedOptimizer, broadcast_optimizer_state, broadcast_parameters)
from hvx.torch.sharded import ShardedOptimizer
from hvx.torch.sync_batch_norm import SyncBatchNorm
from hvx.torch import data, elastic
