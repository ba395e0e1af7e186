// The trial that picks the CPU plane by timing: alternation, the discarded first runs, the slowest
// rank's medians deciding, classes apart, and a summary that does not parse.
#include "hvx/shm/plane_trial.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace shm {
namespace {

absl::Duration Ms(double ms) { return absl::Milliseconds(ms); }

// Runs one class's trial with `shared` and `transport` times (kSamples each, in the order Next
// says: S T T S S T T S), returning its summary.
std::string RunTrial(PlaneTrial& t, int64_t bytes, const std::vector<double>& shared,
                     const std::vector<double>& transport) {
  size_t s = 0, m = 0;
  for (int i = 0; i < 2 * PlaneTrial::kSamples; ++i) {
    const PlaneTrial::Pick p = t.Next(bytes);
    EXPECT_TRUE(p.timed);
    EXPECT_EQ(p.plane, i % 4 == 0 || i % 4 == 3 ? PlaneTrial::kShared : PlaneTrial::kTransport)
        << "run " << i;
    const bool done =
        t.Record(p.size_class, p.plane,
                 Ms(p.plane == PlaneTrial::kShared ? shared[s++] : transport[m++]), bytes);
    EXPECT_EQ(done, i == 2 * PlaneTrial::kSamples - 1) << "run " << i;
  }
  return t.Summary(PlaneTrial::SizeClass(bytes));
}

TEST(PlaneTrialTest, SizeClasses) {
  EXPECT_EQ(PlaneTrial::SizeClass(4), 0);
  EXPECT_EQ(PlaneTrial::SizeClass((64 << 10) - 1), 0);
  EXPECT_EQ(PlaneTrial::SizeClass(64 << 10), 1);
  EXPECT_EQ(PlaneTrial::SizeClass((4 << 20) - 1), 1);
  EXPECT_EQ(PlaneTrial::SizeClass(int64_t{64} << 20), 2);
}

TEST(PlaneTrialTest, FirstRunsAreDiscardedAndTheMedianOfTheRestCounts) {
  PlaneTrial t;
  // A first run of 100 ms (first touch) must not count; medians 2 and 3 ms (a buffer of 1 MiB:
  // ns per MiB are ns).
  EXPECT_EQ(RunTrial(t, 1 << 20, {100, 2, 1, 5}, {100, 3, 3, 9}), "2000000 3000000");
}

TEST(PlaneTrialTest, LargerBuffersCountTheirTimePerMiBAndSmallOnesTheirTime) {
  PlaneTrial t;
  EXPECT_EQ(RunTrial(t, 8 << 20, {8, 8, 8, 8}, {16, 16, 16, 16}), "1000000 2000000");
  EXPECT_EQ(RunTrial(t, 4, {1, 1, 1, 1}, {2, 2, 2, 2}), "1000000 2000000");
}

TEST(PlaneTrialTest, TheSlowestRanksMediansDecide) {
  PlaneTrial t;
  RunTrial(t, 8 << 20, {9, 1, 1, 1}, {9, 2, 2, 2});
  // On this rank shared memory was faster, but another rank's was the slowest of all.
  absl::StatusOr<std::string> line = t.Decide(2, {"1000000 2000000", "5000000 2500000"});
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(t.decided(2));
  EXPECT_EQ(t.chosen(2), PlaneTrial::kTransport);
  EXPECT_TRUE(absl::StrContains(
      *line, "shared memory 5.000 ms per MiB, the transport's plane 2.500 ms per MiB"))
      << *line;
  EXPECT_TRUE(absl::StrContains(*line, "the transport's plane from now on")) << *line;
  const PlaneTrial::Pick p = t.Next(64 << 20);
  EXPECT_FALSE(p.timed);
  EXPECT_EQ(p.plane, PlaneTrial::kTransport);
  // The other classes are still on trial.
  EXPECT_TRUE(t.Next(4).timed);
  EXPECT_FALSE(t.decided(0));
}

TEST(PlaneTrialTest, ATieKeepsSharedMemory) {
  PlaneTrial t;
  RunTrial(t, 4, {1, 1, 1, 1}, {1, 1, 1, 1});
  ASSERT_TRUE(t.Decide(0, {"1000 1000", "1000 1000"}).ok());
  EXPECT_EQ(t.chosen(0), PlaneTrial::kShared);
}

TEST(PlaneTrialTest, ASummaryThatDoesNotParseKeepsSharedMemory) {
  PlaneTrial t;
  RunTrial(t, 4, {1, 9, 9, 9}, {1, 1, 1, 1});
  absl::StatusOr<std::string> line = t.Decide(0, {"9000000 1000000", "garbage"});
  EXPECT_FALSE(line.ok());
  EXPECT_TRUE(absl::StrContains(line.status().message(), "rank 1 sent 'garbage'"));
  EXPECT_TRUE(t.decided(0));
  EXPECT_EQ(t.chosen(0), PlaneTrial::kShared);
}

}  // namespace
}  // namespace shm
}  // namespace hvx
