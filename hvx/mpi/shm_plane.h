// The CPU data plane with allreduce through shared memory (hvx/shm): among the ranks of each host,
// and hierarchically across hosts, where MPI carries each host's partial results between the
// ranks of the same local rank; reduce-scatter too among the ranks of one host. Every other op,
// and Adasum, runs on the MPI plane it wraps.
//
//   std::unique_ptr<DataPlane> plane =
//       MakeShmCpuPlane(comm, std::move(mpi_plane), CpuPlaneMode::kAuto);
//
// The shared regions are made at the first allreduce (collective over the communicator, which
// every rank reaches at the same point), so jobs that never allreduce CPU tensors pay nothing.
// kAuto takes shared memory when some host has several of the communicator's ranks and every host
// has as many, and when every rank could map its regions; otherwise (or if any rank fails there)
// it keeps MPI, saying so once. kShm fails the allreduce on every rank instead.
#ifndef HVX_MPI_SHM_PLANE_H_
#define HVX_MPI_SHM_PLANE_H_

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/core/transport.h"

namespace hvx {

enum class CpuPlaneMode { kMpi, kShm, kAuto };

// "auto" -> kAuto, "shm" -> kShm, "mpi" -> kMpi (InitOptions::cpu_plane, already validated).
CpuPlaneMode ParseCpuPlaneMode(absl::string_view name);

// Where the ranks of a communicator sit: each rank's host index (hosts numbered by their lowest
// rank) and local rank, from every rank's host name.
struct HostLayout {
  std::vector<int> host_of;   // by rank
  std::vector<int> local_of;  // by rank: position among its host's ranks
  std::vector<int> per_host;  // ranks on each host
  bool Homogeneous() const;
  int MaxPerHost() const;
};
HostLayout LayoutOf(const std::vector<std::string>& hosts);

// `mpi_plane` runs everything but the shared-memory allreduce. `comm` must outlive the plane.
std::unique_ptr<DataPlane> MakeShmCpuPlane(MPI_Comm comm, std::unique_ptr<DataPlane> mpi_plane,
                                           CpuPlaneMode mode);

// The negotiation vote (Communicator::BitwiseAnd) of a communicator whose ranks all run on one
// host, through shared memory (hvx/shm/shm_vote.h): a rank waiting for its peers blocks instead
// of polling MPI.
class HostVote {
 public:
  virtual ~HostVote() = default;
  // At most kMaxWords words; errors name the peer.
  virtual absl::Status And(std::vector<uint64_t>* bits) = 0;
  virtual size_t MaxWords() const = 0;
};

// Collective over `comm`: the shared-memory vote, or nullptr where it does not apply (mode kMpi,
// one rank, ranks on several hosts) or could not be made (rank 0 logs why; every rank agrees).
// Errors: MPI's, finding the ranks' hosts. `comm` must outlive the vote.
absl::StatusOr<std::unique_ptr<HostVote>> MakeHostVote(MPI_Comm comm, CpuPlaneMode mode);

}  // namespace hvx

#endif  // HVX_MPI_SHM_PLANE_H_
