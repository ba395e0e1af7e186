#include "hvx/core/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "hvx/common/clock.h"
#include "hvx/common/files.h"
#include "hvx/common/json.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"

namespace hvx {

absl::StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const std::string& path) {
  HVX_ASSIGN_OR_RETURN(const int fd, OpenForWriting(path, "HVX_TIMELINE file"));
  auto t = std::unique_ptr<Timeline>(new Timeline(fd, path));
  const std::string head = "[\n]";
  if (pwrite(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    return ErrnoToStatus(errno, absl::StrCat("HVX_TIMELINE: cannot write ", path));
  }
  t->end_offset_ = 2;
  return t;
}

Timeline::Timeline(int fd, std::string path)
    : fd_(fd), path_(std::move(path)), start_(MonotonicNow()), wall_start_(absl::Now()) {}

Timeline::~Timeline() { close(fd_); }

void Timeline::Append(const std::string& record) {
  std::string chunk = absl::StrCat(first_ ? "" : ",\n", record, "\n]");
  const ssize_t n = pwrite(fd_, chunk.data(), chunk.size(), end_offset_);
  if (n != static_cast<ssize_t>(chunk.size())) {
    HVX_LOG(WARNING) << "timeline " << path_ << ": write failed: " << strerror(errno);
    return;
  }
  end_offset_ += static_cast<int64_t>(chunk.size()) - 1;
  first_ = false;
}

int Timeline::Pid(const std::string& name) {
  auto it = pids_.find(name);
  if (it != pids_.end()) return it->second;
  const int pid = static_cast<int>(pids_.size()) + 1;
  pids_[name] = pid;
  std::string extra;
  if (pid == 1) {
    extra = absl::StrCat(",\"start_time_since_epoch_in_micros\":", absl::ToUnixMicros(wall_start_));
  }
  Append(absl::StrCat("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", pid,
                      ",\"args\":{\"name\":", JsonQuote(name), extra, "}}"));
  Append(absl::StrCat("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":", pid,
                      ",\"args\":{\"sort_index\":", pid, "}}"));
  return pid;
}

void Timeline::Event(const std::string& name, absl::string_view ph, absl::string_view event_name,
                     absl::string_view extra) {
  const int pid = Pid(name);
  const int64_t ts = absl::ToInt64Microseconds(MonotonicNow() - start_);
  Append(absl::StrCat("{\"ph\":\"", ph, "\",\"pid\":", pid, ",\"tid\":0,\"ts\":", ts,
                      event_name.empty() ? "" : absl::StrCat(",\"name\":", JsonQuote(event_name)),
                      extra, "}"));
}

void Timeline::NegotiationStart(const std::string& name, OpType type) {
  Event(name, "B", absl::StrCat("NEGOTIATE_", OpTypeName(type)), "");
}

void Timeline::RankReady(const std::string& name, int rank) {
  Event(name, "X", absl::StrCat(rank), ",\"dur\":0");
}

void Timeline::NegotiationEnd(const std::string& name) { Event(name, "E", "", ""); }

void Timeline::OpStart(const std::string& name, OpType type) {
  Event(name, "B", OpTypeName(type), "");
}

void Timeline::ActivityStart(const std::string& name, absl::string_view activity) {
  Event(name, "B", activity, "");
}

void Timeline::ActivityEnd(const std::string& name) { Event(name, "E", "", ""); }

void Timeline::OpEnd(const std::string& name, absl::string_view args_json) {
  Event(name, "E", "", args_json.empty() ? "" : absl::StrCat(",\"args\":", args_json));
}

}  // namespace hvx
