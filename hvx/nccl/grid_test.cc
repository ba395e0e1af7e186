#include "hvx/nccl/grid.h"

#include "gtest/gtest.h"

namespace hvx {
namespace nccl {
namespace {

TEST(ComputeLaunchTest, EmptyInputLaunchesNothing) {
  KernelGrid c = ComputeGrid(0, DeviceLimits{});
  EXPECT_EQ(c.blocks, 0);
  EXPECT_EQ(c.threads, 256);
}

TEST(ComputeLaunchTest, SmallInputsGetOneBlock) {
  DeviceLimits h200{132};
  EXPECT_EQ(ComputeGrid(1, h200).blocks, 1);
  EXPECT_EQ(ComputeGrid(1024, h200).blocks, 1);  // 256 threads x 4 elements
  EXPECT_EQ(ComputeGrid(1025, h200).blocks, 2);
}

TEST(ComputeLaunchTest, LargeInputsFillTheDeviceOnce) {
  DeviceLimits h200{132};
  KernelGrid c = ComputeGrid(int64_t{1} << 30, h200);
  EXPECT_EQ(c.blocks, 132 * 8);
  EXPECT_EQ(c.threads, 256);
  DeviceLimits tiny_grid{132, 1024, 8, 10};
  EXPECT_EQ(ComputeGrid(int64_t{1} << 30, tiny_grid).blocks, 10);
}

TEST(ComputeLaunchTest, ThreadsRespectTheDeviceAndWholeWarps) {
  DeviceLimits small{4, 100};
  EXPECT_EQ(ComputeGrid(1000, small).threads, 96);
  DeviceLimits odd{4, 20};
  EXPECT_EQ(ComputeGrid(1000, odd).threads, 32);
  EXPECT_EQ(ComputeGrid(1000, DeviceLimits{4}, /*elements_per_thread=*/1).blocks, 4);
  EXPECT_EQ(ComputeGrid(1000, DeviceLimits{4}, /*elements_per_thread=*/0).blocks, 4);
}

TEST(KernelSupportsTest, ScaleAndHalfCasts) {
  for (DataType t : kAllDataTypes)
    EXPECT_EQ(KernelSupports(t, t), t != DataType::kBool) << DataTypeName(t);
  EXPECT_TRUE(KernelSupports(DataType::kFloat16, DataType::kFloat32));
  EXPECT_TRUE(KernelSupports(DataType::kFloat32, DataType::kBfloat16));
  EXPECT_FALSE(KernelSupports(DataType::kFloat16, DataType::kBfloat16));
  EXPECT_FALSE(KernelSupports(DataType::kFloat64, DataType::kFloat16));
  EXPECT_FALSE(KernelSupports(DataType::kInt32, DataType::kFloat32));
}

}  // namespace
}  // namespace nccl
}  // namespace hvx
