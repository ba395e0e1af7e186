#include "hvx/train/metrics_log.h"

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

absl::StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(const std::string& path) {
  HVX_RETURN_IF_ERROR(MakeDirs(DirName(path)));
  HVX_ASSIGN_OR_RETURN(const int fd, OpenForWriting(path, "metrics file", /*append=*/true));
  return std::unique_ptr<MetricsLog>(new MetricsLog(fd, path));
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
