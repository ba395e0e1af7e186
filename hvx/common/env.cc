#include "hvx/common/env.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace hvx {
namespace {

class ProcessEnvironment : public Environment {
 public:
  std::optional<std::string> Get(absl::string_view name) const override {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }
};

absl::Status BadValue(absl::string_view name, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(name, "='", value, "': expected ", expected));
}

}  // namespace

std::optional<std::string> Environment::GetNonEmpty(absl::string_view name) const {
  std::optional<std::string> v = Get(name);
  if (v.has_value() && v->empty()) return std::nullopt;
  return v;
}

const Environment& Environment::Process() {
  static const ProcessEnvironment* env = new ProcessEnvironment();
  return *env;
}

std::optional<std::string> MapEnvironment::Get(absl::string_view name) const {
  auto it = vars_.find(std::string(name));
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<int64_t> ParseIntKnob(absl::string_view name, absl::string_view value) {
  int64_t v;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &v)) {
    return BadValue(name, value, "an integer");
  }
  return v;
}

absl::StatusOr<double> ParseDoubleKnob(absl::string_view name, absl::string_view value) {
  double v;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(value), &v) || !std::isfinite(v)) {
    return BadValue(name, value, "a finite number");
  }
  return v;
}

absl::StatusOr<bool> ParseBoolKnob(absl::string_view name, absl::string_view value) {
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return BadValue(name, value, "one of 1/0, true/false, yes/no, on/off");
}

absl::StatusOr<int64_t> ParseBytesKnob(absl::string_view name, absl::string_view value) {
  absl::string_view v = absl::StripAsciiWhitespace(value);
  int64_t scale = 1;
  struct Suffix {
    const char* text;
    int64_t scale;
  };
  static constexpr Suffix kSuffixes[] = {
      {"GiB", int64_t{1} << 30},
      {"MiB", int64_t{1} << 20},
      {"KiB", int64_t{1} << 10},
      {"G", int64_t{1} << 30},
      {"M", int64_t{1} << 20},
      {"K", int64_t{1} << 10},
      {"B", 1},
  };
  for (const Suffix& s : kSuffixes) {
    if (absl::ConsumeSuffix(&v, s.text)) {
      scale = s.scale;
      break;
    }
  }
  int64_t n;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &n) || n < 0 ||
      n > std::numeric_limits<int64_t>::max() / scale) {
    return BadValue(name, value, "a byte count such as 134217728, 128MiB or 1GiB");
  }
  return n * scale;
}

void KnobReader::AddError(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

void KnobReader::Read(absl::string_view name, int64_t* out, int64_t min, int64_t max) {
  std::optional<std::string> v = env_.GetNonEmpty(name);
  if (!v) return;
  absl::StatusOr<int64_t> parsed = ParseIntKnob(name, *v);
  if (!parsed.ok()) return AddError(parsed.status());
  if (*parsed < min || *parsed > max) {
    return AddError(BadValue(name, *v, absl::StrCat("an integer in [", min, ", ", max, "]")));
  }
  *out = *parsed;
}

void KnobReader::Read(absl::string_view name, int* out, int min, int max) {
  int64_t v = *out;
  Read(name, &v, min, max);
  *out = static_cast<int>(v);
}

void KnobReader::Read(absl::string_view name, double* out, double min, double max) {
  std::optional<std::string> v = env_.GetNonEmpty(name);
  if (!v) return;
  absl::StatusOr<double> parsed = ParseDoubleKnob(name, *v);
  if (!parsed.ok()) return AddError(parsed.status());
  if (*parsed < min || *parsed > max) {
    return AddError(BadValue(name, *v, absl::StrCat("a number in [", min, ", ", max, "]")));
  }
  *out = *parsed;
}

void KnobReader::Read(absl::string_view name, bool* out) {
  std::optional<std::string> v = env_.GetNonEmpty(name);
  if (!v) return;
  absl::StatusOr<bool> parsed = ParseBoolKnob(name, *v);
  if (!parsed.ok()) return AddError(parsed.status());
  *out = *parsed;
}

void KnobReader::Read(absl::string_view name, std::string* out) {
  std::optional<std::string> v = env_.GetNonEmpty(name);
  if (v) *out = *v;
}

void KnobReader::ReadBytes(absl::string_view name, int64_t* out) {
  std::optional<std::string> v = env_.GetNonEmpty(name);
  if (!v) return;
  absl::StatusOr<int64_t> parsed = ParseBytesKnob(name, *v);
  if (!parsed.ok()) return AddError(parsed.status());
  *out = *parsed;
}

}  // namespace hvx
