#include "hvx/common/clock.h"

#include <time.h>

namespace hvx {

absl::Time MonotonicNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::UnixEpoch() + absl::Seconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
}

}  // namespace hvx
