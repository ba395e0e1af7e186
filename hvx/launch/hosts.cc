#include "hvx/launch/hosts.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/cluster.h"
#include "hvx/common/status.h"

namespace hvx {
namespace launch {
namespace {

// A slot count as written after ':' or 'slots='. Zero is its own error: a host with no slots is
// almost always a typo, and silently dropping it would change the plan.
absl::StatusOr<int> ParseSlots(absl::string_view text, absl::string_view entry,
                               absl::string_view where) {
  int64_t slots = 0;
  if (!absl::SimpleAtoi(text, &slots) || slots < 0 || text.empty() ||
      !absl::ascii_isdigit(text[0])) {
    return absl::InvalidArgumentError(absl::StrCat("malformed host entry '", entry, "' in ", where,
                                                   ": slots must be a positive integer"));
  }
  if (slots == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host entry '", entry, "' in ", where, " has zero slots"));
  }
  if (slots > kMaxSlotsPerHost) {
    return absl::InvalidArgumentError(absl::StrCat("host entry '", entry, "' in ", where, " has ",
                                                   slots, " slots; a host has at most ",
                                                   kMaxSlotsPerHost));
  }
  return static_cast<int>(slots);
}

absl::StatusOr<HostSpec> ParseEntry(absl::string_view entry, absl::string_view where) {
  std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
  if (parts.size() > 2 || !IsValidHostName(parts[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed host entry '", entry, "' in ", where, ": expected host[:slots]"));
  }
  HostSpec spec{std::string(parts[0]), std::nullopt};
  if (parts.size() == 2) {
    HVX_ASSIGN_OR_RETURN(int slots, ParseSlots(parts[1], entry, where));
    spec.slots = slots;
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::vector<HostSpec>> ParseHostList(absl::string_view text,
                                                    absl::string_view source) {
  std::vector<HostSpec> hosts;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty host list in ", source));
  }
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    HVX_ASSIGN_OR_RETURN(HostSpec spec, ParseEntry(absl::StripAsciiWhitespace(entry), source));
    hosts.push_back(std::move(spec));
  }
  return hosts;
}

absl::StatusOr<std::vector<HostSpec>> ParseHostfile(absl::string_view contents,
                                                    absl::string_view path) {
  std::vector<HostSpec> hosts;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_no;
    size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::string where = absl::StrCat(path, ":", line_no);
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    HVX_ASSIGN_OR_RETURN(HostSpec spec, ParseEntry(fields[0], where));
    for (size_t i = 1; i < fields.size(); ++i) {
      absl::string_view f = absl::StripAsciiWhitespace(fields[i]);
      if (absl::ConsumePrefix(&f, "slots=")) {
        if (spec.slots.has_value()) {
          return absl::InvalidArgumentError(
              absl::StrCat("malformed host entry '", line, "' in ", where, ": slots given twice"));
        }
        HVX_ASSIGN_OR_RETURN(int slots, ParseSlots(f, line, where));
        spec.slots = slots;
      } else if (absl::StartsWith(f, "max_slots=")) {
        // Open MPI's oversubscription cap; hvx never places more ranks than slots anyway.
      } else {
        return absl::InvalidArgumentError(absl::StrCat("malformed host entry '", line, "' in ",
                                                       where, ": unknown field '", f, "'"));
      }
    }
    hosts.push_back(std::move(spec));
  }
  if (hosts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("hostfile ", path, " lists no hosts"));
  }
  return hosts;
}

absl::StatusOr<std::vector<HostSpec>> ReadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(errno, absl::StrCat("cannot read hostfile ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseHostfile(buffer.str(), path);
}

absl::Status ValidateHosts(const std::vector<HostSpec>& hosts, absl::string_view source) {
  std::map<std::string, size_t> first;
  int64_t total = 0;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const HostSpec& h = hosts[i];
    if (!IsValidHostName(h.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad host name '", h.name, "' (entry ", i + 1, ") in ", source,
          ": a host name is letters, digits, '.', '-' and '_', not starting with '-' or '.'"));
    }
    if (h.slots && (*h.slots < 1 || *h.slots > kMaxSlotsPerHost)) {
      return absl::InvalidArgumentError(absl::StrCat("host '", h.name, "' in ", source, " has ",
                                                     *h.slots, " slots; give 1 to ",
                                                     kMaxSlotsPerHost));
    }
    total += h.slots.value_or(1);
    auto [it, inserted] = first.emplace(h.name, i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate host '", h.name, "' (entries ", it->second + 1, " and ", i + 1,
                       ") in ", source, "; give it once with its total slots"));
    }
  }
  if (total > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat(source, " lists ", total, " slots on ",
                                                   hosts.size(), " hosts; a job has at most ",
                                                   kMaxRanks));
  }
  return absl::OkStatus();
}

std::string FormatHostList(const std::vector<Host>& hosts) {
  return absl::StrJoin(hosts, ",", [](std::string* out, const Host& h) {
    absl::StrAppend(out, h.name, ":", h.slots);
  });
}

}  // namespace launch
}  // namespace hvx
