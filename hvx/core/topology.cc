#include "hvx/core/topology.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/cluster.h"

namespace hvx {
namespace {

int IntOr(const Environment& env, absl::string_view name, int fallback) {
  auto v = env.GetNonEmpty(name);
  int n;
  if (v.has_value() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*v), &n)) return n;
  return fallback;
}

std::string Quote(const std::string& arg) {
  if (!arg.empty() &&
      arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                            "_-+=/.,:@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

}  // namespace

Topology ComputeTopology(int rank, const std::vector<std::string>& hosts) {
  const HostLayout layout = LayoutOf(hosts);
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(hosts.size());
  t.host = hosts[rank];
  const RankPlace place = layout.PlaceOf(rank);
  t.local_rank = place.local_rank;
  t.local_size = place.local_size;
  t.cross_rank = place.cross_rank;
  t.cross_size = place.cross_size;
  t.homogeneous = layout.Homogeneous();
  return t;
}

absl::Status CheckLauncherEnvironment(const Topology& t, const Environment& env) {
  const std::pair<const char*, int> checks[] = {
      {"HVX_RANK", t.rank},
      {"HVX_SIZE", t.size},
      {"HVX_LOCAL_RANK", t.local_rank},
      {"HVX_LOCAL_SIZE", t.local_size},
      {"HVX_CROSS_RANK", t.cross_rank},
      {"HVX_CROSS_SIZE", t.cross_size},
  };
  for (const auto& [name, actual] : checks) {
    auto v = env.GetNonEmpty(name);
    if (!v.has_value()) continue;
    int expected;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*v), &expected) || expected != actual) {
      return absl::FailedPreconditionError(
          absl::StrCat("the launcher set ", name, "=", *v, " but the transport reports ", actual,
                       " (rank ", t.rank, " of ", t.size, " on host ", t.host,
                       "). The program was probably started by a launcher of a different MPI than "
                       "the one hvx links, "
                       "or the host list does not match the real hosts; start it with hvxrun."));
    }
  }
  return absl::OkStatus();
}

std::string CurrentCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> args;
  for (absl::string_view a : absl::StrSplit(ss.str(), '\0', absl::SkipEmpty()))
    args.push_back(Quote(std::string(a)));
  return absl::StrJoin(args, " ");
}

namespace {

// " (RANK=3)" when the environment names this pod's rank, else "".
std::string RankOf(const Environment& env) {
  const std::optional<std::string> rank = env.GetNonEmpty("RANK");
  return rank ? absl::StrCat(" (RANK=", *rank, ")") : std::string();
}

}  // namespace

