#include "hvx/common/cluster.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/files.h"
#include "hvx/common/json.h"
#include "hvx/common/status.h"

namespace hvx {

std::string HostName(absl::string_view fallback) {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return std::string(fallback);
  return name;
}

std::string HostIdentity(absl::string_view name, const std::string& root) {
  std::string boot_id;
  if (FILE* f = fopen((root + "/proc/sys/kernel/random/boot_id").c_str(), "r")) {
    char buf[64] = {};
    if (fgets(buf, sizeof(buf), f) != nullptr) boot_id = buf;
    fclose(f);
  }
  struct stat st;
  const std::string shm_device =
      stat((root + "/dev/shm").c_str(), &st) == 0 ? absl::StrCat(st.st_dev) : std::string();
  return absl::StrCat(name, "\n", absl::StripAsciiWhitespace(boot_id), "\n", shm_device);
}

std::vector<std::string> HostNamesOf(const std::vector<std::string>& identities) {
  std::map<std::string, std::string> named;       // identity -> its name
  std::map<std::string, int> identities_of_name;  // name -> identities seen with it
  std::vector<std::string> names;
  for (const std::string& identity : identities) {
    auto it = named.find(identity);
    if (it == named.end()) {
      const std::string name = identity.substr(0, identity.find('\n'));
      const int n = ++identities_of_name[name];
      it = named.emplace(identity, n == 1 ? name : absl::StrCat(name, "#", n)).first;
    }
    names.push_back(it->second);
  }
  return names;
}

namespace {

// The entries of the driver's GPU directory `gpu_dir`, one per device (0 when it does not exist).
int CountDriverGpus(const std::string& gpu_dir) {
  DIR* dir = opendir(gpu_dir.c_str());
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace

int CountVisibleGpus(const Environment& env, const std::string& gpu_dir) {
  if (std::optional<std::string> cvd = env.Get("CUDA_VISIBLE_DEVICES")) {
    absl::string_view v = absl::StripAsciiWhitespace(*cvd);
    if (v.empty() || v == "NoDevFiles") return 0;
    int n = 0;
    for (absl::string_view d : absl::StrSplit(v, ',')) {
      d = absl::StripAsciiWhitespace(d);
      // CUDA stops enumerating at the first invalid entry, e.g. "-1" (the usual "no GPU" value).
      if (d.empty() || absl::StartsWith(d, "-")) break;
      ++n;
    }
    return n;
  }
  return CountDriverGpus(gpu_dir);
}

std::string GpuEvidence(const Environment& env, const std::string& root) {
  // Hidden on purpose: CUDA_VISIBLE_DEVICES set, and by CUDA's rules (CountVisibleGpus) naming
  // none.
  if (env.Get("CUDA_VISIBLE_DEVICES") && CountVisibleGpus(env) == 0) return "";
  std::vector<std::string> signs;
  if (const int n = CountDriverGpus(root + kNvidiaGpusDir); n > 0) {
    signs.push_back(absl::StrCat(kNvidiaGpusDir, " lists ", n, n == 1 ? " GPU" : " GPUs"));
  }
  int devices = 0;
  if (DIR* dir = opendir((root + "/dev").c_str())) {
    while (dirent* e = readdir(dir)) {
      absl::string_view name = e->d_name;
      int index;
      if (absl::ConsumePrefix(&name, "nvidia") && absl::SimpleAtoi(name, &index)) ++devices;
    }
    closedir(dir);
  }
  if (devices > 0) {
    signs.push_back(devices == 1 ? "/dev/nvidia0 exists"
                                 : absl::StrCat(devices, " /dev/nvidia<N> devices exist"));
  }
  int sm_gpus = 0;
  if (std::optional<std::string> n = env.Get("SM_NUM_GPUS");
      n && absl::SimpleAtoi(*n, &sm_gpus) && sm_gpus > 0) {
    signs.push_back(absl::StrCat("SM_NUM_GPUS=", sm_gpus));
  }
  // SageMaker's instance type: the toolkit's variable, else the resource config every container
  // of a job has. The families with NVIDIA GPUs are ml.p<N> and ml.g<N> (p3, p4d, p5, g4dn, g5...).
  std::string type = env.Get("SM_CURRENT_INSTANCE_TYPE").value_or("");
  if (type.empty()) {
    const std::string path = root + kSageMakerResourceConfig;
    if (absl::StatusOr<std::string> text = ReadFileFromDisk(path); text.ok()) {
      if (auto config = ParseSageMakerResourceConfig(*text, path); config.ok()) {
        type = config->current_instance_type;
      }
    }
  }
  if ((absl::StartsWith(type, "ml.p") || absl::StartsWith(type, "ml.g")) && type.size() > 4 &&
      absl::ascii_isdigit(type[4])) {
    signs.push_back(absl::StrCat("the SageMaker instance type ", type, " has GPUs"));
  }
  return absl::StrJoin(signs, ", ");
}

bool IsValidInterfaceName(absl::string_view name) {
  if (name.empty() || name.size() > 15) return false;  // IFNAMSIZ - 1
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_') return false;
  }
  return true;
}

bool IsValidHostName(absl::string_view name) {
  if (name.empty() || name.size() > 253 || name[0] == '-' || name[0] == '.') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_') return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(absl::string_view text) {
  std::vector<std::string> out;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed SLURM node list '", text, "': ", why));
  };
  size_t i = 0;
  while (i < text.size()) {
    // One item: a prefix, optionally [ranges] and a suffix; items split on top-level ','.
    size_t end = i;
    int depth = 0;
    while (end < text.size() && (depth > 0 || text[end] != ',')) {
      if (text[end] == '[') ++depth;
      if (text[end] == ']') --depth;
      ++end;
    }
    absl::string_view item = text.substr(i, end - i);
    i = end + 1;
    if (item.empty()) continue;
    size_t open = item.find('[');
    if (open == absl::string_view::npos) {
      if (!IsValidHostName(item)) return bad(absl::StrCat("bad host '", item, "'"));
      out.emplace_back(item);
      continue;
    }
    size_t close = item.find(']', open);
    if (close == absl::string_view::npos) return bad("unbalanced '['");
    absl::string_view prefix = item.substr(0, open);
    absl::string_view suffix = item.substr(close + 1);
    for (absl::string_view range : absl::StrSplit(item.substr(open + 1, close - open - 1), ',')) {
      std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
      int lo = 0, hi = 0;
      if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &lo) ||
          !absl::SimpleAtoi(ends.back(), &hi) || hi < lo || lo < 0) {
        return bad(absl::StrCat("bad range '", range, "'"));
      }
      if (static_cast<int64_t>(hi) - lo >= kMaxRanks - static_cast<int64_t>(out.size())) {
        return bad(absl::StrCat("range '", range, "' makes more than ", kMaxRanks, " hosts"));
      }
      const size_t width = ends[0].size();  // zero padding: gn[01-10]
      for (int n = lo; n <= hi; ++n) {
        std::string num = absl::StrCat(n);
        if (num.size() < width) num.insert(0, width - num.size(), '0');
        std::string host = absl::StrCat(prefix, num, suffix);
        if (!IsValidHostName(host)) return bad(absl::StrCat("bad host '", host, "'"));
        out.push_back(std::move(host));
      }
    }
  }
  if (out.empty()) return bad("no hosts");
  return out;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view text) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int count = 0, repeat = 1;
    size_t paren = item.find("(x");
    absl::string_view num = item.substr(0, paren);
    bool ok = absl::SimpleAtoi(num, &count) && count > 0 && count <= kMaxSlotsPerHost;
    if (ok && paren != absl::string_view::npos) {
      absl::string_view rep = item.substr(paren + 2);
      ok = absl::ConsumeSuffix(&rep, ")") && absl::SimpleAtoi(rep, &repeat) && repeat > 0 &&
           repeat <= kMaxRanks - static_cast<int>(out.size());
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed SLURM_TASKS_PER_NODE '", text, "' at '", item, "'"));
    }
    out.insert(out.end(), repeat, count);
  }
  return out;
}

