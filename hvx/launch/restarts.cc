#include "hvx/launch/restarts.h"

#include <unistd.h>

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/common/random_hex.h"
#include "hvx/common/status.h"

namespace hvx {
namespace launch {

void RecordHostFailure(const std::string& host, const std::string& why, int limit,
                       HostHealth* health) {
  const int n = ++health->failures[host];
  if (n >= std::max(limit, 1) && !health->excluded.count(host)) {
    health->excluded[host] =
        absl::StrCat(why, n > 1 ? absl::StrCat(" (failure ", n, " of this host)") : "");
  }
}

absl::StatusOr<LaunchOptions> PlanAttempt(const LaunchOptions& base, const std::vector<Host>& hosts,
                                          const HostHealth& health, int attempt,
                                          const std::string& run_id) {
  std::vector<Host> usable;
  int slots = 0;
  for (const Host& h : hosts) {
    if (health.excluded.count(h.name)) continue;
    usable.push_back(h);
    slots += h.slots;
  }
  const int cap = base.max_np.value_or(base.np.value_or(INT_MAX));
  const int np = std::min(cap, slots);
  if (np < std::max(base.min_np, 1)) {
    std::vector<std::string> why;
    for (const auto& [host, reason] : health.excluded) {
      why.push_back(absl::StrCat(host, " (", reason, ")"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("only ", slots, " usable slots", usable.empty() ? "" : " on ",
                     FormatHostList(usable), ", fewer than --min-np ", std::max(base.min_np, 1),
                     why.empty() ? "" : absl::StrCat("; excluded: ", absl::StrJoin(why, ", "))));
  }
  LaunchOptions next = base;
  next.hosts = FormatHostList(usable);
  next.hostfile.clear();
  next.np = np;
  next.env.emplace_back("HVX_RESTART_COUNT", absl::StrCat(attempt));
  next.env.emplace_back("HVX_RUN_ID", run_id);
  return next;
}

absl::StatusOr<std::vector<Host>> ParseDiscoveredHosts(
    const std::string& output, const std::string& script,
    const std::map<std::string, int>& known_slots, std::optional<int> default_slots) {
  HVX_ASSIGN_OR_RETURN(std::vector<HostSpec> specs,
                       ParseHostfile(output, absl::StrCat("--host-discovery-script ", script)));
  HVX_RETURN_IF_ERROR(ValidateHosts(specs, absl::StrCat("--host-discovery-script ", script)));
  std::vector<Host> hosts;
  for (const HostSpec& s : specs) {
    std::optional<int> slots = s.slots;
    if (!slots) {
      const auto known = known_slots.find(s.name);
      slots = known != known_slots.end() ? std::optional<int>(known->second) : default_slots;
    }
    if (!slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--host-discovery-script ", script, ": host '", s.name, "' has no slot count (print ",
          s.name, ":SLOTS, list it in the job's hostfile, or give --slots-per-host)"));
    }
    hosts.push_back({s.name, *slots});
  }
  if (hosts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host-discovery-script ", script, " printed no hosts"));
  }
  return hosts;
}

std::string RestartLine(int attempt, int max_restarts, const std::string& cause,
                        const HostHealth& health, const LaunchOptions& next) {
  std::vector<std::string> excluded;
  for (const auto& [host, why] : health.excluded) {
    const auto it = health.failures.find(host);
    const int n = it == health.failures.end() ? 0 : it->second;
    excluded.push_back(absl::StrCat(host, " (", n, n == 1 ? " failure)" : " failures)"));
  }
  return absl::StrCat("restart ", attempt, " of ", max_restarts, ": ", cause, "; excluded ",
                      excluded.empty() ? "none" : absl::StrJoin(excluded, ", "), "; new plan: np ",
                      next.np.value_or(0), " on ", next.hosts);
}

std::string NewRunId() { return RandomHex(); }

}  // namespace launch
}  // namespace hvx
