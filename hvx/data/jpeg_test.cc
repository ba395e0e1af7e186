// JPEG decode, augmentation shapes and determinism.
#include "hvx/data/jpeg.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/data/example.h"

namespace hvx {
namespace data {
namespace {

// A smooth colour gradient: left half red-ish, right half blue-ish, so flips are visible.
RgbImage Gradient(int w, int h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.pixels[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(255 * (w - 1 - x) / (w - 1));
      p[1] = static_cast<uint8_t>(255 * y / (h - 1));
      p[2] = static_cast<uint8_t>(255 * x / (w - 1));
    }
  }
  return img;
}

std::string Record(const std::string& jpeg, int64_t label) {
  Example e;
  SetBytes(&e, "image/encoded", jpeg);
  SetInt64(&e, "image/class/label", label);
  return e.SerializeAsString();
}

TEST(JpegTest, DecodesAtFullAndReducedScale) {
  RgbImage src = Gradient(500, 375);
  auto jpeg = EncodeJpeg(src, 95);
  ASSERT_TRUE(jpeg.ok());
  auto info = ReadJpegHeader(*jpeg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->width, 500);
  EXPECT_EQ(info->height, 375);
  RgbImage full;
  ASSERT_TRUE(DecodeJpeg(*jpeg, 1, &full).ok());
  ASSERT_EQ(full.pixels.size(), 500u * 375 * 3);
  double err = 0;
  for (size_t i = 0; i < full.pixels.size(); ++i) err += std::abs(full.pixels[i] - src.pixels[i]);
  EXPECT_LT(err / full.pixels.size(), 3.0);
  RgbImage quarter;
  ASSERT_TRUE(DecodeJpeg(*jpeg, 4, &quarter).ok());
  EXPECT_EQ(quarter.width, 125);
  EXPECT_EQ(quarter.height, 94);
  EXPECT_EQ(DecodeJpeg(*jpeg, 3, &quarter).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JpegTest, NotAJpegIsAnErrorNamingTheProblem) {
  auto info = ReadJpegHeader("\x89PNG\r\n\x1a\n not a jpeg");
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("not a readable JPEG"), std::string::npos);
  ImageNetDecoder decoder(ImageNetDecoderOptions::Eval());
  std::vector<float> out(3 * 224 * 224);
  int64_t label;
  absl::Status s = decoder.Decode(Record("garbage", 5), {}, out.data(), &label);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Example no_image;
  SetInt64(&no_image, "image/class/label", 1);
  s = decoder.Decode(no_image.SerializeAsString(), {}, out.data(), &label);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("feature 'image/encoded' is missing"), std::string::npos) << s;
}

TEST(JpegTest, RandomResizedCropStaysInRange) {
  SampleRng rng(11);
  for (int i = 0; i < 2000; ++i) {
    const int w = 50 + static_cast<int>(rng.Below(900)), h = 50 + static_cast<int>(rng.Below(900));
    CropWindow c = RandomResizedCropWindow(w, h, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &rng);
    ASSERT_GE(c.x, 0);
    ASSERT_GE(c.y, 0);
    ASSERT_GT(c.width, 0);
    ASSERT_GT(c.height, 0);
    ASSERT_LE(c.x + c.width, w);
    ASSERT_LE(c.y + c.height, h);
    const double area = static_cast<double>(c.width) * c.height / (static_cast<double>(w) * h);
    const double ratio = static_cast<double>(c.width) / c.height;
    // Rounding to whole pixels moves area and ratio slightly past the sampled ranges.
    EXPECT_GT(area, 0.06);
    EXPECT_GT(ratio, 0.70);
    EXPECT_LT(ratio, 1.40);
  }
  // A very wide image falls back to a centre crop clamped to ratio 4/3.
  SampleRng r2(1);
  CropWindow wide = RandomResizedCropWindow(1000, 10, 0.9, 1.0, 3.0 / 4, 4.0 / 3, &r2);
  EXPECT_EQ(wide, (CropWindow{493, 0, 13, 10}));
}

TEST(JpegTest, EvalCropIsTheCentreAfterResizingTo256) {
  EXPECT_EQ(CenterCropWindow(256, 256, 224, 256), (CropWindow{16, 16, 224, 224}));
  EXPECT_EQ(CenterCropWindow(500, 375, 224, 256), (CropWindow{86, 23, 328, 328}));
  EXPECT_EQ(CenterCropWindow(375, 500, 224, 256), (CropWindow{23, 86, 328, 328}));
}

TEST(JpegTest, TrainAugmentationShapesAndDeterminism) {
  auto jpeg = EncodeJpeg(Gradient(500, 375), 90);
  ASSERT_TRUE(jpeg.ok());
  const std::string record = Record(*jpeg, 17);
  ImageNetDecoder train(ImageNetDecoderOptions::Train());
  EXPECT_EQ(train.sample_shape(), TensorShape({3, 224, 224}));
  EXPECT_EQ(train.dtype(), DataType::kFloat32);
  const size_t n = 3 * 224 * 224;
  std::vector<float> a(n), b(n), c(n);
  int64_t label = 0;
  ASSERT_TRUE(train.Decode(record, {7, 2, 1234}, a.data(), &label).ok());
  EXPECT_EQ(label, 16);  // stored 1-based
  ASSERT_TRUE(train.Decode(record, {7, 2, 1234}, b.data(), &label).ok());
  EXPECT_EQ(a, b) << "same (seed, epoch, id) must give the same bytes";
  ASSERT_TRUE(train.Decode(record, {7, 3, 1234}, c.data(), &label).ok());
  EXPECT_NE(a, c) << "another epoch draws another crop";
  // Normalised range: (0/255 - 0.485)/0.229 = -2.118 ... (1 - 0.406)/0.225 = 2.64.
  for (float v : a) {
    ASSERT_GE(v, -2.2f);
    ASSERT_LE(v, 2.7f);
  }
  // Over many ids about half are flipped: the red channel decreases left to right unflipped.
  int flipped = 0;
  for (int id = 0; id < 60; ++id) {
    ASSERT_TRUE(train.Decode(record, {7, 0, id}, a.data(), &label).ok());
    const float left = a[112 * 224 + 5], right = a[112 * 224 + 218];
    if (left < right) ++flipped;
  }
  EXPECT_GT(flipped, 15);
  EXPECT_LT(flipped, 45);
}

TEST(JpegTest, EvalIsDeterministicAndUnflipped) {
  auto jpeg = EncodeJpeg(Gradient(300, 400), 90);
  ASSERT_TRUE(jpeg.ok());
  ImageNetDecoderOptions o = ImageNetDecoderOptions::Eval();
  o.dtype = DataType::kUint8;
  ImageNetDecoder eval(o);
  std::vector<uint8_t> a(3 * 224 * 224), b(3 * 224 * 224);
  int64_t label;
  ASSERT_TRUE(eval.Decode(Record(*jpeg, 1), {1, 0, 5}, a.data(), &label).ok());
  ASSERT_TRUE(eval.Decode(Record(*jpeg, 1), {99, 9, 6}, b.data(), &label).ok());
  EXPECT_EQ(a, b) << "evaluation has no randomness";
  EXPECT_EQ(label, 0);
  // Centre crop of 300 wide: columns 19..281 of the source, so red runs from ~238 down to ~17.
  EXPECT_NEAR(a[112 * 224 + 0], 255.0 * (299 - 19.6) / 299, 6);
  EXPECT_NEAR(a[112 * 224 + 223], 255.0 * (299 - 279.4) / 299, 6);
}

TEST(JpegTest, ScaledDecodeGivesNearlyTheSameImage) {
  auto jpeg = EncodeJpeg(Gradient(1200, 1000), 90);
  ASSERT_TRUE(jpeg.ok());
  ImageNetDecoderOptions o = ImageNetDecoderOptions::Eval();
  o.dtype = DataType::kUint8;
  ImageNetDecoder scaled(o);
  o.scaled_decode = false;
  ImageNetDecoder full(o);
  std::vector<uint8_t> a(3 * 224 * 224), b(3 * 224 * 224);
  int64_t label;
  ASSERT_TRUE(scaled.Decode(Record(*jpeg, 1), {}, a.data(), &label).ok());
  ASSERT_TRUE(full.Decode(Record(*jpeg, 1), {}, b.data(), &label).ok());
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err += std::abs(a[i] - b[i]);
  EXPECT_LT(err / a.size(), 3.0);
}

}  // namespace
}  // namespace data
}  // namespace hvx
