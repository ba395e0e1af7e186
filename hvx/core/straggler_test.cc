#include "hvx/core/straggler.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

std::vector<std::string> Who(int n) {
  std::vector<std::string> who;
  for (int r = 0; r < n; ++r) who.push_back("rank " + std::to_string(r) + " (host h)");
  return who;
}

// One window of lockstep steps of `step_s`, where rank `late` (-1: none) submits `late_s` after
// the others, with `jitter` spreading the others' submissions.
std::vector<WaitSample> Window(int n, int late, double late_s, int steps = 10,
                               double step_s = 0.02) {
  std::vector<WaitSample> samples(n);
  for (int r = 0; r < n; ++r) {
    const double per_op = 0.0002 + (r == late ? 0 : late_s);  // the cycle's own wait, and lateness
    samples[r].op_wait_s = per_op * steps;
    samples[r].ops = steps;
    samples[r].wait_s = per_op * steps;
    samples[r].window_s = steps * step_s;
  }
  return samples;
}

TEST(WaitSampleTest, EncodingRoundTripsAndRejectsGarbage) {
  WaitSample s{1.5, 0.25, 7, 0.5};
  auto back = DecodeWaitSample(EncodeWaitSample(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->wait_s, 1.5);
  EXPECT_EQ(back->op_wait_s, 0.25);
  EXPECT_EQ(back->ops, 7);
  EXPECT_EQ(back->window_s, 0.5);
  EXPECT_FALSE(DecodeWaitSample("short").ok());
  WaitSample negative{-1, 0, 1, 1};
  EXPECT_FALSE(DecodeWaitSample(EncodeWaitSample(negative)).ok());
}

// The union of overlapping waits counts once; an op submitted while the draining cycle ran
// counts from the drain; a window cut while an op waits splits its wait between the windows.
TEST(WaitClockTest, CountsTheUnionOfWaitsAndEachOpsAgreement) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Seconds(100);
  WaitClock clock;
  EXPECT_FALSE(clock.active());
  clock.Submitted(t0);
  clock.Submitted(t0 + absl::Milliseconds(5));
  clock.Agreed(t0, t0 + absl::Milliseconds(10));
  clock.Agreed(t0 + absl::Milliseconds(5), t0 + absl::Milliseconds(10));
  clock.Drained(t0 + absl::Milliseconds(12));
  clock.Submitted(t0 + absl::Milliseconds(11));  // before the drain: counts from 12
  clock.Agreed(t0 + absl::Milliseconds(11), t0 + absl::Milliseconds(14));
  EXPECT_TRUE(clock.active());
  WaitSample w = clock.TakeWindow(t0 + absl::Milliseconds(16));
  EXPECT_NEAR(w.wait_s, 0.012 + 0.004, 1e-9);
  EXPECT_NEAR(w.op_wait_s, 0.010 + 0.005 + 0.003, 1e-9);
  EXPECT_EQ(w.ops, 3);
  EXPECT_FALSE(clock.active());
  clock.Drained(t0 + absl::Milliseconds(20));
  WaitSample next = clock.TakeWindow(t0 + absl::Milliseconds(30));
  EXPECT_NEAR(next.wait_s, 0.004, 1e-9);
  EXPECT_EQ(next.ops, 0);
}

