// What the environment says about where hvxrun runs: inside another launcher's rank (refuse),
// inside a SLURM allocation or a SageMaker-style cluster (take its hosts), or on a plain host.
//
// clang-format off
//   if (auto launcher = DetectEnclosingLauncher(env)) return absl::FailedPreconditionError(...);
//   HVX_ASSIGN_OR_RETURN(std::optional<ClusterHosts> cluster,
//                        DetectClusterHosts(env, ReadFile, 1));
// clang-format on
//
// SLURM and SageMaker list syntax and the GPU count come from hvx/common/cluster.h.
// Everything reads an hvx::Environment and a file-reading callback, so tests fabricate both.
#ifndef HVX_LAUNCH_CLUSTER_ENV_H_
#define HVX_LAUNCH_CLUSTER_ENV_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/env.h"
#include "hvx/common/files.h"
#include "hvx/launch/hosts.h"

namespace hvx {
namespace launch {

using FileReader = std::function<absl::StatusOr<std::string>(const std::string& path)>;

// The FileReader of a real job: ReadFileFromDisk (hvx/common/files.h).

// When this process is already one rank of a launched job, describes the launcher and the
// variable that shows it, e.g. "MPICH hydra (PMI_RANK=1)"; nullopt otherwise. Recognized: hvxrun
// (HVX_RANK), MPICH/Intel hydra (PMI_RANK, PMI_FD, PMI_SIZE), Open MPI (OMPI_COMM_WORLD_RANK),
// a SLURM task (SLURM_PROCID inside a step: SLURM_STEP_ID), torchrun (RANK with WORLD_SIZE and
// LOCAL_RANK), horovodrun (HOROVOD_RANK). A SLURM batch shell is not a task: it has no step id.
std::optional<std::string> DetectEnclosingLauncher(const Environment& env);

// True when DetectEnclosingLauncher finds a launcher: the process must not launch again.
bool IsUnderLauncher(const Environment& env);

struct ClusterHosts {
  enum class Launcher { kSsh, kSlurm };
  std::string source;           // "SLURM allocation", "SageMaker (SM_HOSTS)", "PBS_NODEFILE", ...
  std::vector<HostSpec> hosts;  // slots always set
  Launcher launcher = Launcher::kSsh;
  // SageMaker-style clusters run the entry point on every host; only the leader (hosts[0])
  // launches, the others must not start ranks of their own and wait for the job's status.
  bool leader_launches = false;
  bool is_leader = true;
  std::string current_host;
  // How long the other hosts may take to come up after this one: SageMaker starts its instances
  // and the MPI Operator its worker pods minutes apart, and with no one waiting the first ssh is
  // refused or its name does not resolve yet. 0 where every host is up when the job starts.
  double host_wait_s = 0;
  // The Kubeflow MPI Operator's launcher: hydra's proxies on the workers connect back to this
  // pod's own name, which the job's headless Service publishes in DNS only once the pod is Ready
  // (its /etc/hosts has it at once). The leader waits for it in DNS before starting (InDns).
  bool own_name_in_dns = false;
};

// Variables this host's cluster gives every rank where the job's environment does not set them:
// NCCL_SOCKET_IFNAME from SageMaker's network interface (SM_NETWORK_INTERFACE_NAME, or the
// resource config's network_interface_name), so that NCCL does not pick another interface (a
// docker bridge) between hosts. Whatever source the hosts came from (-H included, as restarts
// give them); what cannot be read gives nothing here (DetectClusterHosts reports it).
std::vector<std::pair<std::string, std::string>> ClusterRankEnvironment(
    const Environment& env, const FileReader& read_file);

// ClusterHosts::host_wait_s of SageMaker and the Kubeflow MPI Operator's launcher.
inline constexpr double kHostsStartApartWaitS = 1800;

// The hosts of a cluster environment, or nullopt when there is none. `local_gpus` is the GPU
// count of this host (hvx::CountVisibleGpus, hvx/common/cluster.h), used where the environment
// gives none. SLURM: SLURM_JOB_NODELIST/SLURM_NODELIST with GPUs per node (SLURM_GPUS_ON_NODE,
//   SLURM_GPUS_PER_NODE) when the allocation has GPUs, else SLURM_TASKS_PER_NODE.
// SageMaker-style: SM_HOSTS + SM_CURRENT_HOST (+ SM_NUM_GPUS), or the resource config JSON
//   (SM_RESOURCE_CONFIG, or the file /opt/ml/input/config/resourceconfig.json).
// PBS: PBS_NODEFILE (one line per slot). Hostfile variables: HYDRA_HOST_FILE,
//   OMPI_MCA_orte_default_hostfile, I_MPI_HYDRA_HOST_FILE (e.g. the Kubeflow MPI operator).
absl::StatusOr<std::optional<ClusterHosts>> DetectClusterHosts(const Environment& env,
                                                               const FileReader& read_file,
                                                               int local_gpus);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_CLUSTER_ENV_H_
