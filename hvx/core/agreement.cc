#include "hvx/core/agreement.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/status.h"

namespace hvx {
namespace {

void PutString(std::string* out, absl::string_view s) { absl::StrAppend(out, s.size(), ":", s); }

bool GetString(absl::string_view* in, std::string* s) {
  const size_t colon = in->find(':');
  size_t n = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(in->substr(0, colon), &n) ||
      n > in->size() - colon - 1) {
    return false;
  }
  *s = std::string(in->substr(colon + 1, n));
  in->remove_prefix(colon + 1 + n);
  return true;
}

}  // namespace

std::string EncodeSettings(const Settings& settings) {
  std::string out;
  for (const auto& [name, value] : settings) {
    PutString(&out, name);
    PutString(&out, value);
  }
  return out;
}

absl::StatusOr<Settings> DecodeSettings(absl::string_view bytes) {
  Settings out;
  while (!bytes.empty()) {
    std::string name, value;
    if (!GetString(&bytes, &name) || !GetString(&bytes, &value)) {
      return absl::InternalError("settings message is corrupt");
    }
    out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

absl::Status AgreeOnEveryRank(
    Communicator& comm, const absl::Status& local,
    absl::FunctionRef<std::string(int rank, absl::string_view why)> describe) {
  // "!" marks a failure, so that one without a message is not taken for success.
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(
      comm.Allgather(local.ok() ? std::string() : absl::StrCat("!", local.message()), &all));
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r].empty()) continue;
    if (!local.ok()) return local;
    return absl::FailedPreconditionError(describe(r, absl::string_view(all[r]).substr(1)));
  }
  return absl::OkStatus();
}

std::string RankRanges(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(ranks[i]) : absl::StrCat(ranks[i], "-", ranks[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

std::string FormatBytes(int64_t bytes) {
  if (bytes > 0 && bytes % (int64_t{1} << 30) == 0) return absl::StrCat(bytes >> 30, "GiB");
  if (bytes > 0 && bytes % (int64_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, "MiB");
  if (bytes > 0 && bytes % (int64_t{1} << 10) == 0) return absl::StrCat(bytes >> 10, "KiB");
  return absl::StrCat(bytes);
}

absl::Status CompareSettings(const std::vector<std::string>& encoded_by_rank) {
  std::vector<Settings> all;
  for (const std::string& e : encoded_by_rank) {
    absl::StatusOr<Settings> s = DecodeSettings(e);
    if (!s.ok()) return s.status();
    all.push_back(std::move(*s));
  }
  if (all.empty()) return absl::OkStatus();
  // Values by name, each with its ranks in order of first appearance.
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::pair<std::string, std::vector<int>>>> values;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    for (const auto& setting : all[r]) {
      const std::string& name = setting.first;
      const std::string& value = setting.second;  // a lambda cannot capture a binding in C++17
      auto& list = values[name];
      if (list.empty()) names.push_back(name);
      auto it =
          std::find_if(list.begin(), list.end(), [&](const auto& v) { return v.first == value; });
      if (it == list.end()) {
        list.push_back({value, {r}});
      } else {
        it->second.push_back(r);
      }
    }
  }
  std::vector<std::string> lines;
  for (const std::string& name : names) {
    const auto& list = values[name];
    int holders = 0;
    for (const auto& v : list) holders += static_cast<int>(v.second.size());
    if (list.size() == 1 && holders == static_cast<int>(all.size())) continue;
    std::vector<std::string> parts;
    for (const auto& [value, ranks] : list) {
      parts.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", RankRanges(ranks),
                                   ranks.size() == 1 ? " has " : " have ",
                                   value.empty() ? "(unset)" : value));
    }
    if (holders < static_cast<int>(all.size())) parts.push_back("the other ranks do not set it");
    lines.push_back(absl::StrCat(name, ": ", absl::StrJoin(parts, ", ")));
  }
  if (lines.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "settings that must be the same on every rank differ: ", absl::StrJoin(lines, "; ")));
}

}  // namespace hvx
