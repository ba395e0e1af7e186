// Linking //hvx/nccl:nccl registers the NCCL factory for CUDA tensors with the engine, and the
// plane refuses a context without a communicator instead of crashing; Init checks device binding.
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

TEST(RegisterTest, DeviceBindingIsCheckedAtInit) {
  bool found = false;
  for (const auto& [name, check] : RegisteredInitChecks())
    found = found || name == "cuda_device_binding";
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace hvx
