#include "hvx/launch/cluster_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/cluster.h"
#include "hvx/common/status.h"

namespace hvx {
namespace launch {
namespace {

absl::StatusOr<int> NonNegativeInt(absl::string_view name, absl::string_view text) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", text, "': expected a non-negative integer"));
  }
  return v;
}

// SLURM_GPUS_PER_NODE is "4", "gpu:4" or "a100:4"; several types ("a100:2,v100:2") add up, to
// at most kMaxSlotsPerHost.
absl::StatusOr<int> ParseSlurmGpus(absl::string_view name, absl::string_view text) {
  int total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    size_t colon = part.rfind(':');
    absl::string_view count = colon == absl::string_view::npos ? part : part.substr(colon + 1);
    // "gpu:4(S:0-1)": socket affinity suffix.
    count = count.substr(0, count.find('('));
    HVX_ASSIGN_OR_RETURN(int n, NonNegativeInt(name, count));
    if (n > kMaxSlotsPerHost - total) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "='", text, "': more than ", kMaxSlotsPerHost, " GPUs on one node"));
    }
    total += n;
  }
  return total;
}

absl::StatusOr<std::optional<ClusterHosts>> DetectSlurm(const Environment& env) {
  std::optional<std::string> nodelist = env.GetNonEmpty("SLURM_JOB_NODELIST");
  const char* nodelist_var = "SLURM_JOB_NODELIST";
  if (!nodelist) {
    nodelist = env.GetNonEmpty("SLURM_NODELIST");
    nodelist_var = "SLURM_NODELIST";
  }
  if (!nodelist) return std::nullopt;
  HVX_ASSIGN_OR_RETURN(std::vector<std::string> nodes, ExpandSlurmNodeList(*nodelist));

  int gpus = 0;
  if (auto v = env.GetNonEmpty("SLURM_GPUS_ON_NODE")) {
    HVX_ASSIGN_OR_RETURN(gpus, NonNegativeInt("SLURM_GPUS_ON_NODE", *v));
  } else if (auto v = env.GetNonEmpty("SLURM_GPUS_PER_NODE")) {
    HVX_ASSIGN_OR_RETURN(gpus, ParseSlurmGpus("SLURM_GPUS_PER_NODE", *v));
  }
  std::vector<int> tasks(nodes.size(), 1);
  if (gpus == 0) {
    if (auto v = env.GetNonEmpty("SLURM_TASKS_PER_NODE")) {
      HVX_ASSIGN_OR_RETURN(tasks, ExpandSlurmTasksPerNode(*v));
      if (tasks.size() != nodes.size()) {
        return absl::InvalidArgumentError(absl::StrCat("SLURM_TASKS_PER_NODE='", *v, "' gives ",
                                                       tasks.size(), " nodes but ", nodelist_var,
                                                       "='", *nodelist, "' has ", nodes.size()));
      }
    }
  }
  ClusterHosts c;
  c.source = absl::StrCat("SLURM allocation (", nodelist_var, "=", *nodelist, ")");
  c.launcher = ClusterHosts::Launcher::kSlurm;
  for (size_t i = 0; i < nodes.size(); ++i) {
    c.hosts.push_back({nodes[i], gpus > 0 ? gpus : tasks[i]});
  }
  if (auto v = env.GetNonEmpty("SLURMD_NODENAME")) c.current_host = *v;
  return c;
}

