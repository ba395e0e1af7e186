#include "hvx/kernels/cpu_ops.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/common/half.h"

namespace hvx {
namespace {

constexpr ReduceOp kFoldOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                 ReduceOp::kProduct};

TEST(ReduceIntoTest, KnownValues) {
  const std::vector<float> a = {1, -2, 3.5f}, b = {4, 5, -0.5f};
  const std::vector<std::vector<float>> want = {
      {5, 3, 3}, {1, -2, -0.5f}, {4, 5, 3.5f}, {4, -10, -1.75f}};
  for (int o = 0; o < 4; ++o) {
    std::vector<float> acc = a;
    ReduceInto(DataType::kFloat32, kFoldOps[o], acc.data(), b.data(), 3);
    EXPECT_EQ(acc, want[o]) << "op " << o;
  }
  std::vector<int8_t> i8 = {100, -100};
  const std::vector<int8_t> i8_in = {100, 1};
  ReduceInto(DataType::kInt8, ReduceOp::kSum, i8.data(), i8_in.data(), 2);
  EXPECT_EQ(i8, (std::vector<int8_t>{-56, -99}));  // wraps as int8 arithmetic does
  const std::vector<uint8_t> p = {0, 1, 1, 0}, q = {0, 0, 1, 1};
  std::vector<uint8_t> any = p, all = p;
  ReduceInto(DataType::kBool, ReduceOp::kSum, any.data(), q.data(), 4);
  ReduceInto(DataType::kBool, ReduceOp::kProduct, all.data(), q.data(), 4);
  EXPECT_EQ(any, (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(all, (std::vector<uint8_t>{0, 0, 1, 0}));
  uint16_t h = FloatToHalf(1.5f), bh = FloatToBfloat16(1.5f);
  const uint16_t h_in = FloatToHalf(2.25f), bh_in = FloatToBfloat16(2.25f);
  ReduceInto(DataType::kFloat16, ReduceOp::kSum, &h, &h_in, 1);
  ReduceInto(DataType::kBfloat16, ReduceOp::kMax, &bh, &bh_in, 1);
  EXPECT_EQ(HalfToFloat(h), 3.75f);
  EXPECT_EQ(Bfloat16ToFloat(bh), 2.25f);
}

// ReduceTo is the shared-memory plane's first fold step: its bits must be those of copying a, then
// ReduceInto(b), for every type and operation, on every bit pattern (NaNs included).
TEST(ReduceToTest, EqualsCopyThenReduceIntoForEveryTypeAndOp) {
  std::mt19937 rng(7);
  const int64_t n = 1031;  // past every vector width, with a tail
  for (DataType dtype : kAllDataTypes) {
    const size_t bytes = n * DataTypeSize(dtype);
    std::vector<uint8_t> a(bytes), b(bytes);
    for (auto& x : a) x = static_cast<uint8_t>(rng());
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    if (dtype == DataType::kBool) {
      for (auto& x : a) x &= 1;
      for (auto& x : b) x &= 1;
    }
    for (ReduceOp op : kFoldOps) {
      std::vector<uint8_t> want = a, got(bytes, 0xAB);
      ReduceInto(dtype, op, want.data(), b.data(), n);
      ReduceTo(dtype, op, got.data(), a.data(), b.data(), n);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), bytes))
          << DataTypeName(dtype) << " op " << static_cast<int>(op);
    }
  }
}

// Every float32 of a wide range divided by each set size an Average meets: the quotient must be
// x / n rounded once, as torch's `sum / size` is (multiplying by float(1/3) is one ulp off for a
// third of these).
TEST(ScaleInPlaceTest, AverageOfFloat32IsTheCorrectlyRoundedQuotient) {
  std::vector<float> values;
  for (int i = -20000; i <= 20000; ++i) values.push_back(static_cast<float>(i) * 1.37f);
  for (int i = 1; i < 2000; ++i) values.push_back(1.0f / static_cast<float>(i));
  for (int n : {2, 3, 5, 6, 7, 12, 24, 1000}) {
    std::vector<float> got = values;
    ScaleInPlace(DataType::kFloat32, got.data(), static_cast<int64_t>(got.size()), Scale(1.0, n));
    int wrong = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (got[i] != values[i] / static_cast<float>(n)) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "set size " << n;
  }
}

