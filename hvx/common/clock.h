// The clock for waits, deadlines and durations: CLOCK_MONOTONIC as an absl::Time, so code keeps
// absl's types and arithmetic, but a wall clock stepped by NTP or an operator (an hour forward on
// one host) neither fires every timeout at once nor stops them firing. Its absolute value means
// nothing (time since boot, shown as a date in 1970): for timestamps people read, absl::Now().
//
//   const absl::Time deadline = MonotonicNow() + absl::Seconds(timeout_s);
//   while (!done()) { if (MonotonicNow() >= deadline) return Timeout(); ... }
#ifndef HVX_COMMON_CLOCK_H_
#define HVX_COMMON_CLOCK_H_

#include "absl/time/time.h"

namespace hvx {

absl::Time MonotonicNow();

}  // namespace hvx

#endif  // HVX_COMMON_CLOCK_H_
