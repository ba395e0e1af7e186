// Where the ranks of a group sit, from each rank's host name: the one computation behind
// hvx::Init's topology and its check of the launcher's HVX_* values, hvxrun's placement, the
// engine's per-host gather, the shared-memory CPU plane and the NCCL plane's hierarchical
// communicators. It needs only the C++ library, so the launcher's per-rank wrapper links it too.
//
//   HostLayout l = LayoutOf({"a", "b", "a", "b"});  // host_of {0, 1, 0, 1}, local_of {0, 0, 1, 1}
//   RankPlace p = l.PlaceOf(3);                     // local 1/2, cross 1/2
//   l.LocalMembers(2);                              // {0, 2}
//   l.CrossMembers(1);                              // {2, 3}
//
// Hosts are numbered by their lowest rank. A rank's local rank counts the ranks of its host before
// it; its cross group is the ranks with the same local rank, one per host that has one, and its
// cross rank its host's position among those hosts (Horovod's definitions).
#ifndef HVX_COMMON_LAYOUT_H_
#define HVX_COMMON_LAYOUT_H_

#include <string>
#include <vector>

namespace hvx {

// One rank's coordinates in a layout.
struct RankPlace {
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

struct HostLayout {
  std::vector<int> host_of;   // by rank
  std::vector<int> local_of;  // by rank: position among its host's ranks
  std::vector<int> per_host;  // ranks on each host

  int size() const { return static_cast<int>(host_of.size()); }
  int hosts() const { return static_cast<int>(per_host.size()); }
  bool Homogeneous() const;  // every host has as many ranks
  int MaxPerHost() const;
  std::vector<RankPlace> PlaceAll() const;  // every rank's, in one pass
  RankPlace PlaceOf(int rank) const;        // PlaceAll()[rank]
  // The ranks on `rank`'s host, ascending.
  std::vector<int> LocalMembers(int rank) const;
  // The ranks whose local rank is `local_rank`, one per host that has one, in ascending rank order
  // (which is host order where each host's ranks are contiguous, as hvxrun places them).
  std::vector<int> CrossMembers(int local_rank) const;
};

// hosts[r] is rank r's host name.
HostLayout LayoutOf(const std::vector<std::string>& hosts);

}  // namespace hvx

#endif  // HVX_COMMON_LAYOUT_H_
