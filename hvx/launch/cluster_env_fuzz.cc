// Fuzz target: the hosts of a cluster environment as its platform states them (DetectClusterHosts):
// SLURM's node list and tasks-per-node, SageMaker's SM_HOSTS and resourceconfig.json, a
// PBS_NODEFILE and a hostfile variable. The input is cut at NUL bytes: the first byte picks the
// source, the next parts are its values and the file it names. Hosts that come out are valid
// names with slots in range, each once, totalling at most kMaxRanks; a SageMaker host list has
// its leader first.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hvx/common/cluster.h"
#include "hvx/common/env.h"
#include "hvx/launch/cluster_env.h"
#include "hvx/testing/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hvx;
  if (size == 0) return 0;
  const std::vector<absl::string_view> parts =
      fuzz::SplitInput(fuzz::AsText(data + 1, size - 1), '\0', 3);
  const std::string a(parts[0]);
  const std::string b(parts.size() > 1 ? parts[1] : "");
  const std::string file(parts.size() > 2 ? parts[2] : "");
  std::map<std::string, std::string> vars;
  switch (data[0] % 5) {
    case 0:
      vars = {{"SLURM_JOB_NODELIST", a}, {"SLURM_TASKS_PER_NODE", b}};
      break;
    case 1:
      vars = {{"SLURM_NODELIST", a}, {"SLURM_GPUS_PER_NODE", b}};
      break;
    case 2:
      vars = {{"SM_HOSTS", a}, {"SM_CURRENT_HOST", b}, {"SM_NUM_GPUS", "8"}};
      break;
    case 3:
      // resourceconfig.json, from the variable or from the platform's file.
      vars = {{"SM_CURRENT_HOST", b}};
      if (data[0] & 8) vars["SM_RESOURCE_CONFIG"] = a;
      break;
    default:
      vars = {{data[0] & 8 ? "PBS_NODEFILE" : "HYDRA_HOST_FILE", "/fuzz/hosts"}};
      break;
  }
  const MapEnvironment env(vars);
  const auto reader = [&](const std::string& path) -> absl::StatusOr<std::string> {
    if (path == "/fuzz/hosts") return file;
    if (data[0] % 5 == 3 && path.find("resourceconfig.json") != std::string::npos) return a;
    return absl::NotFoundError(path);
  };
  const absl::StatusOr<std::optional<launch::ClusterHosts>> found =
      launch::DetectClusterHosts(env, reader, /*local_gpus=*/2);
  if (!found.ok() || !found->has_value()) return 0;
  const launch::ClusterHosts& c = **found;
  std::set<std::string> names;
  long total = 0;
  for (const launch::HostSpec& h : c.hosts) {
    HVX_FUZZ_CHECK(IsValidHostName(h.name), "a cluster host has an invalid name");
    HVX_FUZZ_CHECK(h.slots && *h.slots >= 1 && *h.slots <= kMaxSlotsPerHost,
                   "a cluster host's slots are unset or out of range");
    HVX_FUZZ_CHECK(names.insert(h.name).second, "a cluster host is listed twice");
    total += *h.slots;
  }
  HVX_FUZZ_CHECK(!c.hosts.empty(), "a cluster was found with no hosts");
  HVX_FUZZ_CHECK(total <= kMaxRanks, "a cluster has more slots than ranks can be");
  HVX_FUZZ_CHECK(!c.is_leader || c.current_host.empty() || c.current_host == c.hosts[0].name,
                 "a host other than the first leads");
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using namespace std::string_literals;
  return {
      "\0gn[01-03,7],login\0"s
      "2(x3),1,4"s,
      "\1node[1-2]\0"s
      "gpu:8"s,
      "\2[\"algo-1\",\"algo-2\"]\0"s
      "algo-2"s,
      "\3{\"current_host\": \"algo-1\", \"hosts\": [\"algo-1\", \"algo-2\"], \"network_interface_name\": \"eth0\"}\0"s
      "algo-1"s,
      "\x0b{\"current_host\":\"algo-2\",\"hosts\":[\"algo-1\",\"algo-2\",\"algo-3\"],\"instance_groups\":[{\"instance_group_name\":\"train\",\"hosts\":[\"algo-2\",\"algo-1\"]}]}\0"s,
      "\x0c\0\0n1\nn1\nn2\n\n"s,
      "\4\0\0# comment\nh1:2\nh2 slots=4\n"s,
  };
}
