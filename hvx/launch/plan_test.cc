#include "hvx/launch/plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

using ::testing::HasSubstr;

struct Want {
  std::string host;
  int local_rank, local_size, cross_rank, cross_size;
};

void ExpectPlan(const Plan& plan, const std::vector<Want>& want) {
  ASSERT_EQ(plan.ranks.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    const RankPlacement& p = plan.ranks[r];
    EXPECT_EQ(p.rank, static_cast<int>(r));
    EXPECT_EQ(p.host, want[r].host) << "rank " << r;
    EXPECT_EQ(p.local_rank, want[r].local_rank) << "rank " << r;
    EXPECT_EQ(p.local_size, want[r].local_size) << "rank " << r;
    EXPECT_EQ(p.cross_rank, want[r].cross_rank) << "rank " << r;
    EXPECT_EQ(p.cross_size, want[r].cross_size) << "rank " << r;
  }
}

TEST(PlanTest, EvenTwoByTwo) {
  auto plan = MakePlan(4, {{"h1", 2}, {"h2", 2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectPlan(*plan,
             {{"h1", 0, 2, 0, 2}, {"h1", 1, 2, 0, 2}, {"h2", 0, 2, 1, 2}, {"h2", 1, 2, 1, 2}});
  EXPECT_EQ(FormatHostList(plan->used_hosts), "h1:2,h2:2");
}

TEST(PlanTest, UnevenThreeOne) {
  auto plan = MakePlan(4, {{"h1", 3}, {"h2", 1}});
  ASSERT_TRUE(plan.ok());
  ExpectPlan(*plan,
             {{"h1", 0, 3, 0, 2}, {"h1", 1, 3, 0, 1}, {"h1", 2, 3, 0, 1}, {"h2", 0, 1, 1, 2}});
}

TEST(PlanTest, HorovodExampleOneTwo) {
  // worker-0:1,worker-1:2 with np 3, as in Horovod's host-assignment tests.
  auto plan = MakePlan(3, {{"w0", 1}, {"w1", 2}});
  ASSERT_TRUE(plan.ok());
  ExpectPlan(*plan, {{"w0", 0, 1, 0, 2}, {"w1", 0, 2, 1, 2}, {"w1", 1, 2, 0, 1}});
}

TEST(PlanTest, ExactlyNpAndUnusedHostsDropped) {
  auto plan = MakePlan(3, {{"a", 2}, {"b", 2}, {"c", 4}});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->size, 3);
  EXPECT_EQ(FormatHostList(plan->used_hosts), "a:2,b:1");
  EXPECT_EQ(plan->ranks[2].local_size, 1);
}

TEST(PlanTest, TooManyProcessesSaysHowManySlots) {
  EXPECT_EQ(MakePlan(5, {{"h1", 2}, {"h2", 2}}).status().message(),
            "-np 5 is more than the 4 slots of h1:2,h2:2");
  EXPECT_THAT(MakePlan(0, {{"h1", 2}}).status().message(), HasSubstr(">= 1"));
}

// The per-rank wrapper gets FormatHostList(plan.used_hosts) and must place itself exactly where
// the plan did.
TEST(PlanTest, RoundTripThroughUsedHosts) {
  auto plan = MakePlan(5, {{"a", 3}, {"b", 4}});
  ASSERT_TRUE(plan.ok());
  std::vector<HostCount> counts;
  std::string error;
  ASSERT_TRUE(ParseUsedHosts(FormatHostList(plan->used_hosts), &counts, &error)) << error;
  Plan again = *plan;
  again.ranks = PlaceRanks(counts);
  EXPECT_EQ(FormatPlan(again), FormatPlan(*plan));
  EXPECT_THAT(FormatPlan(*plan), HasSubstr("rank 4  host b  local 1/2  cross 1/2"));
}

TEST(PlanTest, UsedHostsErrorsQuoteTheEntry) {
  std::vector<HostCount> counts;
  std::string error;
  for (const char* bad : {"", "h1", "h1:0", "h1:x", ":2", "h1:2,", "h1:2,h2:-1"}) {
    EXPECT_FALSE(ParseUsedHosts(bad, &counts, &error)) << bad;
    EXPECT_THAT(error, HasSubstr("malformed entry '")) << bad;
  }
  ASSERT_TRUE(ParseUsedHosts("10.0.0.1:3,h-2:1", &counts, &error)) << error;
  EXPECT_EQ(counts, (std::vector<HostCount>{{"10.0.0.1", 3}, {"h-2", 1}}));
}

TEST(PlanTest, UnevenHostsCrossRanks) {
  std::vector<RankPlacement> r = PlaceRanks({{"h1", 3}, {"h2", 1}});
  ASSERT_EQ(r.size(), 4u);
  // Local rank 0 exists on both hosts, local ranks 1 and 2 only on h1.
  EXPECT_EQ(r[0].cross_rank, 0);
  EXPECT_EQ(r[0].cross_size, 2);
  EXPECT_EQ(r[1].cross_size, 1);
  EXPECT_EQ(r[2].cross_size, 1);
  EXPECT_EQ(r[3].host, "h2");
  EXPECT_EQ(r[3].local_rank, 0);
  EXPECT_EQ(r[3].local_size, 1);
  EXPECT_EQ(r[3].cross_rank, 1);
  EXPECT_EQ(r[3].cross_size, 2);
}

}  // namespace
}  // namespace launch
}  // namespace hvx
