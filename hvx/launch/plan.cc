#include "hvx/launch/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
    return absl::InvalidArgumentError(
        absl::StrCat("-np ", np, " is more than the ", total, " slots of ", FormatHostList(hosts)));
  }
  Plan plan;
  plan.size = np;
  std::vector<HostCount> counts;
  int placed = 0;
  for (const Host& h : hosts) {
    if (placed == np) break;
    const int count = std::min(h.slots, np - placed);
    plan.used_hosts.push_back({h.name, count});
    counts.emplace_back(h.name, count);
    placed += count;
  }
  plan.ranks = PlaceRanks(counts);
  return plan;
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
