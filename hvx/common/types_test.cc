#include "hvx/common/types.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "hvx/common/half.h"

namespace hvx {
namespace {

TEST(DataTypeTest, SizesAndNamesRoundTrip) {
  const size_t sizes[] = {1, 1, 2, 4, 8, 2, 2, 4, 8, 1};
  int i = 0;
  for (DataType t : kAllDataTypes) {
    EXPECT_EQ(DataTypeSize(t), sizes[i++]) << DataTypeName(t);
    absl::StatusOr<DataType> parsed = ParseDataType(DataTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(DataTypeName(DataType::kBfloat16), "bfloat16");
  EXPECT_EQ(*ParseDataType("half"), DataType::kFloat16);
  EXPECT_EQ(ParseDataType("complex64").status().message(),
            "unknown data type 'complex64': expected uint8, int8, int16, int32, int64, float16, "
            "bfloat16, float32, float64 or bool");
  EXPECT_TRUE(IsFloatingPoint(DataType::kBfloat16));
  EXPECT_FALSE(IsFloatingPoint(DataType::kInt64));
}

TEST(TensorShapeTest, ElementsAndDebugString) {
  TensorShape s({2, 3, 4});
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.num_elements(), 24);
  EXPECT_EQ(s.row_elements(), 12);
  EXPECT_EQ(s.DebugString(), "[2, 3, 4]");
  EXPECT_EQ(TensorShape().num_elements(), 1);
  EXPECT_EQ(TensorShape().DebugString(), "[]");
  EXPECT_EQ(TensorShape({0, 5}).num_elements(), 0);
  EXPECT_EQ(TensorShape({2, -1}).Validate().message(), "shape [2, -1] has negative dimension 1");
  EXPECT_EQ(TensorShape({1, 2}), TensorShape({1, 2}));
  EXPECT_NE(TensorShape({1, 2}), TensorShape({2, 1}));
}

TEST(TensorRefTest, ViewDoesNotOwn) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  TensorRef t(DataType::kFloat32, TensorShape({2, 3}), data);
  EXPECT_EQ(t.num_bytes(), 24u);
  EXPECT_EQ(t.data_as<float>()[4], 5.0f);
  EXPECT_EQ(t.DebugString(), "float32[2, 3] cpu");
  TensorRef g(DataType::kFloat16, TensorShape({8}), nullptr, Device::Cuda(1));
  EXPECT_EQ(g.DebugString(), "float16[8] cuda:1");
  EXPECT_EQ(g.num_bytes(), 16u);
  EXPECT_NE(g.device(), Device::Cpu());
}

TEST(HalfTest, KnownEncodings) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.5f), 0x3e00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);               // ties to even rounds up to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(Bfloat16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(Bfloat16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(std::nanf("")))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bfloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBfloat16(f), b);
  }
}

}  // namespace
}  // namespace hvx
