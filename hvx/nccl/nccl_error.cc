#include "hvx/nccl/nccl_error.h"

#include <sys/statvfs.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hvx {
namespace nccl {
namespace {

std::string MiB(int64_t bytes) { return absl::StrCat(bytes >> 20, " MiB"); }

std::vector<std::string> LikelyCauses(int result, const NcclErrorContext& c) {
  std::vector<std::string> causes;
  const bool setup = c.call.rfind("ncclCommInit", 0) == 0;
  const bool transport = result == kNcclSystemError || result == kNcclRemoteError ||
                         result == kNcclInProgress || result == kNcclInternalError;
  if (transport) {
    causes.push_back(
        c.socket_ifname.empty()
            ? "NCCL chose a network interface the other hosts cannot reach (docker0, a VPN, lo); "
              "name the right one with NCCL_SOCKET_IFNAME=eth0 (it is unset)"
            : absl::StrCat(
                  "NCCL_SOCKET_IFNAME=", c.socket_ifname,
                  " may not name an interface every host has and can reach the others on"));
    if (c.dev_shm_bytes >= 0 && c.dev_shm_bytes < kSmallDevShmBytes) {
      causes.push_back(
          absl::StrCat("/dev/shm is only ", MiB(c.dev_shm_bytes),
                       "; NCCL's shared-memory transport needs more: run containers with "
                       "--shm-size=1g or --ipc=host"));
    }
  }
  if (result == kNcclRemoteError || c.asynchronous) {
    causes.push_back(
        "another rank failed or exited (look for the first error in the other ranks' output)");
  }
  if (result == kNcclUnhandledCudaError || (setup && result != kNcclInvalidArgument)) {
    causes.push_back(
        "two ranks on one host use the same GPU (each rank must use the GPU of its local rank), or "
        "the CUDA "
        "driver is older than the CUDA runtime NCCL was built with");
  }
  if (result == kNcclInvalidUsage || result == kNcclInvalidArgument) {
    causes.push_back("the ranks called NCCL with different arguments or in a different order");
  }
  return causes;
}

absl::StatusCode CodeFor(int result) {
  switch (result) {
    case kNcclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case kNcclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case kNcclSystemError:
    case kNcclRemoteError:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

std::string NcclVersionString(int version_code) {
  if (version_code <= 0) return "unknown";
  if (version_code < 10000) {
    return absl::StrCat(version_code / 1000, ".", version_code % 1000 / 100, ".",
                        version_code % 100);
  }
  return absl::StrCat(version_code / 10000, ".", version_code % 10000 / 100, ".",
                      version_code % 100);
}

absl::Status NcclErrorToStatus(int result, absl::string_view error_string, int version_code,
                               const NcclErrorContext& context) {
  if (result == kNcclSuccess) return absl::OkStatus();
  std::string msg =
      absl::StrCat(context.call, context.asynchronous ? " failed asynchronously" : " failed");
  if (!context.tensor.empty()) absl::StrAppend(&msg, " for tensor '", context.tensor, "'");
  absl::StrAppend(&msg, " on rank ", context.rank);
  if (!context.host.empty()) absl::StrAppend(&msg, " (host ", context.host, ")");
  if (context.device >= 0) absl::StrAppend(&msg, ", cuda:", context.device);
  if (context.set_size > 0) absl::StrAppend(&msg, ", communicator of ", context.set_size, " ranks");
  absl::StrAppend(&msg, ": ", error_string, " (NCCL error ", result, ", NCCL ",
                  NcclVersionString(version_code), ")");
  if (!context.last_error.empty()) absl::StrAppend(&msg, ": ", context.last_error);
  std::vector<std::string> causes = LikelyCauses(result, context);
  if (!causes.empty()) absl::StrAppend(&msg, ". Likely causes: ", absl::StrJoin(causes, "; "));
  absl::StrAppend(
      &msg, ". Rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET) for NCCL's own account");
  return absl::Status(CodeFor(result), msg);
}

int64_t FilesystemBytes(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_blocks) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace nccl
}  // namespace hvx
