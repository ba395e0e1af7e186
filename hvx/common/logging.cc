#include "hvx/common/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/files.h"

namespace hvx {
namespace {

struct LogState {
  std::mutex mu;
  bool configured = false;
  LogOptions options;
  std::function<void(absl::string_view)> sink;
};

LogState& State() {
  static LogState* state = new LogState();
  return *state;
}

std::atomic<int> g_rank{-1};
// Mirrors options.min_severity for the lock-free check in LogEnabled(); -1 until configured.
std::atomic<int> g_min_severity{-1};

// Requires State().mu held.
void EnsureConfiguredLocked(LogState& s) {
  if (s.configured) return;
  s.configured = true;
  absl::StatusOr<LogOptions> opts = LogOptionsFromEnv(Environment::Process());
  if (opts.ok()) {
    s.options = *opts;
  } else {
    WriteFully(2, absl::StrCat("hvx: ", opts.status().message(), "; using info\n"));
  }
  g_min_severity.store(static_cast<int>(s.options.min_severity));
}

}  // namespace

absl::StatusOr<LogSeverity> ParseLogSeverity(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "trace") return LogSeverity::kTrace;
  if (t == "debug") return LogSeverity::kDebug;
  if (t == "info") return LogSeverity::kInfo;
  if (t == "warning" || t == "warn") return LogSeverity::kWarning;
  if (t == "error") return LogSeverity::kError;
  if (t == "fatal") return LogSeverity::kFatal;
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "': expected one of trace, debug, info, warning, error, fatal"));
}

char LogSeverityLetter(LogSeverity severity) {
  static constexpr char kLetters[] = {'T', 'D', 'I', 'W', 'E', 'F'};
  return kLetters[static_cast<int>(severity)];
}

absl::StatusOr<LogOptions> LogOptionsFromEnv(const Environment& env) {
  LogOptions options;
  KnobReader knobs(env);
  if (std::optional<std::string> level = env.GetNonEmpty("HVX_LOG_LEVEL")) {
    absl::StatusOr<LogSeverity> s = ParseLogSeverity(*level);
    if (s.ok()) {
      options.min_severity = *s;
    } else {
      knobs.AddError(
          absl::InvalidArgumentError(absl::StrCat("HVX_LOG_LEVEL=", s.status().message())));
    }
  }
  bool tagged = false;
  knobs.Read("HVX_TAGGED_OUTPUT", &tagged);
  options.rank_prefix = !tagged;
  if (!knobs.status().ok()) return knobs.status();
  return options;
}

void ConfigureLogging(const LogOptions& options) {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.configured = true;
  s.options = options;
  g_min_severity.store(static_cast<int>(options.min_severity));
}

LogOptions CurrentLogOptions() {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  EnsureConfiguredLocked(s);
  return s.options;
}

void SetLogRank(int rank) { g_rank.store(rank); }
int LogRank() { return g_rank.load(); }

bool LogEnabled(LogSeverity severity) {
  int min = g_min_severity.load(std::memory_order_relaxed);
  if (min < 0) min = static_cast<int>(CurrentLogOptions().min_severity);
  return static_cast<int>(severity) >= min;
}

void SetLogSinkForTest(std::function<void(absl::string_view line)> sink) {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = std::move(sink);
}

LogMessage::LogMessage(const char* file, int line, LogSeverity severity)
    : file_(file), line_(line), severity_(severity) {}

LogMessage::~LogMessage() {
  LogState& s = State();
  std::function<void(absl::string_view)> sink;
  bool rank_prefix;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    EnsureConfiguredLocked(s);
    sink = s.sink;
    rank_prefix = s.options.rank_prefix;
  }
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  const char* base = file_;
  for (const char* p = file_; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  std::string text;
  int rank = LogRank();
  if (rank_prefix && rank >= 0) absl::StrAppend(&text, "[", rank, "] ");
  absl::StrAppendFormat(&text, "%c%02d%02d %02d:%02d:%02d.%06d %s:%d] ",
                        LogSeverityLetter(severity_), local.tm_mon + 1, local.tm_mday,
                        local.tm_hour, local.tm_min, local.tm_sec, static_cast<int>(tv.tv_usec),
                        base, line_);
  std::string body = stream_.str();
  // A message with embedded newlines stays one record: continuation lines are indented.
  for (char c : body) {
    text.push_back(c);
    if (c == '\n') text.append("    ");
  }
  text.push_back('\n');
  if (sink) {
    sink(text);
  } else {
    WriteFully(2, text);
  }
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace hvx
