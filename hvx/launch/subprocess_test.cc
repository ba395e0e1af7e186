#include "hvx/launch/subprocess.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

TEST(RunCaptureTest, ReturnsTheOutputOfACommand) {
  auto out = RunCapture({"/bin/sh", "-c", "echo hosts; echo noise >&2"}, 30);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hosts\n");
}

TEST(RunCaptureTest, AFailingCommandSaysWhatItPrinted) {
  auto out = RunCapture({"/bin/sh", "-c", "echo 'no such host' >&2; exit 3"}, 30);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(out.status().message(), "no such host")) << out.status();
}

// A command that closes its output and goes on running ends at the deadline too: hvxrun waited
// for its exit without one (a discovery script that daemonizes hung hvxrun for good).
TEST(RunCaptureTest, ACommandThatClosesItsOutputAndRunsOnTimesOut) {
  const Clock::time_point start = Clock::now();
  auto out = RunCapture({"/bin/sh", "-c", "exec >&- 2>&-; sleep 60"}, 0.5);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded) << out.status();
  EXPECT_LT(Seconds(Clock::now() - start), 30.0);
}

TEST(RunCaptureTest, ACommandStillWritingAtTheDeadlineTimesOut) {
  auto out = RunCapture({"/bin/sh", "-c", "while :; do echo x; sleep 0.1; done"}, 0.5);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded) << out.status();
}

}  // namespace
}  // namespace launch
}  // namespace hvx
