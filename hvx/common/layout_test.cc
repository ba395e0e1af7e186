// Where ranks sit, from host names: hosts numbered by their lowest rank, local and cross ranks,
// the members of a host and of a cross group.
#include "hvx/common/layout.h"

#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

using ::testing::ElementsAre;

std::tuple<int, int, int, int> Coordinates(const RankPlace& p) {
  return std::make_tuple(p.local_rank, p.local_size, p.cross_rank, p.cross_size);
}

TEST(LayoutTest, LocalAndCrossFromHostNames) {
  // w0 has one rank, w1 two.
  const HostLayout l = LayoutOf({"w0", "w1", "w1"});
  EXPECT_EQ(Coordinates(l.PlaceOf(0)), std::make_tuple(0, 1, 0, 2));
  EXPECT_EQ(Coordinates(l.PlaceOf(1)), std::make_tuple(0, 2, 1, 2));
  EXPECT_EQ(Coordinates(l.PlaceOf(2)), std::make_tuple(1, 2, 0, 1));
  EXPECT_FALSE(l.Homogeneous());
  EXPECT_EQ(l.size(), 3);
  EXPECT_EQ(l.hosts(), 2);
}

// Hosts are numbered by their lowest rank, wherever their ranks lie (an interleaved placement).
TEST(LayoutTest, HostsAreNumberedByTheirLowestRank) {
  const HostLayout l = LayoutOf({"b", "a", "b", "c", "a", "b"});
  EXPECT_THAT(l.host_of, ElementsAre(0, 1, 0, 2, 1, 0));
  EXPECT_THAT(l.local_of, ElementsAre(0, 0, 1, 0, 1, 2));
  EXPECT_THAT(l.per_host, ElementsAre(3, 2, 1));
  EXPECT_FALSE(l.Homogeneous());
  EXPECT_EQ(l.MaxPerHost(), 3);
  EXPECT_TRUE(LayoutOf({"x", "y", "x", "y"}).Homogeneous());
  EXPECT_EQ(LayoutOf({}).MaxPerHost(), 0);
  // Local rank 1 exists on hosts b and a only: rank 4 (a's second) is the second of that group.
  EXPECT_EQ(Coordinates(l.PlaceOf(4)), std::make_tuple(1, 2, 1, 2));
  EXPECT_EQ(Coordinates(l.PlaceOf(5)), std::make_tuple(2, 3, 0, 1));
  EXPECT_THAT(l.CrossMembers(1), ElementsAre(2, 4));
}

// Every rank's coordinates, interleaved over hosts b, a, c (numbered 0, 1, 2 by their lowest rank):
// local rank 0 is on all three hosts, 1 on b and a, 2 on b alone.
TEST(LayoutTest, EveryRanksPlace) {
  std::vector<std::tuple<int, int, int, int>> all;
  for (const RankPlace& p : LayoutOf({"b", "a", "b", "c", "a", "b"}).PlaceAll()) {
    all.push_back(Coordinates(p));
  }
  EXPECT_THAT(all, ElementsAre(std::make_tuple(0, 3, 0, 3), std::make_tuple(0, 2, 1, 3),
                               std::make_tuple(1, 3, 0, 2), std::make_tuple(0, 1, 2, 3),
                               std::make_tuple(1, 2, 1, 2), std::make_tuple(2, 3, 0, 1)));
  EXPECT_TRUE(LayoutOf({}).PlaceAll().empty());
}

TEST(LayoutTest, MembersOfAHostAndOfACrossGroup) {
  const HostLayout l = LayoutOf({"b", "a", "b", "a"});
  EXPECT_EQ(l.hosts(), 2);
  EXPECT_TRUE(l.Homogeneous());
  EXPECT_THAT(l.LocalMembers(2), ElementsAre(0, 2));
  EXPECT_THAT(l.LocalMembers(1), ElementsAre(1, 3));
  EXPECT_THAT(l.CrossMembers(0), ElementsAre(0, 1));
  EXPECT_THAT(l.CrossMembers(1), ElementsAre(2, 3));
  EXPECT_THAT(LayoutOf({"a", "a", "b"}).per_host, ElementsAre(2, 1));
}

}  // namespace
}  // namespace hvx