absl::StatusOr<std::optional<ClusterHosts>> DetectSageMaker(const Environment& env,
                                                            const FileReader& read_file,
                                                            int local_gpus) {
  std::vector<std::string> hosts;
  std::string current;
  std::string source;
  if (auto sm_hosts = env.GetNonEmpty("SM_HOSTS")) {
    HVX_ASSIGN_OR_RETURN(hosts, ParseSageMakerHosts(*sm_hosts, "SM_HOSTS"));
    current = env.GetNonEmpty("SM_CURRENT_HOST").value_or("");
    source = "SageMaker environment (SM_HOSTS)";
  } else {
    std::optional<std::string> json = env.GetNonEmpty("SM_RESOURCE_CONFIG");
    source = "SageMaker resource config (SM_RESOURCE_CONFIG)";
    if (!json) {
      absl::StatusOr<std::string> file = read_file(kSageMakerResourceConfig);
      if (!file.ok()) return std::nullopt;
      json = *file;
      source = absl::StrCat("SageMaker resource config (", kSageMakerResourceConfig, ")");
    }
    HVX_ASSIGN_OR_RETURN(SageMakerResourceConfig config,
                         ParseSageMakerResourceConfig(*json, source));
    hosts = std::move(config.hosts);
    current = std::move(config.current_host);
  }
  if (hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(source, " lists no hosts"));
  int gpus = local_gpus;
  if (auto v = env.GetNonEmpty("SM_NUM_GPUS")) {
    HVX_ASSIGN_OR_RETURN(gpus, NonNegativeInt("SM_NUM_GPUS", *v));
  }
  ClusterHosts c;
  c.source = source;
  for (const std::string& h : hosts) c.hosts.push_back({h, std::max(gpus, 1)});
  c.current_host = current;
  c.leader_launches = true;
  c.is_leader = current.empty() || current == hosts[0];
  c.host_wait_s = kHostsStartApartWaitS;
  return c;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ClusterRankEnvironment(
    const Environment& env, const FileReader& read_file) {
  std::vector<std::pair<std::string, std::string>> out;
  if (env.Get("NCCL_SOCKET_IFNAME")) return out;
  std::string iface;
  if (auto v = env.GetNonEmpty("SM_NETWORK_INTERFACE_NAME")) {
    iface = *v;
  } else {
    std::optional<std::string> json = env.GetNonEmpty("SM_RESOURCE_CONFIG");
    if (!json) {
      if (absl::StatusOr<std::string> file = read_file(kSageMakerResourceConfig); file.ok()) {
        json = *file;
      }
    }
    if (json) {
      if (absl::StatusOr<SageMakerResourceConfig> c = ParseSageMakerResourceConfig(*json, "");
          c.ok()) {
        iface = c->network_interface_name;
      }
    }
  }
  if (IsValidInterfaceName(iface)) out.emplace_back("NCCL_SOCKET_IFNAME", iface);
  return out;
}

namespace {

// PBS_NODEFILE names a host once per slot.
absl::StatusOr<std::optional<ClusterHosts>> DetectPbs(const Environment& env,
                                                      const FileReader& read_file) {
  std::optional<std::string> path = env.GetNonEmpty("PBS_NODEFILE");
  if (!path) return std::nullopt;
  HVX_ASSIGN_OR_RETURN(std::string text, read_file(*path));
  ClusterHosts c;
  c.source = absl::StrCat("PBS_NODEFILE=", *path);
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (!IsValidHostName(line)) {
      return absl::InvalidArgumentError(
          absl::StrCat(*path, ":", line_no, ": bad host name '", line, "' in PBS_NODEFILE"));
    }
    if (!c.hosts.empty() && c.hosts.back().name == line) {
      ++*c.hosts.back().slots;
    } else {
      c.hosts.push_back({std::string(line), 1});
    }
  }
  if (c.hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(c.source, " lists no hosts"));
  return c;
}

absl::StatusOr<std::optional<ClusterHosts>> DetectHostfileVariable(const Environment& env,
                                                                   const FileReader& read_file,
                                                                   int local_gpus) {
  for (const char* var :
       {"HYDRA_HOST_FILE", "OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE"}) {
    std::optional<std::string> path = env.GetNonEmpty(var);
    if (!path) continue;
    HVX_ASSIGN_OR_RETURN(std::string text, read_file(*path));
    HVX_ASSIGN_OR_RETURN(std::vector<HostSpec> hosts, ParseHostfile(text, *path));
    for (HostSpec& h : hosts) {
      if (!h.slots) h.slots = std::max(local_gpus, 1);
    }
    ClusterHosts c;
    c.source = absl::StrCat(var, "=", *path);
    // The Kubeflow MPI Operator's launcher pod: its hostfile names the worker pods.
    if (env.GetNonEmpty("K_MPI_JOB_ROLE") == "launcher") {
      c.source = absl::StrCat("Kubeflow MPI Operator launcher (", c.source, ")");
      c.host_wait_s = kHostsStartApartWaitS;
      c.own_name_in_dns = true;
    }
    c.hosts = std::move(hosts);
    return c;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> DetectEnclosingLauncher(const Environment& env) {
  auto shown = [&](const char* name) { return absl::StrCat(name, "=", *env.Get(name)); };
  if (env.Get("HVX_RANK")) return absl::StrCat("hvxrun (", shown("HVX_RANK"), ")");
  for (const char* v : {"PMI_RANK", "PMI_FD", "PMI_SIZE", "PMI_PORT"}) {
    if (env.Get(v)) return absl::StrCat("MPICH hydra or another PMI launcher (", shown(v), ")");
  }
  if (env.Get("OMPI_COMM_WORLD_RANK")) {
    return absl::StrCat("Open MPI mpirun (", shown("OMPI_COMM_WORLD_RANK"), ")");
  }
  if (env.Get("SLURM_PROCID") && (env.Get("SLURM_STEP_ID") || env.Get("SLURM_STEPID"))) {
    return absl::StrCat("a SLURM task (srun step, ", shown("SLURM_PROCID"), ")");
  }
  if (env.Get("RANK") && env.Get("WORLD_SIZE") && env.Get("LOCAL_RANK")) {
    return absl::StrCat("torchrun (", shown("RANK"), ", ", shown("WORLD_SIZE"), ")");
  }
  if (env.Get("HOROVOD_RANK")) return absl::StrCat("horovodrun (", shown("HOROVOD_RANK"), ")");
  return std::nullopt;
}

bool IsUnderLauncher(const Environment& env) { return DetectEnclosingLauncher(env).has_value(); }

absl::StatusOr<std::optional<ClusterHosts>> DetectClusterHosts(const Environment& env,
                                                               const FileReader& read_file,
                                                               int local_gpus) {
  if (env.GetNonEmpty("K_MPI_JOB_ROLE") == "worker") {
    return absl::FailedPreconditionError(
        "this is a worker pod of a Kubeflow MPIJob (K_MPI_JOB_ROLE=worker): its container only "
        "runs sshd, and the launcher pod starts the ranks here. Put `hvxrun -- PROGRAM` in the "
        "launcher's command, not the workers' (examples/deploy/kubernetes/mpijob.yaml)");
  }
  HVX_ASSIGN_OR_RETURN(std::optional<ClusterHosts> c, DetectSlurm(env));
  if (!c && (env.GetNonEmpty("SM_HOSTS") || env.GetNonEmpty("SM_RESOURCE_CONFIG") ||
             env.GetNonEmpty("SM_CURRENT_HOST") || read_file(kSageMakerResourceConfig).ok())) {
    HVX_ASSIGN_OR_RETURN(c, DetectSageMaker(env, read_file, local_gpus));
  }
  if (!c) {
    HVX_ASSIGN_OR_RETURN(c, DetectPbs(env, read_file));
  }
  if (!c) {
    HVX_ASSIGN_OR_RETURN(c, DetectHostfileVariable(env, read_file, local_gpus));
  }
  // Whatever the environment says, the same checks as for -H: no names ssh reads as options, no
  // slot counts a typo or an overflow made.
  if (c) HVX_RETURN_IF_ERROR(ValidateHosts(c->hosts, c->source));
  return c;
}

}  // namespace launch
}  // namespace hvx
