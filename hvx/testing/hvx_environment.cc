// A GoogleTest environment for tests that use hvx's API with its default options: hvx::Init()
// before the first test, hvx::Shutdown() after the last. Link it (alwayslink) with a transport,
// e.g. //hvx/mpi:hvx, into an hvx_mpi_test.
#include "gtest/gtest.h"
#include "hvx/core/api.h"

namespace {

class HvxEnvironment : public testing::Environment {
 public:
  void SetUp() override { ASSERT_TRUE(hvx::Init().ok()); }
  void TearDown() override { EXPECT_TRUE(hvx::Shutdown().ok()); }
};

const testing::Environment* const kEnv = testing::AddGlobalTestEnvironment(new HvxEnvironment);

}  // namespace
