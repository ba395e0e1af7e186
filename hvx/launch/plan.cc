#include "hvx/launch/plan.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/status.h"

namespace hvx {
namespace launch {

absl::StatusOr<Plan> MakePlan(int np, const std::vector<Host>& hosts) {
  if (np < 1) return absl::InvalidArgumentError(absl::StrCat("-np must be >= 1, got ", np));
  int64_t total = 0;
  for (const Host& h : hosts) {
    if (h.slots < 1) {
      return absl::InvalidArgumentError(absl::StrCat("host '", h.name, "' has zero slots"));
    }
    total += h.slots;
  }
  if (np > total) {
    return absl::InvalidArgumentError(absl::StrCat("-np ", np, " is more than the ", total,
                                                   " slots of ", FormatHostList(hosts)));
  }
  Plan plan;
  plan.size = np;
  int next = 0;
  for (const Host& h : hosts) {
    if (next == np) break;
    int count = std::min(h.slots, np - next);
    plan.used_hosts.push_back({h.name, count});
    for (int l = 0; l < count; ++l) {
      RankPlacement p;
      p.rank = next++;
      p.local_rank = l;
      p.local_size = count;
      p.host = h.name;
      plan.ranks.push_back(std::move(p));
    }
  }
  // Hosts are visited in order, so counting hosts per local rank as we go gives cross_rank.
  std::map<int, int> hosts_with_local_rank;
  for (RankPlacement& p : plan.ranks) p.cross_rank = hosts_with_local_rank[p.local_rank]++;
  for (RankPlacement& p : plan.ranks) p.cross_size = hosts_with_local_rank[p.local_rank];
  return plan;
}

absl::StatusOr<Plan> PlanFromUsedHosts(absl::string_view used_hosts) {
  HVX_ASSIGN_OR_RETURN(std::vector<HostSpec> specs, ParseHostList(used_hosts, "the plan"));
  std::vector<Host> hosts;
  int np = 0;
  for (const HostSpec& s : specs) {
    hosts.push_back({s.name, s.slots.value_or(1)});
    np += hosts.back().slots;
  }
  return MakePlan(np, hosts);
}

std::string FormatPlan(const Plan& plan) {
  std::string out;
  for (const RankPlacement& p : plan.ranks) {
    absl::StrAppendFormat(&out, "rank %d  host %s  local %d/%d  cross %d/%d\n", p.rank, p.host,
                          p.local_rank, p.local_size, p.cross_rank, p.cross_size);
  }
  return out;
}

}  // namespace launch
}  // namespace hvx
