// Where each rank sits: local (same host) and cross (same local rank, other hosts) coordinates
// computed from every rank's host name; checks of the launcher's view against the transport's; and
// detection of a process started alone where a multi-process job was evidently intended.
//
//   Topology t = ComputeTopology(/*rank=*/3, {"a", "a", "b", "b"});  // local 1/2, cross 1/2
//   HVX_RETURN_IF_ERROR(CheckLauncherEnvironment(t, env));
#ifndef HVX_CORE_TOPOLOGY_H_
#define HVX_CORE_TOPOLOGY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "hvx/common/env.h"
#include "hvx/common/layout.h"

namespace hvx {

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  bool homogeneous = true;
  std::string host;
};

// hosts[r] is rank r's host name; LayoutOf(hosts).PlaceOf(rank) (hvx/common/layout.h) with the
// rank, size, host and homogeneity.
Topology ComputeTopology(int rank, const std::vector<std::string>& hosts);

// Compares HVX_RANK, HVX_SIZE, HVX_LOCAL_RANK, HVX_LOCAL_SIZE, HVX_CROSS_RANK, HVX_CROSS_SIZE
// (those set) with `t`. FailedPrecondition naming the variable and both values on the first
// difference.
absl::Status CheckLauncherEnvironment(const Topology& t, const Environment& env);

// For a size-1 job: FailedPrecondition when the environment shows more processes were intended
// (PMI_SIZE / OMPI_COMM_WORLD_SIZE / SLURM_NTASKS > 1, several SM_HOSTS or SM_NUM_GPUS > 1,
// WORLD_SIZE > 1 (torchrun, a PyTorchJob), PET_NNODES x PET_NPROC_PER_NODE > 1 (Trainer v2), more
// than one visible GPU: hvx::CountVisibleGpus in hvx/common/cluster.h). The message says what was
// seen, what was expected, and the hvxrun command
// (`hvxrun -np N -H host1:S,host2:S -- <command_line>`) that starts the job. OK otherwise.
absl::Status CheckSingleton(const Environment& env, int visible_gpus,
                            const std::string& command_line);

// This process's command line from /proc/self/cmdline, shell-quoted where needed.
std::string CurrentCommandLine();

}  // namespace hvx

#endif  // HVX_CORE_TOPOLOGY_H_
