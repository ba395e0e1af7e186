#include "hvx/common/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "hvx/common/logging.h"

namespace hvx {

Watchdog::Watchdog(absl::Duration timeout, std::string message, int exit_code) {
  if (timeout == absl::InfiniteDuration()) return;
  const auto limit = absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration()));
  thread_ = std::thread([this, limit, message = std::move(message), exit_code] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, limit, [this] { return disarmed_; })) return;
    HVX_LOG(ERROR) << message << "; ending this process with status " << exit_code;
    std::fflush(nullptr);
    _exit(exit_code);
  });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    disarmed_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace hvx
