#include "hvx/launch/cpu_binding.h"

#include <sched.h>

namespace hvx {
namespace launch {

std::vector<int> CpuBlock(const std::vector<int>& allowed, int local_rank, int local_size) {
  const int n = static_cast<int>(allowed.size());
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size || local_size > n) return {};
  const int base = n / local_size, extra = n % local_size;
  const int first = local_rank * base + (local_rank < extra ? local_rank : extra);
  const int count = base + (local_rank < extra ? 1 : 0);
  return std::vector<int>(allowed.begin() + first, allowed.begin() + first + count);
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

bool BindToCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace launch
}  // namespace hvx
