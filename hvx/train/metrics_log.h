// The trainer's metrics file: what a run did, as JSON lines that a program reads instead of the
// log. Rank 0 appends one JSON object per line, each with "event" and "time" (Unix seconds) first:
//
//   HVX_ASSIGN_OR_RETURN(std::unique_ptr<MetricsLog> log,
//   MetricsLog::Open("/runs/7/metrics.jsonl")); HVX_RETURN_IF_ERROR(log->Write("progress",
//   {{"global_step", 12}, {"loss", 0.5}}));
//
// Each line is written whole by one write(2) to a file opened O_APPEND, so a reader that tails the
// file sees whole lines, and a run that resumes adds its records after those of the run before. A
// number is written with as many digits as make it read back as the same double; a number that is
// not finite (a diverged loss) is written as null. The events and their fields are documented in
// hvx/train/README.md ("The metrics file").
#ifndef HVX_TRAIN_METRICS_LOG_H_
#define HVX_TRAIN_METRICS_LOG_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/json.h"

namespace hvx {
namespace train {

class MetricsLog {
 public:
  // Opens `path` to append (created when missing, mode 0666 less the umask, O_NOFOLLOW), making
  // its directory; a last line left unended (a run that died mid-write) is ended first. Errors
  // carry the errno and name the path.
  static absl::StatusOr<std::unique_ptr<MetricsLog>> Open(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends {"event": event, "time": now, ...fields} as one line. `fields` must be an object.
  absl::Status Write(absl::string_view event, const Json& fields);

  const std::string& path() const { return path_; }

 private:
  MetricsLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// The line MetricsLog::Write appends for `event` at Unix time `time`, without its newline.
std::string MetricsLine(absl::string_view event, double time, const Json& fields);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_METRICS_LOG_H_
