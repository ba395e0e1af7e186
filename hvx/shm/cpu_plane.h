// The shared-memory CPU plane and negotiation vote, over any transport's communicator: allreduce
// among the ranks of each host through shared memory, and hierarchically across hosts, where the
// communicator's point-to-point bytes carry each host's partial results between the ranks of the
// same local rank; reduce-scatter too among the ranks of one host. Every other op, and Adasum,
// runs on the communicator's own CPU plane. Linking :cpu_plane registers both with the engine as
// HVX_CPU_PLANE=shm (and auto, the default):
//
//   HVX_REGISTER_CPU_PLANE(shm, &MakeShmCpuPlane, &MakeShmHostVote);  // in cpu_plane.cc
//
// The shared regions are made at the first allreduce (collective over the communicator, which
// every rank reaches at the same point), so jobs that never allreduce CPU tensors pay nothing.
// "auto" takes shared memory when some host has several of the communicator's ranks and every host
// has as many, and when every rank could map its regions; otherwise (or if any rank fails there)
// it keeps the communicator's plane, saying so once. "shm" fails the allreduce on every rank
// instead. Where both planes give the same bits (two ranks, or HVX_FIXED_REDUCTION_ORDER=0),
// "auto" then times both on the job's first buffers of each size class and keeps the faster
// (plane_trial.h), logging the figures on rank 0 and marking the trial runs CPU_PLANE_TRIAL in the
// timeline.
#ifndef HVX_SHM_CPU_PLANE_H_
#define HVX_SHM_CPU_PLANE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/core/topology.h"
#include "hvx/core/transport.h"

namespace hvx {

// The plane over ctx.comm (ctx.options->cpu_plane "shm" or "auto"), its ranks grouped into hosts
// by ctx.hosts; `fallback` runs everything but the shared-memory allreduce and reduce-scatter.
// ctx.comm and `fallback` must outlive it.
absl::StatusOr<std::unique_ptr<DataPlane>> MakeShmCpuPlane(const DataPlaneContext& ctx,
                                                           DataPlane* fallback);

// Collective over ctx.comm: the shared-memory vote of a communicator whose ranks all run on one
// host (ctx.hosts), or nullptr where it does not apply (one rank, ranks on several hosts) or could
// not be made (rank 0 logs why; every rank agrees).
absl::StatusOr<std::unique_ptr<HostVote>> MakeShmHostVote(const DataPlaneContext& ctx);

}  // namespace hvx

#endif  // HVX_SHM_CPU_PLANE_H_
