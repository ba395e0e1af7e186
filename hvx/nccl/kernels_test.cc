// The scale/cast kernels on a real GPU; skipped (with the reason) where there is none.
#include "hvx/nccl/kernels.h"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/common/half.h"

namespace hvx {
namespace nccl {
namespace {

class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
      GTEST_SKIP() << "no CUDA device here ("
                   << (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") << ")";
    }
    ASSERT_EQ(QueryDeviceLimits(0, &limits_), cudaSuccess);
  }

  template <typename In, typename Out>
  std::vector<Out> Run(const std::vector<In>& host, DataType in_t, DataType out_t, double factor) {
    void* in = nullptr;
    void* out = nullptr;
    EXPECT_EQ(cudaMalloc(&in, host.size() * sizeof(In) + 1), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&out, host.size() * sizeof(Out) + 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(in, host.data(), host.size() * sizeof(In), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(ScaleConvert(in, in_t, out, out_t, host.size(), factor, limits_, nullptr),
              cudaSuccess);
    std::vector<Out> result(host.size());
    EXPECT_EQ(cudaMemcpy(result.data(), out, result.size() * sizeof(Out), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(in);
    cudaFree(out);
    return result;
  }

  DeviceLimits limits_;
};

TEST_F(KernelsTest, ScalesFloatsOverManyBlocks) {
  std::vector<float> x(1 << 20);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 1000);
  std::vector<float> y = Run<float, float>(x, DataType::kFloat32, DataType::kFloat32, 0.25);
  for (size_t i = 0; i < x.size(); i += 4099) ASSERT_EQ(y[i], x[i] * 0.25f) << i;
  EXPECT_EQ(y.back(), x.back() * 0.25f);
}

TEST_F(KernelsTest, IntegersScaleInDoubleAndTruncate) {
  std::vector<int32_t> x = {7, -7, 3, 100};
  EXPECT_EQ((Run<int32_t, int32_t>(x, DataType::kInt32, DataType::kInt32, 0.5)),
            (std::vector<int32_t>{3, -3, 1, 50}));
  std::vector<int64_t> big = {int64_t{1} << 40};
  EXPECT_EQ((Run<int64_t, int64_t>(big, DataType::kInt64, DataType::kInt64, 3.0))[0],
            int64_t{3} << 40);
}

TEST_F(KernelsTest, HalfCastsRoundTripWithScale) {
  std::vector<uint16_t> h = {FloatToHalf(1.5f), FloatToHalf(-2.0f), FloatToHalf(65504.0f)};
  std::vector<float> f = Run<uint16_t, float>(h, DataType::kFloat16, DataType::kFloat32, 2.0);
  EXPECT_EQ(f, (std::vector<float>{3.0f, -4.0f, 131008.0f}));
  std::vector<uint16_t> back = Run<float, uint16_t>(f, DataType::kFloat32, DataType::kFloat16, 0.5);
  EXPECT_EQ(back, h);
  std::vector<float> g = {1.0f, 3.140625f};
  std::vector<uint16_t> b = Run<float, uint16_t>(g, DataType::kFloat32, DataType::kBfloat16, 1.0);
  EXPECT_EQ(Bfloat16ToFloat(b[0]), 1.0f);
  EXPECT_EQ(Bfloat16ToFloat(b[1]), 3.140625f);
}

TEST_F(KernelsTest, RejectsUnsupportedPairs) {
  EXPECT_EQ(ScaleConvert(nullptr, DataType::kInt32, nullptr, DataType::kFloat32, 4, 1.0, limits_,
                         nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(
      ScaleConvert(nullptr, DataType::kBool, nullptr, DataType::kBool, 4, 1.0, limits_, nullptr),
      cudaErrorInvalidValue);
}

}  // namespace
}  // namespace nccl
}  // namespace hvx
