// Helpers for absl::Status-based error handling used throughout hvx.
//
//   absl::Status Load(const std::string& path) {
//     HVX_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
//     HVX_RETURN_IF_ERROR(Parse(text));
//     return absl::OkStatus();
//   }
#ifndef HVX_COMMON_STATUS_H_
#define HVX_COMMON_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hvx {

// Returns `status` with "context: " prepended to its message; OK stays OK. The code is kept.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// A status for a failed system call: the code follows errno (ENOENT -> NotFound, EACCES ->
// PermissionDenied, ...), the message is "<context>: <strerror(errnum)>".
absl::Status ErrnoToStatus(int errnum, absl::string_view context);

// A copy of `status` that shares no heap state with it. absl::Status shares its message between
// copies through a reference count inside the system Abseil library, which ThreadSanitizer cannot
// see; a status handed to another thread is therefore copied deeply.
absl::Status Unshared(const absl::Status& status);

}  // namespace hvx

#define HVX_STATUS_CONCAT_INNER_(a, b) a##b
#define HVX_STATUS_CONCAT_(a, b) HVX_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if it is not OK.
#define HVX_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status hvx_status_ = (expr);       \
    if (!hvx_status_.ok()) return hvx_status_; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status if not OK, else moves the value
// into `lhs`, which may be a declaration (`auto x`) or an existing variable.
#define HVX_ASSIGN_OR_RETURN(lhs, rexpr) \
  HVX_ASSIGN_OR_RETURN_IMPL_(HVX_STATUS_CONCAT_(hvx_statusor_, __LINE__), lhs, rexpr)

#define HVX_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

#endif  // HVX_COMMON_STATUS_H_
