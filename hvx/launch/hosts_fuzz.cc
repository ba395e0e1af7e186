// Fuzz target: host lists from every source hvxrun reads them from (-H and discovery output,
// hostfiles such as PBS_NODEFILE). The first byte picks the parser. A list ValidateHosts accepts
// holds only valid names and bounded slot counts, and -H text made from it parses back to it.
#include <string>
#include <vector>

#include "hvx/common/cluster.h"
#include "hvx/launch/hosts.h"
#include "hvx/testing/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hvx::launch;
  if (size == 0) return 0;
  const absl::string_view text = hvx::fuzz::AsText(data + 1, size - 1);
  const absl::StatusOr<std::vector<HostSpec>> parsed =
      data[0] & 1 ? ParseHostfile(text, "hostfile") : ParseHostList(text, "-H");
  if (!parsed.ok() || !ValidateHosts(*parsed, "fuzz").ok()) return 0;
  std::vector<Host> hosts;
  long total = 0;
  for (const HostSpec& h : *parsed) {
    HVX_FUZZ_CHECK(hvx::IsValidHostName(h.name), "an accepted host name is not valid");
    HVX_FUZZ_CHECK(h.name.empty() || h.name[0] != '-', "an accepted host name is an ssh option");
    HVX_FUZZ_CHECK(!h.slots || (*h.slots >= 1 && *h.slots <= hvx::kMaxSlotsPerHost),
                   "an accepted slot count is out of range");
    hosts.push_back({h.name, h.slots.value_or(1)});
    total += h.slots.value_or(1);
  }
  HVX_FUZZ_CHECK(total <= hvx::kMaxRanks, "accepted hosts have more slots than ranks can be");
  if (hosts.empty()) return 0;
  const absl::StatusOr<std::vector<HostSpec>> again = ParseHostList(FormatHostList(hosts), "-H");
  HVX_FUZZ_CHECK(again.ok() && again->size() == hosts.size(), "FormatHostList does not parse back");
  for (size_t i = 0; i < hosts.size(); ++i) {
    HVX_FUZZ_CHECK((*again)[i].name == hosts[i].name && (*again)[i].slots == hosts[i].slots,
                   "FormatHostList does not parse back to the same hosts");
  }
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using namespace std::string_literals;
  return {
      "\0h1:2,h2:2,h3"s,
      "\0node-01.cluster.local:8,10.0.0.2:8"s,
      "\0[fe80::1]:2,host_a"s,
      "\1# MPICH style\nh1:2\nh2:4\n"s,
      "\1h1 slots=4 max_slots=8\nh2 slots=2\n\n# done\n"s,
      "\1node1\nnode1\nnode2\nnode2\n"s,
  };
}