namespace {

// A JSON list of valid host names; `what` names the source in errors.
absl::StatusOr<std::vector<std::string>> HostNamesIn(const Json& list, absl::string_view what) {
  HVX_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                       JsonStrings(list, absl::StrCat(what, ": a list of host names")));
  for (const std::string& h : hosts) {
    if (!IsValidHostName(h)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": malformed host name '", h, "'"));
    }
  }
  return hosts;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseSageMakerHosts(absl::string_view text,
                                                             absl::string_view what) {
  absl::StatusOr<Json> list = ParseJson(text, what);
  if (!list.ok() || !list->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "='", absl::StripAsciiWhitespace(text), "': expected a JSON list of host names",
        list.ok() ? "" : absl::StrCat(" (", list.status().message(), ")")));
  }
  return HostNamesIn(*list, what);
}

absl::StatusOr<SageMakerResourceConfig> ParseSageMakerResourceConfig(absl::string_view text,
                                                                     absl::string_view what) {
  HVX_ASSIGN_OR_RETURN(Json config, ParseJson(text, what));
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a JSON object"));
  }
  SageMakerResourceConfig c;
  const Json* hosts = JsonMember(config, "hosts");
  if (hosts == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no \"hosts\" list"));
  }
  HVX_ASSIGN_OR_RETURN(c.hosts, HostNamesIn(*hosts, what));
  if (const Json* current = JsonMember(config, "current_host"); current != nullptr) {
    if (!current->is_string() || !IsValidHostName(current->get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": \"current_host\" is not a host name: ", current->dump()));
    }
    c.current_host = current->get<std::string>();
  }
  if (const Json* iface = JsonMember(config, "network_interface_name"); iface != nullptr) {
    if (!iface->is_string() || !IsValidInterfaceName(iface->get<std::string>())) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": \"network_interface_name\" is not an interface name: ", iface->dump()));
    }
    c.network_interface_name = iface->get<std::string>();
  }
  if (const Json* type = JsonMember(config, "current_instance_type"); type && type->is_string()) {
    c.current_instance_type = type->get<std::string>();
  }
  return c;
}

}  // namespace hvx
