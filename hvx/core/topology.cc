#include "hvx/core/topology.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace hvx {
namespace {

int IntOr(const Environment& env, absl::string_view name, int fallback) {
  auto v = env.GetNonEmpty(name);
  int n;
  if (v.has_value() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*v), &n)) return n;
  return fallback;
}

std::string Quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                            "_-+=/.,:@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// SM_HOSTS is a JSON list of strings: ["algo-1","algo-2"].
std::vector<std::string> ParseHostList(const std::string& json) {
  std::vector<std::string> hosts;
  for (absl::string_view part : absl::StrSplit(json, ',')) {
    std::string h(absl::StripAsciiWhitespace(part));
    h.erase(std::remove_if(h.begin(), h.end(), [](char c) { return c == '[' || c == ']' || c == '"' || c == ' '; }),
            h.end());
    if (!h.empty()) hosts.push_back(h);
  }
  return hosts;
}

}  // namespace

Topology ComputeTopology(int rank, const std::vector<std::string>& hosts) {
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(hosts.size());
  t.host = hosts[rank];
  std::vector<std::string> host_order;
  std::map<std::string, int> local_size;
  std::vector<int> local_rank(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (local_size.count(hosts[r]) == 0) host_order.push_back(hosts[r]);
    local_rank[r] = local_size[hosts[r]]++;
  }
  t.local_rank = local_rank[rank];
  t.local_size = local_size[t.host];
  t.cross_rank = 0;
  t.cross_size = 0;
  for (const std::string& h : host_order) {
    if (local_size[h] > t.local_rank) {
      if (h == t.host) t.cross_rank = t.cross_size;
      ++t.cross_size;
    }
  }
  t.homogeneous = true;
  for (const auto& [h, n] : local_size) t.homogeneous = t.homogeneous && n == t.local_size;
  return t;
}

absl::Status CheckLauncherEnvironment(const Topology& t, const Environment& env) {
  const std::pair<const char*, int> checks[] = {
      {"HVX_RANK", t.rank},
      {"HVX_SIZE", t.size},
      {"HVX_LOCAL_RANK", t.local_rank},
      {"HVX_LOCAL_SIZE", t.local_size},
      {"HVX_CROSS_RANK", t.cross_rank},
      {"HVX_CROSS_SIZE", t.cross_size},
  };
  for (const auto& [name, actual] : checks) {
    auto v = env.GetNonEmpty(name);
    if (!v.has_value()) continue;
    int expected;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*v), &expected) || expected != actual) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the launcher set ", name, "=", *v, " but the transport reports ", actual, " (rank ", t.rank, " of ",
          t.size, " on host ", t.host,
          "). The program was probably started by a launcher of a different MPI than the one hvx links, "
          "or the host list does not match the real hosts; start it with hvxrun."));
    }
  }
  return absl::OkStatus();
}

int CountVisibleGpus(const Environment& env, const std::string& nvidia_gpus_dir) {
  auto cvd = env.Get("CUDA_VISIBLE_DEVICES");
  if (cvd.has_value()) {
    std::string v(absl::StripAsciiWhitespace(*cvd));
    if (v.empty() || v == "-1" || v == "NoDevFiles") return 0;
    return static_cast<int>(std::vector<std::string>(absl::StrSplit(v, ',', absl::SkipEmpty())).size());
  }
  DIR* dir = opendir(nvidia_gpus_dir.c_str());
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

std::vector<std::string> ExpandSlurmNodeList(const std::string& list) {
  std::vector<std::string> out;
  // Split on commas outside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) items.push_back(cur);
  for (const std::string& item : items) {
    const size_t open = item.find('[');
    const size_t close = item.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) {
      out.push_back(item);
      continue;
    }
    const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
    for (absl::string_view range : absl::StrSplit(item.substr(open + 1, close - open - 1), ',')) {
      std::vector<std::string> ends = absl::StrSplit(range, '-');
      int lo, hi;
      if (!absl::SimpleAtoi(ends[0], &lo) || !absl::SimpleAtoi(ends.back(), &hi)) {
        out.push_back(absl::StrCat(prefix, range, suffix));
        continue;
      }
      const size_t width = ends[0].size();
      for (int i = lo; i <= hi; ++i) {
        std::string num = absl::StrCat(i);
        if (num.size() < width) num.insert(0, width - num.size(), '0');
        out.push_back(absl::StrCat(prefix, num, suffix));
      }
    }
  }
  return out;
}

