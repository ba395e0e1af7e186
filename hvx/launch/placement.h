// Where each rank of a job sits, from the hosts that receive ranks and how many each gets. Both
// hvxrun's plan (plan.h) and the per-rank wrapper use it; it needs only the C++ library, so the
// wrapper binary that links it starts in a fraction of the time an Abseil-linked one takes.
//
// clang-format off
//   std::vector<RankPlacement> r = PlaceRanks({{"h1", 3}, {"h2", 1}});
//   // r[1] = {rank 1, host "h1", local 1/3, cross 0/1}
//   // r[3] = {rank 3, host "h2", local 0/1, cross 1/2}
// clang-format on
//
// local_rank is the slot index on the host; local_size the ranks placed there; cross_rank the
// index of this host among the hosts that have a rank with this local_rank; cross_size their
// count (Horovod's definitions). These are the values hvxrun exports as HVX_*, computed by the
// function (HostLayout::PlaceOf, hvx/common/layout.h) that hvx::Init's topology uses to check them
// against the hosts the transport reports.
#ifndef HVX_LAUNCH_PLACEMENT_H_
#define HVX_LAUNCH_PLACEMENT_H_

#include <string>
#include <utility>
#include <vector>

#include "hvx/common/layout.h"

namespace hvx {
namespace launch {

// Its local and cross coordinates (RankPlace), its rank and its host.
struct RankPlacement : RankPlace {
  int rank = 0;
  std::string host;
};

// A host and the number of ranks placed on it (> 0).
using HostCount = std::pair<std::string, int>;

// Ranks fill the hosts in order: host 0 gets ranks 0..count0-1, and so on.
std::vector<RankPlacement> PlaceRanks(const std::vector<HostCount>& used_hosts);

// Parses "h1:2,h2:2" (FormatHostList of a plan's used hosts). Returns false and sets *error,
// quoting the entry, when an entry is not `name:count` with count > 0.
bool ParseUsedHosts(const std::string& text, std::vector<HostCount>* hosts, std::string* error);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_PLACEMENT_H_
