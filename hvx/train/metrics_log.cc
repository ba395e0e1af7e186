#include "hvx/train/metrics_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"

namespace hvx {
namespace train {
std::string MetricsLine(absl::string_view event, double time, const Json& fields) {
  // "event" and "time" first, then the fields (an object's members in name order).
  std::string line =
      absl::StrCat("{\"event\":", JsonQuote(event),
                   ",\"time\":", JsonText(std::isfinite(time) ? Json(time) : Json()));
  const std::string rest = JsonText(fields);  // "{...}"
  if (rest.size() > 2) {
    line += ',';
    line.append(rest, 1, std::string::npos);
  } else {
    line += '}';
  }
  return line;
}

namespace {

// Whether the file at `path` has bytes and its last is not a newline.
bool EndsUnended(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  char last = '\n';
  const bool unended = fstat(fd, &st) == 0 && st.st_size > 0 &&
                       pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n';
  close(fd);
  return unended;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(const std::string& path) {
  HVX_RETURN_IF_ERROR(MakeDirs(DirName(path)));
  HVX_ASSIGN_OR_RETURN(const int fd, OpenForWriting(path, "metrics file", /*append=*/true));
  std::unique_ptr<MetricsLog> log(new MetricsLog(fd, path));
  // A run that died mid-write left its last line unended: the next record starts on a line of its
  // own instead of continuing that one (which a reader could then take for neither).
  if (EndsUnended(path) && !WriteFully(fd, "\n")) {
    return ErrnoToStatus(errno, absl::StrCat("writing the metrics file ", path));
  }
  return log;
}

MetricsLog::~MetricsLog() { close(fd_); }

absl::Status MetricsLog::Write(absl::string_view event, const Json& fields) {
  if (!fields.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics record ", event, ": fields must be a JSON object"));
  }
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const std::string line = MetricsLine(event, now, fields) + "\n";
  if (!WriteFully(fd_, line)) {
    return ErrnoToStatus(errno, absl::StrCat("writing the metrics file ", path_));
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace hvx