// A factor multiplies in float32 first (Horovod's CPU arithmetic), then the divisor divides.
TEST(ScaleInPlaceTest, FactorMultipliesInFloat32ThenTheDivisorDivides) {
  const double factor = 0.7071067811865476;
  std::vector<float> got, want;
  for (int i = -3000; i <= 3000; ++i) {
    const float x = static_cast<float>(i) * 0.731f;
    got.push_back(x);
    want.push_back((x * static_cast<float>(factor)) / 3.0f);
  }
  ScaleInPlace(DataType::kFloat32, got.data(), static_cast<int64_t>(got.size()), Scale(factor, 3));
  EXPECT_EQ(got, want);
  std::vector<float> plain = {1.5f, -2.25f};
  ScaleInPlace(DataType::kFloat32, plain.data(), 2, factor);
  EXPECT_EQ(plain[0], 1.5f * static_cast<float>(factor));
  EXPECT_EQ(plain[1], -2.25f * static_cast<float>(factor));
}

TEST(ScaleInPlaceTest, AverageOfFloat64AndHalfTypesDividesOnce) {
  std::vector<double> d;
  for (int i = -5000; i <= 5000; ++i) d.push_back(static_cast<double>(i) * 1.37);
  std::vector<double> got_d = d;
  ScaleInPlace(DataType::kFloat64, got_d.data(), static_cast<int64_t>(d.size()), Scale(1.0, 3));
  for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(got_d[i], d[i] / 3.0) << d[i];

  std::vector<uint16_t> h, b;
  for (int i = -2000; i <= 2000; ++i) {
    h.push_back(FloatToHalf(static_cast<float>(i) * 0.0625f));
    b.push_back(FloatToBfloat16(static_cast<float>(i) * 0.0625f));
  }
  std::vector<uint16_t> got_h = h, got_b = b;
  ScaleInPlace(DataType::kFloat16, got_h.data(), static_cast<int64_t>(h.size()), Scale(1.0, 3));
  ScaleInPlace(DataType::kBfloat16, got_b.data(), static_cast<int64_t>(b.size()), Scale(1.0, 3));
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(got_h[i], FloatToHalf(HalfToFloat(h[i]) / 3.0f)) << HalfToFloat(h[i]);
    ASSERT_EQ(got_b[i], FloatToBfloat16(Bfloat16ToFloat(b[i]) / 3.0f)) << Bfloat16ToFloat(b[i]);
  }
}

// Integers: the quotient truncated toward zero, exact for every multiple of the divisor.
TEST(ScaleInPlaceTest, AverageOfIntegersTruncatesTowardZero) {
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  for (int i = -30000; i <= 30000; ++i) {
    i32.push_back(i);
    i64.push_back(static_cast<int64_t>(i) * 1000003);
  }
  for (int n : {3, 7, 10}) {
    std::vector<int32_t> g32 = i32;
    std::vector<int64_t> g64 = i64;
    ScaleInPlace(DataType::kInt32, g32.data(), static_cast<int64_t>(g32.size()), Scale(1.0, n));
    ScaleInPlace(DataType::kInt64, g64.data(), static_cast<int64_t>(g64.size()), Scale(1.0, n));
    for (size_t i = 0; i < i32.size(); ++i) {
      ASSERT_EQ(g32[i], i32[i] / n) << i32[i] << " / " << n;
      ASSERT_EQ(g64[i], i64[i] / n) << i64[i] << " / " << n;
    }
  }
}

TEST(ScaleInPlaceTest, IdentityAndBoolAreLeftAlone) {
  std::vector<float> f = {1.0f / 3.0f};
  ScaleInPlace(DataType::kFloat32, f.data(), 1, Scale());
  EXPECT_EQ(f[0], 1.0f / 3.0f);
  std::vector<uint8_t> b = {1, 0};
  ScaleInPlace(DataType::kBool, b.data(), 2, Scale(0.5, 3));
  EXPECT_EQ(b, (std::vector<uint8_t>{1, 0}));
}

}  // namespace
}  // namespace hvx
