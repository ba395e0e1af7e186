// Facts about the cluster a process runs in, read from the environment the way the tools that set
// it mean them: GPUs visible to this process (CUDA's rules), SLURM's compressed node and task
// lists, and SageMaker's host list. One implementation for the launcher (hvx/launch), which plans a
// job from them, and the engine (hvx/core), which checks a started job against them.
//
//   int gpus = CountVisibleGpus(Environment::Process());
//   HVX_ASSIGN_OR_RETURN(std::vector<std::string> nodes, ExpandSlurmNodeList("gn[01-03],login"));
#ifndef HVX_COMMON_CLUSTER_H_
#define HVX_COMMON_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/env.h"

namespace hvx {

// Where the NVIDIA driver lists this host's GPUs, one entry per device.
inline constexpr char kNvidiaGpusDir[] = "/proc/driver/nvidia/gpus";

// GPUs this process may use. With CUDA_VISIBLE_DEVICES set, its entries up to the first invalid
// one, as CUDA enumerates them: "" / "NoDevFiles" / "-1" = 0, "0,-1,2" = 1 (CUDA stops at "-1").
// Otherwise the entries of `gpu_dir` (0 when it does not exist).
int CountVisibleGpus(const Environment& env, const std::string& gpu_dir = kNvidiaGpusDir);

// What this host shows of NVIDIA GPUs whatever this build and this container can use, as a phrase
// for an error message ("/proc/driver/nvidia/gpus lists 8 GPUs, /dev/nvidia0-7"), or "" when it
// shows none. The driver's list is the host's (procfs is not the container's), so it shows GPUs
// a container was given no access to; SageMaker's SM_NUM_GPUS counts the instance's, and its
// instance type (SM_CURRENT_INSTANCE_TYPE, else kSageMakerResourceConfig's
// current_instance_type) of a GPU family (ml.p<N>, ml.g<N>) is evidence too. GPUs hidden
// on purpose (CUDA_VISIBLE_DEVICES naming none by CountVisibleGpus's rules: empty, "NoDevFiles",
// "-1") are none. `root`
// prefixes the paths read (tests).
std::string GpuEvidence(const Environment& env, const std::string& root = "");

// This machine's host name (gethostname), or `fallback` when it cannot be read.
std::string HostName(absl::string_view fallback = "");

// What makes processes one host to hvx: the host name, the boot (the kernel's boot_id) and the
// /dev/shm they see (its device number), as "NAME\nBOOT_ID\nSHM_DEVICE". Pods or containers that
// share a host name (hostNetwork pods of one node) but not /dev/shm cannot map each other's shared
// memory and have GPUs of their own: they are different hosts. `root` prefixes the two paths read
// (tests); what cannot be read is left empty.
std::string HostIdentity(absl::string_view name, const std::string& root = "");

// A readable host name for each rank's HostIdentity (or plain name): the host name, with "#2",
// "#3", ... for the second, third identity sharing that name, in order of first appearance, so
// that grouping ranks by these names groups them exactly by identity.
std::vector<std::string> HostNamesOf(const std::vector<std::string>& identities);

// The most slots (ranks) one host may have, and the most ranks, hence hosts, one job may have:
// larger counts in a host list or a cluster's environment are typos, overflows or a runaway
// discovery script, not a cluster, and are refused before anything is planned.
inline constexpr int kMaxSlotsPerHost = 4096;
inline constexpr int kMaxRanks = 1 << 20;

// Whether `name` is a plausible host name or IPv4 address: at most 253 letters, digits, '.', '-',
// '_', starting with a letter, digit or '_' (a leading '-' would reach `ssh HOST` as an option).
bool IsValidHostName(absl::string_view name);

// SLURM's compressed node list (SLURM_JOB_NODELIST) expanded in order, zero padding kept:
// "gn[01-03,7],login" -> gn01 gn02 gn03 gn7 login. InvalidArgument naming the list and the bad
// part for an unbalanced bracket, a descending or non-numeric range, a malformed host, or no hosts.
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(absl::string_view text);

// SLURM_TASKS_PER_NODE expanded: "2(x3),1" -> 2 2 2 1. InvalidArgument on a malformed item.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view text);

// A JSON list of host names, as SageMaker's SM_HOSTS holds: ["algo-1", "algo-2"] -> algo-1 algo-2.
// `what` names the source in errors (InvalidArgument for anything but a list of valid host
// names).
absl::StatusOr<std::vector<std::string>> ParseSageMakerHosts(absl::string_view text,
                                                             absl::string_view what = "SM_HOSTS");

// A network interface's name as Linux allows it here: 1 to 15 letters, digits, '.', '-', '_'.
bool IsValidInterfaceName(absl::string_view name);

// Where SageMaker puts its resource config in every container of a job.
inline constexpr char kSageMakerResourceConfig[] = "/opt/ml/input/config/resourceconfig.json";

// What hvx reads of SageMaker's resource config (kSageMakerResourceConfig, or
// SM_RESOURCE_CONFIG): the job's hosts in order (the top-level "hosts", not an instance group's,
// whose order differs) and this host's name ("current_host", "" when absent).
struct SageMakerResourceConfig {
  std::vector<std::string> hosts;
  std::string current_host;
  std::string network_interface_name;  // the instance's interface between hosts ("eth0"), or ""
  std::string current_instance_type;   // "ml.p3.16xlarge", or "" when absent or not a string
};
absl::StatusOr<SageMakerResourceConfig> ParseSageMakerResourceConfig(absl::string_view text,
                                                                     absl::string_view what);

}  // namespace hvx

#endif  // HVX_COMMON_CLUSTER_H_
