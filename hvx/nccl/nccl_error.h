// NCCL failures as absl::Status values a user can act on: the call and tensor, NCCL's own text, the
// NCCL version, and the causes users actually hit for that kind of failure (network interface
// selection, a small /dev/shm in containers, two ranks on one GPU, a peer that died). Plain C++:
// NCCL's result codes are passed as ints, so this builds and is tested without NCCL.
//
//   where.call = "ncclAllReduce"; where.tensor = "grad.fc1"; where.rank = 3;
//   return NcclErrorToStatus(result, ncclGetErrorString(result), version, where);
#ifndef HVX_NCCL_NCCL_ERROR_H_
#define HVX_NCCL_NCCL_ERROR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace hvx {
namespace nccl {

// ncclResult_t values (stable since NCCL 2.0; kRemoteError/kInProgress since 2.11/2.14).
enum NcclResultCode : int {
  kNcclSuccess = 0,
  kNcclUnhandledCudaError = 1,
  kNcclSystemError = 2,
  kNcclInternalError = 3,
  kNcclInvalidArgument = 4,
  kNcclInvalidUsage = 5,
  kNcclRemoteError = 6,
  kNcclInProgress = 7,
};

// NCCL_VERSION_CODE as "major.minor.patch": 22809 -> "2.28.9"; codes before 2.9 used
// major*1000 + minor*100 + patch (2708 -> "2.7.8").
std::string NcclVersionString(int version_code);

struct NcclErrorContext {
  std::string call;    // "ncclCommInitRank", "ncclAllReduce", ...
  std::string tensor;  // the tensor(s) being worked on; empty for communicator setup
  int rank = -1;       // global rank
  int set_size = 0;    // ranks in the communicator
  int device = -1;     // CUDA ordinal
  std::string host;
  bool asynchronous =
      false;               // found by ncclCommGetAsyncError while waiting, not returned by the call
  std::string last_error;  // ncclGetLastError(), more specific than the result's string
  int64_t dev_shm_bytes = -1;  // size of /dev/shm (-1 unknown)
  std::string socket_ifname;   // NCCL_SOCKET_IFNAME as set in the environment ("" unset)
};

// Non-OK status for a failed NCCL call (kNcclSuccess gives OK). Codes: InvalidArgument /
// FailedPrecondition for misuse, Unavailable for system and remote errors, Internal otherwise.
absl::Status NcclErrorToStatus(int result, absl::string_view error_string, int version_code,
                               const NcclErrorContext& context);

// Total bytes of the filesystem at `path` (statvfs), -1 when it cannot be read.
int64_t FilesystemBytes(const std::string& path);

// Below this, /dev/shm is named as a likely cause: NCCL's shared-memory transport needs several
// MiB per peer and channel, and container defaults (64 MiB) run out.
inline constexpr int64_t kSmallDevShmBytes = int64_t{512} << 20;

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_NCCL_ERROR_H_
