#include "hvx/core/response_cache.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace {

// What BitwiseAnd does across the ranks of a set.
void AndAcrossRanks(std::vector<CacheVote*> votes) {
  std::vector<uint64_t> combined = *votes[0]->words();
  for (CacheVote* v : votes) {
    for (size_t i = 0; i < combined.size(); ++i) combined[i] &= (*v->words())[i];
  }
  for (CacheVote* v : votes) *v->words() = combined;
}

TEST(CacheVoteTest, ReadyOnlyWhereEveryRankIsReady) {
  CacheVote a(130), b(130);
  for (int bit : {0, 64, 129}) a.Ready(bit);
  for (int bit : {64, 129, 5}) b.Ready(bit);
  AndAcrossRanks({&a, &b});
  EXPECT_EQ(a.ReadyOnEveryRank(), (std::vector<int>{64, 129}));
  EXPECT_EQ(b.ReadyOnEveryRank(), (std::vector<int>{64, 129}));
  EXPECT_TRUE(a.Invalidated().empty());
  EXPECT_FALSE(a.AnyRank(CacheVote::kUncached));
}

TEST(CacheVoteTest, OneRankInvalidatesForAll) {
  CacheVote a(64), b(64);
  a.Ready(3);
  b.Ready(3);
  a.Ready(7);
  b.Invalidate(7);  // stale or stalled on b
  AndAcrossRanks({&a, &b});
  EXPECT_EQ(a.Invalidated(), (std::vector<int>{7}));
  EXPECT_EQ(a.ReadyOnEveryRank(), (std::vector<int>{3}));
}

TEST(CacheVoteTest, FlagsAreTheOrOfTheRanks) {
  CacheVote a(10), b(10), c(10);
  b.Raise(CacheVote::kJoined);
  c.Raise(CacheVote::kUncached);
  AndAcrossRanks({&a, &b, &c});
  for (CacheVote* v : {&a, &b, &c}) {
    EXPECT_TRUE(v->AnyRank(CacheVote::kJoined));
    EXPECT_TRUE(v->AnyRank(CacheVote::kUncached));
    EXPECT_FALSE(v->AnyRank(CacheVote::kShutdown));
  }
}

TEST(CacheVoteTest, ZeroCapacityCarriesOnlyFlags) {
  CacheVote a(0);
  EXPECT_EQ(a.words()->size(), 1u);
  a.Raise(CacheVote::kShutdown);
  EXPECT_TRUE(a.AnyRank(CacheVote::kShutdown));
  EXPECT_TRUE(a.ReadyOnEveryRank().empty());
  EXPECT_TRUE(a.Invalidated().empty());
}

}  // namespace
}  // namespace hvx