absl::Status CheckSingleton(const Environment& env, int visible_gpus,
                            const std::string& command_line) {
  std::vector<std::string> seen;
  std::vector<std::string> hosts;
  int slots = 0;
  int np = 0;
  for (const char* var : {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}) {
    const int n = IntOr(env, var, 0);
    if (n > 1) {
      seen.push_back(absl::StrCat(var, "=", n,
                                  " (a launcher of a different MPI than the one hvx links started ",
                                  n, " processes, and each of them became its own job of size 1)"));
      np = std::max(np, n);
    }
  }
  const int slurm_tasks = IntOr(env, "SLURM_NTASKS", IntOr(env, "SLURM_NPROCS", 0));
  if (slurm_tasks > 1) {
    seen.push_back(absl::StrCat("SLURM_NTASKS=", slurm_tasks));
    np = slurm_tasks;
    auto nodes = env.GetNonEmpty("SLURM_JOB_NODELIST");
    if (!nodes.has_value()) nodes = env.GetNonEmpty("SLURM_NODELIST");
    if (nodes.has_value()) {
      // A malformed list only loses the hosts from the suggested command; the rest still helps.
      hosts = ExpandSlurmNodeList(*nodes).value_or(std::vector<std::string>{});
      seen.push_back(absl::StrCat("SLURM_JOB_NODELIST=", *nodes));
    }
  }
  auto sm_hosts = env.GetNonEmpty("SM_HOSTS");
  const int sm_gpus = IntOr(env, "SM_NUM_GPUS", 0);
  if (sm_hosts.has_value()) {
    std::vector<std::string> h =
        ParseSageMakerHosts(*sm_hosts).value_or(std::vector<std::string>{});
    if (h.size() > 1 || sm_gpus > 1) {
      seen.push_back(absl::StrCat("SM_HOSTS=", *sm_hosts));
      if (sm_gpus > 0) seen.push_back(absl::StrCat("SM_NUM_GPUS=", sm_gpus));
      hosts = h;
      slots = std::max(1, sm_gpus);
      np = std::max<int>(1, hosts.size()) * slots;
    }
  } else if (sm_gpus > 1) {
    seen.push_back(absl::StrCat("SM_NUM_GPUS=", sm_gpus));
    np = std::max(np, sm_gpus);
  }
  // torchrun (LOCAL_RANK set) started WORLD_SIZE processes on this host; none knows the others.
  const int world_size = IntOr(env, "WORLD_SIZE", 0);
  if (world_size > 1 && env.Get("LOCAL_RANK").has_value()) {
    seen.push_back(absl::StrCat("WORLD_SIZE=", world_size,
                                " (torchrun started that many processes, each its own job of "
                                "size 1)"));
    np = std::max(np, world_size);
  } else if (world_size > 1) {
    // One process per pod, as a Kubeflow PyTorchJob runs it: no host list to suggest here.
    return absl::FailedPreconditionError(absl::StrCat(
        "hvx started as a single process (size 1) in one of WORLD_SIZE=", world_size,
        " pods that a per-pod launcher (a Kubeflow PyTorchJob) started", RankOf(env),
        ": each pod runs the program alone, so each would train as a job of size 1 on the whole "
        "dataset. Run hvx as an MPIJob (Kubeflow MPI Operator, mpiImplementation: MPICH), whose "
        "launcher pod runs `hvxrun -- PROGRAM` over the worker pods "
        "(examples/deploy/kubernetes/mpijob.yaml), or set HVX_ALLOW_SINGLETON=1 "
        "(InitOptions::allow_singleton) to run alone on purpose."));
  }
  // Kubeflow Trainer v2's torch runtime: PET_* (torchrun's arguments as variables), no WORLD_SIZE
  // until torchrun runs. A program started without torchrun is one of PET_NNODES pods alone.
  const int pet_nodes = IntOr(env, "PET_NNODES", 0);
  const int pet_procs = IntOr(env, "PET_NPROC_PER_NODE", 0);
  if (pet_nodes * std::max(pet_procs, 1) > 1) {
    const std::optional<std::string> node = env.GetNonEmpty("PET_NODE_RANK");
    return absl::FailedPreconditionError(absl::StrCat(
        "hvx started as a single process (size 1) in a Kubeflow TrainJob pod (Trainer v2: "
        "PET_NNODES=",
        pet_nodes, pet_procs > 0 ? absl::StrCat(", PET_NPROC_PER_NODE=", pet_procs) : "",
        node ? absl::StrCat(", PET_NODE_RANK=", *node) : "",
        "): each pod runs the program alone, so each would train as a job of size 1 on the whole "
        "dataset. Trainer v2 starts MPI jobs with Open MPI only; run hvx as an MPIJob (Kubeflow "
        "MPI Operator, mpiImplementation: MPICH), whose launcher pod runs `hvxrun -- PROGRAM` over "
        "the worker pods (examples/deploy/kubernetes/mpijob.yaml), or set HVX_ALLOW_SINGLETON=1 "
        "(InitOptions::allow_singleton) to run alone on purpose."));
  }
  if (visible_gpus > 1) {
    seen.push_back(absl::StrCat(visible_gpus, " visible GPUs"));
    if (np == 0) np = visible_gpus;
  }
  if (seen.empty()) return absl::OkStatus();

  if (hosts.empty()) hosts = {"localhost"};
  if (slots == 0)
    slots = std::max(1, (np + static_cast<int>(hosts.size()) - 1) / static_cast<int>(hosts.size()));
  np = std::max(np, 1);
  std::vector<std::string> spec;
  for (const std::string& h : hosts) spec.push_back(absl::StrCat(h, ":", slots));
  const std::string command =
      absl::StrCat("hvxrun -np ", np, " -H ", absl::StrJoin(spec, ","), " -- ",
                   command_line.empty() ? "PROGRAM ARGS" : command_line);
  return absl::FailedPreconditionError(absl::StrCat(
      "hvx started as a single process (size 1), but the environment shows a job of ", np,
      " processes was intended: ", absl::StrJoin(seen, "; "), ". Start it with:\n  ", command,
      "\nor set HVX_ALLOW_SINGLETON=1 (InitOptions::allow_singleton) to run alone on purpose."));
}

}  // namespace hvx
