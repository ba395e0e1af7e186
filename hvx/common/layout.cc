#include "hvx/common/layout.h"

#include <algorithm>
#include <functional>
#include <map>

namespace hvx {

bool HostLayout::Homogeneous() const {
  return std::adjacent_find(per_host.begin(), per_host.end(), std::not_equal_to<int>()) ==
         per_host.end();
}

int HostLayout::MaxPerHost() const {
  return per_host.empty() ? 0 : *std::max_element(per_host.begin(), per_host.end());
}

RankPlace HostLayout::PlaceOf(int rank) const { return PlaceAll()[rank]; }

std::vector<RankPlace> HostLayout::PlaceAll() const {
  // Host by host in order, the hosts seen so far with each local rank: a rank's cross rank.
  std::vector<int> seen(MaxPerHost(), 0);
  std::vector<std::vector<int>> cross_rank_of(hosts());  // by host, by local rank
  for (int h = 0; h < hosts(); ++h) {
    for (int l = 0; l < per_host[h]; ++l) cross_rank_of[h].push_back(seen[l]++);
  }
  std::vector<RankPlace> places(size());
  for (int r = 0; r < size(); ++r) {
    RankPlace& p = places[r];
    p.local_rank = local_of[r];
    p.local_size = per_host[host_of[r]];
    p.cross_rank = cross_rank_of[host_of[r]][p.local_rank];
    p.cross_size = seen[p.local_rank];
  }
  return places;
}

std::vector<int> HostLayout::LocalMembers(int rank) const {
  std::vector<int> out;
  for (int r = 0; r < size(); ++r) {
    if (host_of[r] == host_of[rank]) out.push_back(r);
  }
  return out;
}

std::vector<int> HostLayout::CrossMembers(int local_rank) const {
  std::vector<int> out;
  for (int r = 0; r < size(); ++r) {
    if (local_of[r] == local_rank) out.push_back(r);
  }
  return out;
}

HostLayout LayoutOf(const std::vector<std::string>& hosts) {
  HostLayout layout;
  std::map<std::string, int> index;
  for (const std::string& h : hosts) {
    const auto [it, added] = index.try_emplace(h, layout.hosts());
    if (added) layout.per_host.push_back(0);
    layout.host_of.push_back(it->second);
    layout.local_of.push_back(layout.per_host[it->second]++);
  }
  return layout;
}

}  // namespace hvx
