// The scale/cast kernels on a real GPU; skipped (with the reason) where there is none.
#include "hvx/nccl/kernels.h"

#include <cuda_runtime.h>

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/common/half.h"
#include "hvx/kernels/cpu_ops.h"

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

// Random inputs of every scaled type against the CPU plane's own arithmetic (hvx/kernels/cpu_ops):
// the GPU must give the same bits for float, double and integers, and for float16 the same
// rounding of the scaled value.
TEST_F(KernelsTest, RandomInputsMatchTheCpuReference) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> real(-1000.0f, 1000.0f);
  std::uniform_int_distribution<int32_t> whole(-1000000, 1000000);
  const size_t n = (1 << 18) + 37;  // not a multiple of any block size
  for (double factor : {0.125, 1.0 / 3.0, 7.5}) {
    std::vector<float> f(n);
    for (float& v : f) v = real(rng);
    std::vector<float> want_f = f;
    ScaleInPlace(DataType::kFloat32, want_f.data(), n, factor);
    EXPECT_EQ((Run<float, float>(f, DataType::kFloat32, DataType::kFloat32, factor)), want_f)
        << factor;
    std::vector<double> d(f.begin(), f.end());
    std::vector<double> want_d = d;
    ScaleInPlace(DataType::kFloat64, want_d.data(), n, factor);
    EXPECT_EQ((Run<double, double>(d, DataType::kFloat64, DataType::kFloat64, factor)), want_d)
        << factor;
    std::vector<int32_t> i(n);
    for (int32_t& v : i) v = whole(rng);
    std::vector<int32_t> want_i = i;
    ScaleInPlace(DataType::kInt32, want_i.data(), n, factor);
    EXPECT_EQ((Run<int32_t, int32_t>(i, DataType::kInt32, DataType::kInt32, factor)), want_i)
        << factor;
    std::vector<uint16_t> h(n);
    for (size_t k = 0; k < n; ++k) h[k] = FloatToHalf(real(rng) / 16.0f);
    std::vector<uint16_t> want_h = h;
    ScaleInPlace(DataType::kFloat16, want_h.data(), n, factor);
    EXPECT_EQ((Run<uint16_t, uint16_t>(h, DataType::kFloat16, DataType::kFloat16, factor)), want_h)
        << factor;
  }
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
