// The rank -> host plan: exactly N processes, hosts filled in the given order.
//
//   HVX_ASSIGN_OR_RETURN(Plan plan, MakePlan(3, {{"w0", 1}, {"w1", 2}}));
//   // plan.ranks[2] = {rank 2, host "w1", local 1/2, cross 0/1}
//
// The per-rank values (local and cross rank and size) are defined in placement.h.
#ifndef HVX_LAUNCH_PLAN_H_
#define HVX_LAUNCH_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/launch/hosts.h"
#include "hvx/launch/placement.h"

namespace hvx {
namespace launch {

struct Plan {
  int size = 0;
  // Hosts that receive at least one rank, in order, each with the number of ranks placed on it
  // (not its slot count): exactly what hydra's -hosts needs to reproduce this plan.
  std::vector<Host> used_hosts;
  std::vector<RankPlacement> ranks;  // indexed by rank
};

// Fails when np < 1 or np exceeds the total slots ("-np 5 is more than the 4 slots of h1:2,h2:2").
absl::StatusOr<Plan> MakePlan(int np, const std::vector<Host>& hosts);

// One line per rank: "rank 0  host h1  local 0/2  cross 0/2".
std::string FormatPlan(const Plan& plan);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_PLAN_H_
