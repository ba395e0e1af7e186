#include "hvx/train/sample_log.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"

namespace hvx {
namespace train {

absl::Status SampleLog::Open(const std::string& dir, int rank, int64_t epoch, bool append) {
  Reset();
  if (dir.empty()) return absl::OkStatus();
  HVX_RETURN_IF_ERROR(MakeDirs(dir));
  path_ = absl::StrCat(dir, "/rank", rank, "-epoch", epoch, ".txt");
  HVX_ASSIGN_OR_RETURN(fd_, OpenForWriting(path_, "sample log", append));
  return absl::OkStatus();
}

absl::Status SampleLog::Add(const std::vector<int64_t>& ids, int64_t num_padded) {
  if (fd_ < 0) return absl::OkStatus();
  const size_t first_pad = ids.size() - static_cast<size_t>(num_padded);
  std::string lines;
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StrAppend(&lines, ids[i], i >= first_pad ? " pad\n" : "\n");
  }
  if (!WriteFully(fd_, lines)) return ErrnoToStatus(errno, "writing sample log " + path_);
  return absl::OkStatus();
}

absl::Status SampleLog::Close() {
  const bool ok = fd_ < 0 || close(fd_) == 0;
  const int err = errno;
  fd_ = -1;
  return ok ? absl::OkStatus() : ErrnoToStatus(err, "closing sample log " + path_);
}

void SampleLog::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace train
}  // namespace hvx