std::string CurrentCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> args;
  for (absl::string_view a : absl::StrSplit(ss.str(), '\0', absl::SkipEmpty())) args.push_back(Quote(std::string(a)));
  return absl::StrJoin(args, " ");
}

absl::Status CheckSingleton(const Environment& env, int visible_gpus, const std::string& command_line) {
  std::vector<std::string> seen;
  std::vector<std::string> hosts;
  int slots = 0;
  int np = 0;
  for (const char* var : {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}) {
    const int n = IntOr(env, var, 0);
    if (n > 1) {
      seen.push_back(absl::StrCat(var, "=", n, " (a launcher of a different MPI than the one hvx links started ", n,
                                  " processes, and each of them became its own job of size 1)"));
      np = std::max(np, n);
    }
  }
  const int slurm_tasks = IntOr(env, "SLURM_NTASKS", IntOr(env, "SLURM_NPROCS", 0));
  if (slurm_tasks > 1) {
    seen.push_back(absl::StrCat("SLURM_NTASKS=", slurm_tasks));
    np = slurm_tasks;
    auto nodes = env.GetNonEmpty("SLURM_JOB_NODELIST");
    if (!nodes.has_value()) nodes = env.GetNonEmpty("SLURM_NODELIST");
    if (nodes.has_value()) {
      hosts = ExpandSlurmNodeList(*nodes);
      seen.push_back(absl::StrCat("SLURM_JOB_NODELIST=", *nodes));
    }
  }
  auto sm_hosts = env.GetNonEmpty("SM_HOSTS");
  const int sm_gpus = IntOr(env, "SM_NUM_GPUS", 0);
  if (sm_hosts.has_value()) {
    std::vector<std::string> h = ParseHostList(*sm_hosts);
    if (h.size() > 1 || sm_gpus > 1) {
      seen.push_back(absl::StrCat("SM_HOSTS=", *sm_hosts));
      if (sm_gpus > 0) seen.push_back(absl::StrCat("SM_NUM_GPUS=", sm_gpus));
      hosts = h;
      slots = std::max(1, sm_gpus);
      np = static_cast<int>(hosts.size()) * slots;
    }
  } else if (sm_gpus > 1) {
    seen.push_back(absl::StrCat("SM_NUM_GPUS=", sm_gpus));
    np = std::max(np, sm_gpus);
  }
  if (visible_gpus > 1) {
    seen.push_back(absl::StrCat(visible_gpus, " visible GPUs"));
    if (np == 0) np = visible_gpus;
  }
  if (seen.empty()) return absl::OkStatus();

  if (hosts.empty()) hosts = {"localhost"};
  if (slots == 0) slots = std::max(1, (np + static_cast<int>(hosts.size()) - 1) / static_cast<int>(hosts.size()));
  np = std::max(np, 1);
  std::vector<std::string> spec;
  for (const std::string& h : hosts) spec.push_back(absl::StrCat(h, ":", slots));
  const std::string command = absl::StrCat("hvxrun -np ", np, " -H ", absl::StrJoin(spec, ","), " -- ",
                                           command_line.empty() ? "PROGRAM ARGS" : command_line);
  return absl::FailedPreconditionError(absl::StrCat(
      "hvx started as a single process (size 1), but the environment shows a job of ", np,
      " processes was intended: ", absl::StrJoin(seen, "; "), ". Start it with:\n  ", command,
      "\nor set HVX_ALLOW_SINGLETON=1 (InitOptions::allow_singleton) to run alone on purpose."));
}

}  // namespace hvx
