// The rank -> host plan: exactly N processes, hosts filled in the given order.
//
//   HVX_ASSIGN_OR_RETURN(Plan plan, MakePlan(3, {{"w0", 1}, {"w1", 2}}));
//   // plan.ranks[2] = {rank 2, host "w1", local 1/2, cross 0/1}
//
// local_rank is the slot index on the host; local_size the ranks placed there; cross_rank the
// index of this host among the hosts that have a rank with this local_rank; cross_size their
// count. These are the values hvxrun exports as HVX_* and that hvx::Init checks against MPI.
#ifndef HVX_LAUNCH_PLAN_H_
#define HVX_LAUNCH_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/launch/hosts.h"

namespace hvx {
namespace launch {

struct RankPlacement {
  int rank = 0;
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;
  int cross_size = 0;
  std::string host;
};

struct Plan {
  int size = 0;
  // Hosts that receive at least one rank, in order, each with the number of ranks placed on it
  // (not its slot count): exactly what hydra's -hosts needs to reproduce this plan.
  std::vector<Host> used_hosts;
  std::vector<RankPlacement> ranks;  // indexed by rank
};

// Fails when np < 1 or np exceeds the total slots ("-np 5 is more than the 4 slots of h1:2,h2:2").
absl::StatusOr<Plan> MakePlan(int np, const std::vector<Host>& hosts);

// Rebuilds a plan from its used-host list ("h1:2,h2:2", as FormatHostList(plan.used_hosts)):
// the per-rank wrapper does this to derive its own placement.
absl::StatusOr<Plan> PlanFromUsedHosts(absl::string_view used_hosts);

// One line per rank: "rank 0  host h1  local 0/2  cross 0/2".
std::string FormatPlan(const Plan& plan);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_PLAN_H_
