// Environment knobs, read once into typed option structs.
//
//   struct CacheOptions { int64_t capacity = 1024; bool enabled = true; };
//   absl::StatusOr<CacheOptions> CacheOptionsFromEnv(const Environment& env) {
//     CacheOptions o;
//     KnobReader knobs(env);
//     knobs.Read("HVX_CACHE_CAPACITY", &o.capacity, /*min=*/0);
//     knobs.Read("HVX_CACHE_ENABLED", &o.enabled);
//     HVX_RETURN_IF_ERROR(knobs.status());
//     return o;
//   }
//
// Code reads variables through an `Environment`, never getenv() deep inside, so that tests can
// fabricate one (MapEnvironment) and every knob is parsed in one place with one error format:
// "HVX_CACHE_CAPACITY='ten': expected an integer".
#ifndef HVX_COMMON_ENV_H_
#define HVX_COMMON_ENV_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hvx {

// A read-only view of environment variables.
class Environment {
 public:
  virtual ~Environment() = default;
  // The value of `name`, or nullopt when unset. An empty value is returned as "".
  virtual std::optional<std::string> Get(absl::string_view name) const = 0;

  // The value of `name`, or nullopt when unset or empty.
  std::optional<std::string> GetNonEmpty(absl::string_view name) const;

  // The real process environment (getenv). Lives for the whole program.
  static const Environment& Process();
};

// An environment given as a map: for tests and for describing a child's environment.
class MapEnvironment : public Environment {
 public:
  MapEnvironment() = default;
  explicit MapEnvironment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}
  MapEnvironment(std::initializer_list<std::pair<const std::string, std::string>> vars)
      : vars_(vars) {}

  std::optional<std::string> Get(absl::string_view name) const override;
  void Set(const std::string& name, const std::string& value) { vars_[name] = value; }
  void Unset(const std::string& name) { vars_.erase(name); }
  const std::map<std::string, std::string>& vars() const { return vars_; }

 private:
  std::map<std::string, std::string> vars_;
};

// The longest duration any knob or flag may give, in seconds (about 3 years). Longer ones overflow
// the steady clock's signed nanoseconds (9.2e9 s) in std::chrono conversions: a timeout of 1e10 s
// fired at once.
inline constexpr double kMaxSeconds = 1e8;

// Parsers for one value. Each error names the variable and quotes the bad value.
absl::StatusOr<int64_t> ParseIntKnob(absl::string_view name, absl::string_view value);
absl::StatusOr<double> ParseDoubleKnob(absl::string_view name, absl::string_view value);
// Accepts 1/0, true/false, yes/no, on/off (any case).
absl::StatusOr<bool> ParseBoolKnob(absl::string_view name, absl::string_view value);
// A byte count: "134217728", "128MiB", "128M", "64KiB", "1GiB" (K/M/G are powers of 1024).
absl::StatusOr<int64_t> ParseBytesKnob(absl::string_view name, absl::string_view value);

// Reads several knobs into an options struct. Unset or empty variables leave the default in place.
// The first error is kept in status(); later reads still run so that all defaults stay sane.
class KnobReader {
 public:
  explicit KnobReader(const Environment& env) : env_(env) {}
  KnobReader(const KnobReader&) = delete;
  KnobReader& operator=(const KnobReader&) = delete;

  void Read(absl::string_view name, int64_t* out, int64_t min = std::numeric_limits<int64_t>::min(),
            int64_t max = std::numeric_limits<int64_t>::max());
  void Read(absl::string_view name, int* out, int min = std::numeric_limits<int>::min(),
            int max = std::numeric_limits<int>::max());
  void Read(absl::string_view name, double* out,
            double min = -std::numeric_limits<double>::infinity(),
            double max = std::numeric_limits<double>::infinity());
  void Read(absl::string_view name, bool* out);
  void Read(absl::string_view name, std::string* out);
  // A byte count with optional KiB/MiB/GiB suffix; must be >= 0.
  void ReadBytes(absl::string_view name, int64_t* out);

  // Records an error found by a caller-specific parser, keeping the first.
  void AddError(absl::Status status);

  const absl::Status& status() const { return status_; }

 private:
  const Environment& env_;
  absl::Status status_;
};

}  // namespace hvx

#endif  // HVX_COMMON_ENV_H_
