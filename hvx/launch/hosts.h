// Host lists as users write them: `-H h1:2,h2:2` on the command line and hostfiles.
//
//   HVX_ASSIGN_OR_RETURN(std::vector<HostSpec> hosts, ParseHostList("h1:2,h2"));
//   // hosts[0] = {"h1", 2}, hosts[1] = {"h2", nullopt}: slots decided later (--slots-per-host).
//
// Accepted entries: `host` and `host:slots`. Hostfiles also take `host slots=N` (the Open MPI and
// Horovod form; `max_slots=M` is ignored) and `#` comments, so the files written by the common
// cluster tools (MPICH `host:N`, Open MPI `host slots=N`, one bare host per line) all load.
#ifndef HVX_LAUNCH_HOSTS_H_
#define HVX_LAUNCH_HOSTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/cluster.h"

namespace hvx {
namespace launch {

struct HostSpec {
  std::string name;
  // Unset: the host was named without a count; the slot policy (a number or `auto`) decides.
  std::optional<int> slots;

  bool operator==(const HostSpec& o) const { return name == o.name && slots == o.slots; }
};

// A host with its final slot count (> 0).
struct Host {
  std::string name;
  int slots = 0;

  bool operator==(const Host& o) const { return name == o.name && slots == o.slots; }
};

// Parses "h1:2,h2:4,h3". Errors quote the bad entry: "malformed host entry 'h1:x' in -H: ...".
// `source` names where the text came from ("-H", "SLURM_JOB_NODELIST", ...).
absl::StatusOr<std::vector<HostSpec>> ParseHostList(absl::string_view text,
                                                    absl::string_view source = "-H");

// Parses hostfile contents; errors name `path` and the 1-based line.
absl::StatusOr<std::vector<HostSpec>> ParseHostfile(absl::string_view contents,
                                                    absl::string_view path);

// Reads and parses a hostfile.
absl::StatusOr<std::vector<HostSpec>> ReadHostfile(const std::string& path);

// Checks a host list from any source (-H, a hostfile, a discovery script, a cluster's
// environment) before it is planned: every name IsValidHostName (not an ssh option), every slot
// count set in 1..kMaxSlotsPerHost (hvx/common/cluster.h), no host listed twice (naming it and both
// positions; names compare exactly), and at most kMaxRanks slots in all. Errors name `source`.
absl::Status ValidateHosts(const std::vector<HostSpec>& hosts, absl::string_view source);

// "h1:2,h2:4" (the syntax of -H and of hydra's -hosts).
std::string FormatHostList(const std::vector<Host>& hosts);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_HOSTS_H_
