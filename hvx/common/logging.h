// Rank-tagged logging.
//
//   HVX_LOG(INFO) << "fusion buffer " << bytes << " bytes";
//   HVX_LOG_RANK0(INFO) << "epoch " << epoch << " done";   // one line per job, not one per rank
//   HVX_CHECK(ptr != nullptr) << "no engine";               // logs FATAL and aborts when false
//
// Each message is one line on stderr, written with a single write(2) so lines from threads and
// ranks never interleave mid-line:
//
//   [3] W1130 04:31:22.123456 engine.cc:42] message
//
// "[3]" is the global rank, present once SetLogRank() has been called (hvx::Init does). When the
// process runs under hvxrun, which already prefixes every output line with "[R]", the logger leaves
// its own prefix out (LogOptions::rank_prefix), so there is one prefix whatever the transport.
// Severity threshold: HVX_LOG_LEVEL=trace|debug|info|warning|error|fatal (default info).
#ifndef HVX_COMMON_LOGGING_H_
#define HVX_COMMON_LOGGING_H_

#include <functional>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/env.h"

namespace hvx {

enum class LogSeverity : int { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

// "trace", "debug", "info", "warning" (or "warn"), "error", "fatal", any case.
absl::StatusOr<LogSeverity> ParseLogSeverity(absl::string_view text);
// The one-letter tag used in log lines: T D I W E F.
char LogSeverityLetter(LogSeverity severity);

struct LogOptions {
  LogSeverity min_severity = LogSeverity::kInfo;
  // Whether lines carry "[rank] " once the rank is known. Off under hvxrun's own tagging.
  bool rank_prefix = true;
};

// HVX_LOG_LEVEL into min_severity; HVX_TAGGED_OUTPUT=1 (set by hvxrun) turns rank_prefix off.
absl::StatusOr<LogOptions> LogOptionsFromEnv(const Environment& env);

// Replaces the logging options. Without a call, options come from the process environment on
// first use (a bad HVX_LOG_LEVEL is then reported once and "info" used).
void ConfigureLogging(const LogOptions& options);
LogOptions CurrentLogOptions();

// The global rank shown in the prefix; -1 (the default) means unknown and shows no prefix.
void SetLogRank(int rank);
int LogRank();

bool LogEnabled(LogSeverity severity);

// Where finished lines go (each ends with '\n'). Default: one write(2) to stderr. For tests; pass
// nullptr to restore the default.
void SetLogSinkForTest(std::function<void(absl::string_view line)> sink);

// Formats one line; emits it from the destructor. Aborts after emitting when severity is kFatal.
class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  ~LogMessage();

  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  LogSeverity severity_;
  std::ostringstream stream_;
};

namespace log_internal {
constexpr LogSeverity TRACE = LogSeverity::kTrace;
constexpr LogSeverity DEBUG = LogSeverity::kDebug;
constexpr LogSeverity INFO = LogSeverity::kInfo;
constexpr LogSeverity WARNING = LogSeverity::kWarning;
constexpr LogSeverity ERROR = LogSeverity::kError;
constexpr LogSeverity FATAL = LogSeverity::kFatal;

// Lets the macros below swallow the stream expression in a conditional.
struct Voidify {
  void operator&(std::ostream&) {}
};
}  // namespace log_internal

}  // namespace hvx

#define HVX_LOG_IF_(severity, condition)        \
  !((condition) && ::hvx::LogEnabled(severity)) \
      ? (void)0                                 \
      : ::hvx::log_internal::Voidify() & ::hvx::LogMessage(__FILE__, __LINE__, severity).stream()

#define HVX_LOG(severity) HVX_LOG_IF_(::hvx::log_internal::severity, true)
// Logs only on rank 0, or when the rank is not known yet (a single process before Init).
#define HVX_LOG_RANK0(severity) HVX_LOG_IF_(::hvx::log_internal::severity, ::hvx::LogRank() <= 0)
#define HVX_CHECK(condition) \
  HVX_LOG_IF_(::hvx::LogSeverity::kFatal, !(condition)) << "Check failed: " #condition " "

#endif  // HVX_COMMON_LOGGING_H_
