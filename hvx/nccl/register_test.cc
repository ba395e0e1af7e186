// Linking //hvx/nccl:nccl registers the NCCL factory for CUDA tensors with the engine, and the
// plane refuses a context without a communicator instead of crashing.
#include "gtest/gtest.h"
#include "hvx/core/transport.h"
#include "hvx/nccl/nccl_data_plane.h"

namespace hvx {
namespace {

TEST(RegisterTest, CudaTensorsHaveTheNcclDataPlane) {
  DataPlaneFactory factory = FindDataPlane(DeviceType::kCuda);
  ASSERT_TRUE(static_cast<bool>(factory));
  DataPlaneContext ctx;
  auto plane = factory(ctx);
  ASSERT_FALSE(plane.ok());
  EXPECT_EQ(plane.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_GT(nccl::LoadedNcclVersion(), 0);
}

}  // namespace
}  // namespace hvx