TEST(StragglerDetectorTest, NamesARankLateInEnoughWindowsInARow) {
  StragglerDetector d(StragglerOptions{}, Who(4));
  // 20% slower: 4 ms late in 20 ms steps.
  EXPECT_EQ(d.Add(Window(4, 3, 0.004), 0.2), "");
  EXPECT_EQ(d.Add(Window(4, 3, 0.004), 0.2), "");
  EXPECT_EQ(d.status().rank, -1);
  const std::string warning = d.Add(Window(4, 3, 0.004), 0.2);
  EXPECT_TRUE(absl::StrContains(warning, "straggler: rank 3 (host h) is late")) << warning;
  EXPECT_TRUE(absl::StrContains(warning, "4.0 ms after the median")) << warning;
  EXPECT_TRUE(absl::StrContains(warning, "20.0% of the time")) << warning;
  EXPECT_EQ(d.status().rank, 3);
  EXPECT_EQ(d.status().windows, 3);
  ASSERT_EQ(d.status().late_ms.size(), 4u);
  EXPECT_NEAR(d.status().late_ms[3], 4.0, 1e-6);
  EXPECT_NEAR(d.status().late_ms[0], 0.0, 1e-6);
  EXPECT_NEAR(d.status().share[3], 0.2, 1e-6);
  // Named once, not every window after.
  EXPECT_EQ(d.Add(Window(4, 3, 0.004), 0.2), "");
  EXPECT_EQ(d.status().rank, 3);
  // Once it catches up it is no longer the straggler.
  EXPECT_EQ(d.Add(Window(4, -1, 0), 0.2), "");
  EXPECT_EQ(d.status().rank, -1);
  EXPECT_EQ(d.status().warning, warning);
}

TEST(StragglerDetectorTest, ALateRankThatChangesIsNotPersistent) {
  StragglerDetector d(StragglerOptions{}, Who(4));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(d.Add(Window(4, i % 4, 0.004), 0.2), "") << i;
  EXPECT_EQ(d.status().rank, -1);
}

TEST(StragglerDetectorTest, SmallLatenessIsNoise) {
  StragglerDetector d(StragglerOptions{}, Who(4));
  // Always the same rank, but 0.3 ms of 20 ms steps: below both thresholds.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(d.Add(Window(4, 1, 0.0003), 0.2), "");
  // Late per op but not for long: a wait share of 2% is not a straggler.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(d.Add(Window(4, 1, 0.004, 1), 0.2), "");
  EXPECT_EQ(d.status().rank, -1);
}

TEST(StragglerDetectorTest, WindowsWithARankThatRanNothingSayNothing) {
  StragglerDetector d(StragglerOptions{}, Who(2));
  std::vector<WaitSample> samples = Window(2, 1, 0.004);
  samples[0].ops = 0;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(d.Add(samples, 0.2), "");
  EXPECT_EQ(d.status().windows, 0);
  // Two ranks: the other one's wait is the median.
  for (int i = 0; i < 2; ++i) EXPECT_EQ(d.Add(Window(2, 1, 0.004), 0.2), "");
  EXPECT_TRUE(absl::StrContains(d.Add(Window(2, 1, 0.004), 0.2), "rank 1 (host h) is late"));
}

TEST(StragglerDetectorTest, NamesTheSameRankAgainAfterRepeatTime) {
  StragglerOptions o;
  o.repeat_s = 1;
  StragglerDetector d(o, Who(3));
  int warnings = 0;
  for (int i = 0; i < 15; ++i) warnings += !d.Add(Window(3, 0, 0.004), 0.2).empty();
  // At the third window, then once 1 s (5 windows) has passed since: windows 3, 8 and 13.
  EXPECT_EQ(warnings, 3);
  // It recovers for a long while, then lags again: named again at once (the time counts in
  // every window, not only in late ones).
  for (int i = 0; i < 10; ++i) EXPECT_EQ(d.Add(Window(3, -1, 0), 0.2), "");
  std::string again;
  for (int i = 0; i < 3; ++i) again = d.Add(Window(3, 0, 0.004), 0.2);
  EXPECT_NE(again, "");
  // Another rank lags: the status names nobody until it has lagged long enough, then it.
  EXPECT_EQ(d.Add(Window(3, 2, 0.004), 0.2), "");
  EXPECT_EQ(d.status().rank, -1);
  d.Add(Window(3, 2, 0.004), 0.2);
  EXPECT_NE(d.Add(Window(3, 2, 0.004), 0.2), "");
  EXPECT_EQ(d.status().rank, 2);
}

}  // namespace
}  // namespace hvx
