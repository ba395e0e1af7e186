// The NCCL data plane: collectives on CUDA tensors for one process set, behind hvx/core's DataPlane
// interface. The engine creates it lazily per (process set, GPU) through the factory registered by
// //hvx/nccl:nccl; the MPI control plane stays and carries the NCCL unique id.
//
//   HVX_ASSIGN_OR_RETURN(std::unique_ptr<DataPlane> plane, CreateNcclDataPlane(ctx, options));
//   HVX_RETURN_IF_ERROR(plane->Allreduce(work));   // outputs written when it returns
//
// Each rank uses the GPU of its local rank (SelectDevice); creation fails on every member alike
// when a rank has no GPU of its own or two ranks on a host would share one. Work runs on one
// dedicated CUDA stream per GPU: it first waits (with an event) for everything already queued on
// the legacy default stream, the stream frameworks use unless told otherwise, and for each tensor's
// ready event (TensorRef::ready: hvx/torch records one on torch's current stream when a tensor is
// submitted from a side stream, as Horovod's ready events do), and each call returns
// once its work has completed on the GPU, so outputs are ready for any stream and the host. While
// waiting, asynchronous NCCL errors are polled, so a dead peer fails the op instead of hanging it.
//
// Allreduce: one tensor runs in place of its buffers; several (fused) or joined ranks' zeros go
// through a device fusion buffer, with prescale on the way in and postscale on the way out.
// Average (Sum with postscale 1/size) uses ncclAvg on NCCL >= 2.10. Hierarchical allreduce
// (HVX_HIERARCHICAL_ALLREDUCE=1, several hosts with equal ranks per host): NCCL reduce-scatter
// inside the host, allreduce of this rank's shard across hosts on the set's CPU plane, NCCL
// allgather inside the host. Allgather with differing first dimensions is a group of broadcasts;
// Alltoall a group of sends and receives; ReduceScatter with unequal slices pads to equal blocks.
// Adasum is not available on GPU tensors.
#ifndef HVX_NCCL_NCCL_DATA_PLANE_H_
#define HVX_NCCL_NCCL_DATA_PLANE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "hvx/core/transport.h"
#include "hvx/nccl/policy.h"

namespace hvx {
namespace nccl {

// Collective over ctx.comm: every member calls it at the same point.
absl::StatusOr<std::unique_ptr<DataPlane>> CreateNcclDataPlane(const DataPlaneContext& ctx,
                                                               const NcclOptions& options);

// CreateNcclDataPlane with the knobs hvx::Init read (DataPlaneContext::options): the registered
// factory.
absl::StatusOr<std::unique_ptr<DataPlane>> CreateNcclDataPlaneForEngine(
    const DataPlaneContext& ctx);

// NCCL_VERSION_CODE of the loaded library (ncclGetVersion), e.g. 22809; 0 if it cannot say.
int LoadedNcclVersion();

// Makes the calling thread use the GPU of this local rank (cudaSetDevice) and returns its ordinal.
// Call it right after hvx::Init, before any other CUDA call, with hvx::LocalRank()/LocalSize().
// Fails (naming the host and counts) when the host runs more ranks than it shows GPUs.
absl::StatusOr<int> BindLocalDevice(int local_rank, int local_size);

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_NCCL_DATA_PLANE_H_
