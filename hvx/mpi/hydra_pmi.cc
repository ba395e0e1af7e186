#include "hvx/mpi/hydra_pmi.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "hvx/common/clock.h"
#include "hvx/common/status.h"

namespace hvx {

std::optional<HydraPmi> HydraPmi::FromEnvironment(const Environment& env) {
  int fd = -1;
  const std::optional<std::string> pmi_fd = env.GetNonEmpty("PMI_FD");
  if (!pmi_fd || !absl::SimpleAtoi(*pmi_fd, &fd) || fd < 0) return std::nullopt;
  if (!env.GetNonEmpty("MPI_LOCALRANKID")) return std::nullopt;
  const std::optional<std::string> version = env.GetNonEmpty("MPIR_CVAR_PMI_VERSION");
  if (version && *version != "1") return std::nullopt;
  return HydraPmi(fd);
}

absl::Status HydraPmi::Exchange(absl::string_view command, absl::string_view reply,
                                absl::Time deadline, const std::function<void()>& progress) {
  const std::string line = absl::StrCat(command, "\n");
  for (size_t done = 0; done < line.size();) {
    // MSG_NOSIGNAL: a connection hydra closed must be an error here, not SIGPIPE.
    ssize_t n = send(fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return ErrnoToStatus(
          errno,
          absl::StrCat("PMI '", command, "': writing to hydra's connection (PMI_FD ", fd_, ")"));
    }
    done += static_cast<size_t>(n);
  }
  for (;;) {
    const size_t newline = pending_.find('\n');
    if (newline != std::string::npos) {
      const std::string got = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      if (!absl::StartsWith(got, reply)) {
        return absl::InternalError(absl::StrCat("PMI '", command, "': hydra answered '", got,
                                                "', expected '", reply, "'"));
      }
      return absl::OkStatus();
    }
    if (MonotonicNow() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("PMI '", command, "': no '", reply, "' from hydra in time"));
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, 1);
    if (ready < 0 && errno != EINTR)
      return ErrnoToStatus(errno, absl::StrCat("PMI '", command, "': poll"));
    if (ready <= 0) {
      progress();
      continue;
    }
    char buf[256];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return ErrnoToStatus(errno, absl::StrCat("PMI '", command, "': reading hydra's reply"));
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat(
          "PMI '", command, "': hydra closed the connection (the job is being stopped)"));
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

absl::Status HydraPmi::Leave(absl::Time deadline, const std::function<void()>& progress) {
  absl::Status barrier = Exchange("cmd=barrier_in", "cmd=barrier_out", deadline, progress);
  if (absl::IsDeadlineExceeded(barrier)) {
    return absl::DeadlineExceededError(
        absl::StrCat("not every rank reached the end of the job in time (the PMI barrier before "
                     "finalizing did not "
                     "complete: a rank failed, froze or has not called hvx::Shutdown); ",
                     barrier.message()));
  }
  HVX_RETURN_IF_ERROR(barrier);
  return Exchange("cmd=finalize", "cmd=finalize_ack", deadline, progress);
}

}  // namespace hvx
