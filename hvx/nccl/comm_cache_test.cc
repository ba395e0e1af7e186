#include "hvx/nccl/comm_cache.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace nccl {
namespace {

using ::testing::ElementsAre;

// Communicators stand in as names; the destroyer records the order of release.
struct Recorder {
  std::vector<std::string> destroyed;
  int created = 0;
  CommunicatorCache<std::string>::Creator Make(std::string name) {
    return [this, name]() -> absl::StatusOr<std::string> {
      ++created;
      return name;
    };
  }
};

TEST(CommunicatorCacheTest, CreatesOncePerMembershipAndDevice) {
  Recorder rec;
  CommunicatorCache<std::string> cache([&](std::string c) { rec.destroyed.push_back(c); });
  auto a = cache.GetOrCreate({{0, 1, 2, 3}, 0}, rec.Make("world"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(**a, "world");
  // A second process set with the same members reuses it.
  auto again = cache.GetOrCreate({{0, 1, 2, 3}, 0}, rec.Make("dup"));
  EXPECT_EQ(*again, *a);
  EXPECT_EQ(rec.created, 1);
  EXPECT_EQ(cache.hits(), 1);
  // Other members or another GPU are other communicators.
  ASSERT_TRUE(cache.GetOrCreate({{0, 1}, 0}, rec.Make("host0")).ok());
  ASSERT_TRUE(cache.GetOrCreate({{0, 1, 2, 3}, 1}, rec.Make("world-gpu1")).ok());
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.creations(), 3);
  EXPECT_TRUE(cache.Contains({{0, 1}, 0}));
  EXPECT_FALSE(cache.Contains({{0, 1}, 1}));
  EXPECT_EQ(cache.Keys().front().DebugString(), "cuda:0 ranks {0,1}");
}

TEST(CommunicatorCacheTest, FailedCreationIsNotCached) {
  Recorder rec;
  CommunicatorCache<std::string> cache([&](std::string c) { rec.destroyed.push_back(c); });
  auto failed = cache.GetOrCreate({{0, 1}, 0}, []() -> absl::StatusOr<std::string> {
    return absl::UnavailableError("ncclCommInitRank failed");
  });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(cache.GetOrCreate({{0, 1}, 0}, rec.Make("retry")).ok());
  EXPECT_EQ(rec.created, 1);
}

TEST(CommunicatorCacheTest, EraseAndDestructionReleaseNewestFirst) {
  Recorder rec;
  {
    CommunicatorCache<std::string> cache([&](std::string c) { rec.destroyed.push_back(c); });
    ASSERT_TRUE(cache.GetOrCreate({{2, 3}, 0}, rec.Make("first")).ok());
    ASSERT_TRUE(cache.GetOrCreate({{0, 1}, 0}, rec.Make("second")).ok());
    ASSERT_TRUE(cache.GetOrCreate({{0, 1, 2, 3}, 0}, rec.Make("third")).ok());
    EXPECT_TRUE(cache.Erase({{0, 1}, 0}));
    EXPECT_FALSE(cache.Erase({{0, 1}, 0}));
    EXPECT_EQ(cache.Find({{0, 1}, 0}), nullptr);
    EXPECT_THAT(rec.destroyed, ElementsAre("second"));
  }
  EXPECT_THAT(rec.destroyed, ElementsAre("second", "third", "first"));
}

}  // namespace
}  // namespace nccl
}  // namespace hvx
