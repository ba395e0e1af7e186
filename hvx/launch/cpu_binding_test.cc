#include "hvx/launch/cpu_binding.h"

#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

TEST(CpuBindingTest, EachRankGetsAConsecutiveBlockAndTheBlocksCoverTheCpus) {
  const std::vector<int> two = {0, 1};
  EXPECT_EQ(CpuBlock(two, 0, 2), std::vector<int>({0}));
  EXPECT_EQ(CpuBlock(two, 1, 2), std::vector<int>({1}));
  EXPECT_EQ(CpuBlock(two, 0, 1), two);
  std::vector<int> sixteen;
  for (int c = 0; c < 16; ++c) sixteen.push_back(c);
  std::vector<int> covered;
  for (int r = 0; r < 3; ++r) {
    const std::vector<int> block = CpuBlock(sixteen, r, 3);
    EXPECT_EQ(block.size(), r == 0 ? 6u : 5u) << "rank " << r;
    covered.insert(covered.end(), block.begin(), block.end());
  }
  EXPECT_EQ(covered, sixteen);
}

TEST(CpuBindingTest, TheBlocksFollowTheAllowedCpusNotTheirNumbers) {
  // A cpuset (container, scheduler) that leaves gaps.
  const std::vector<int> allowed = {2, 3, 8, 9, 10, 11};
  EXPECT_EQ(CpuBlock(allowed, 0, 2), std::vector<int>({2, 3, 8}));
  EXPECT_EQ(CpuBlock(allowed, 1, 2), std::vector<int>({9, 10, 11}));
}

TEST(CpuBindingTest, MoreRanksThanCpusAreNotBound) {
  EXPECT_TRUE(CpuBlock({0, 1}, 0, 4).empty());
  EXPECT_TRUE(CpuBlock({0, 1}, 3, 4).empty());
  EXPECT_TRUE(CpuBlock({}, 0, 1).empty());
  EXPECT_TRUE(CpuBlock({0, 1}, 2, 2).empty());
}

TEST(CpuBindingTest, ListsReadAsTheKernelWritesThem) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({5}), "5");
  EXPECT_EQ(FormatCpuList({}), "");
}

TEST(CpuBindingTest, ThisProcessCanBeBoundToWhatItMayUse) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  ASSERT_TRUE(BindToCpus({allowed.front()}));
  EXPECT_EQ(AllowedCpus(), std::vector<int>({allowed.front()}));
  ASSERT_TRUE(BindToCpus(allowed));
  EXPECT_EQ(AllowedCpus(), allowed);
}

}  // namespace
}  // namespace launch
}  // namespace hvx
