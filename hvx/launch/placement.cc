#include "hvx/launch/placement.h"

#include <cerrno>
#include <cstdlib>

namespace hvx {
namespace launch {

std::vector<RankPlacement> PlaceRanks(const std::vector<HostCount>& used_hosts) {
  std::vector<std::string> host_of_rank;
  for (const auto& [host, count] : used_hosts) host_of_rank.insert(host_of_rank.end(), count, host);
  const HostLayout layout = LayoutOf(host_of_rank);
  const std::vector<RankPlace> places = layout.PlaceAll();
  std::vector<RankPlacement> ranks(host_of_rank.size());
  for (int r = 0; r < layout.size(); ++r) {
    RankPlacement& p = ranks[r];
    static_cast<RankPlace&>(p) = places[r];
    p.rank = r;
    p.host = host_of_rank[r];
  }
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
