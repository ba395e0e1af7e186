#include "hvx/launch/placement.h"

#include <cerrno>
#include <cstdlib>
#include <map>

namespace hvx {
namespace launch {

std::vector<RankPlacement> PlaceRanks(const std::vector<HostCount>& used_hosts) {
  std::vector<RankPlacement> ranks;
  for (const auto& [host, count] : used_hosts) {
    for (int l = 0; l < count; ++l) {
      RankPlacement p;
      p.rank = static_cast<int>(ranks.size());
      p.local_rank = l;
      p.local_size = count;
      p.host = host;
      ranks.push_back(std::move(p));
    }
  }
  // Hosts are visited in order, so counting hosts per local rank as we go gives cross_rank.
  std::map<int, int> hosts_with_local_rank;
  for (RankPlacement& p : ranks) p.cross_rank = hosts_with_local_rank[p.local_rank]++;
  for (RankPlacement& p : ranks) p.cross_size = hosts_with_local_rank[p.local_rank];
  return ranks;
}

bool ParseUsedHosts(const std::string& text, std::vector<HostCount>* hosts, std::string* error) {
  hosts->clear();
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(begin, end - begin);
    const size_t colon = entry.rfind(':');
    const std::string count = colon == std::string::npos ? "" : entry.substr(colon + 1);
    char* stop = nullptr;
    errno = 0;
    const long n = count.empty() ? 0 : std::strtol(count.c_str(), &stop, 10);
    if (colon == 0 || count.empty() || *stop != '\0' || errno != 0 || n < 1 || n > 1 << 20) {
      *error = "malformed entry '" + entry + "' in the used-host list '" + text +
               "' (want name:count with count > 0)";
      return false;
    }
    hosts->emplace_back(entry.substr(0, colon), static_cast<int>(n));
    begin = end + 1;
  }
  return true;
}

}  // namespace launch
}  // namespace hvx
