#include "hvx/common/watchdog.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace hvx {
namespace {

// A call that outlives the deadline: the process ends with the status, the message in its output.
TEST(WatchdogDeathTest, EndsTheProcessWithTheMessageWhenTheCallOutlivesTheDeadline) {
  EXPECT_EXIT(
      {
        Watchdog dog(absl::Milliseconds(100), "MPI_Comm_split (test) did not complete", 124);
        pause();
      },
      ::testing::ExitedWithCode(124),
      "MPI_Comm_split \\(test\\) did not complete; ending this process with status 124");
}

// Calls that return in time disarm it: nothing fires afterwards, and the destructor returns at
// once rather than at the deadline.
TEST(WatchdogTest, ACallThatReturnsInTimeDisarmsIt) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    Watchdog dog(absl::Seconds(30), "never", 124);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  { Watchdog dog(absl::Milliseconds(50), "fired after being disarmed", 124); }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

TEST(WatchdogTest, AnInfiniteTimeoutNeverFires) {
  Watchdog dog(absl::InfiniteDuration(), "never", 124);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace
}  // namespace hvx
