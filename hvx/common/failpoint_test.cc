#include "hvx/common/failpoint.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

TEST(FailpointTest, AFailpointNeedsHvxAllowFailpoints) {
  EXPECT_EQ(FailpointEnvironmentError(MapEnvironment{}), "");
  EXPECT_EQ(FailpointEnvironmentError(
                MapEnvironment{{"HVX_FAILPOINT", "init:0:exit"}, {"HVX_ALLOW_FAILPOINTS", "1"}}),
            "");
  const std::string e = FailpointEnvironmentError(MapEnvironment{{"HVX_FAILPOINT", "init:0:exit"}});
  EXPECT_TRUE(absl::StrContains(e,
                                "HVX_FAILPOINT=init:0:exit is set but HVX_ALLOW_FAILPOINTS=1 "
                                "is not"))
      << e;
  EXPECT_NE(FailpointEnvironmentError(
                MapEnvironment{{"HVX_FAILPOINT", "init:0:exit"}, {"HVX_ALLOW_FAILPOINTS", "0"}}),
            "");
}

// A stale HVX_FAILPOINT alone, naming this rank and point, does not fire: this test would exit 3.
TEST(FailpointTest, AStaleFailpointDoesNotFire) {
  setenv("HVX_FAILPOINT", "here:0:exit", 1);
  setenv("HVX_RANK", "0", 1);
  unsetenv("HVX_ALLOW_FAILPOINTS");
  Failpoint("here");
  SUCCEED();
}

}  // namespace
}  // namespace hvx
