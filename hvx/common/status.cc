#include "hvx/common/status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace hvx {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Status ErrnoToStatus(int errnum, absl::string_view context) {
  char buf[256];
  // GNU strerror_r returns the message, which may or may not be `buf`.
  const char* text = strerror_r(errnum, buf, sizeof(buf));
  std::string message = absl::StrCat(context, ": ", text);
  switch (errnum) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EINVAL:
    case EISDIR:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(message);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    case EAGAIN:
    case EINTR:
    case ETIMEDOUT:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status Unshared(const absl::Status& status) {
  return status.ok() ? absl::OkStatus()
                     : absl::Status(status.code(), std::string(status.message()));
}

}  // namespace hvx
