#include "hvx/data/example_decoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hvx/data/example.h"

namespace hvx {
namespace data {
namespace {

std::vector<float> DecodeOrDie(const ExampleDecoder& d, const Example& e, int64_t* label) {
  std::vector<float> out(static_cast<size_t>(d.sample_shape().num_elements()));
  absl::Status s = d.Decode(SerializeExample(e), {1, 0, 7}, out.data(), label);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::shared_ptr<const ExampleDecoder> Make(ExampleInputSpec in, std::string label = "label") {
  auto d = ExampleDecoder::Create({std::move(in), std::move(label)});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : nullptr;
}

TEST(ExampleDecoderTest, FloatListWithPerChannelNormalisation) {
  ExampleInputSpec in;
  in.key = "x";
  in.kind = FeatureKind::kFloatList;
  in.shape = {2, 3};
  in.mean = {1, 0};
  in.stddev = {2, 1};
  auto d = Make(in);
  EXPECT_EQ(d->sample_shape().dims(), (std::vector<int64_t>{2, 3}));
  Example e;
  SetFloatList(&e, "x", std::vector<float>{1, 3, 5, 1, 2, 3});
  SetInt64(&e, "label", 4);
  int64_t label = 0;
  EXPECT_EQ(DecodeOrDie(*d, e, &label), (std::vector<float>{0, 1, 2, 1, 2, 3}));
  EXPECT_EQ(label, 4);
}

TEST(ExampleDecoderTest, Int64ListAndBytesOfFloat32) {
  ExampleInputSpec in;
  in.key = "x";
  in.kind = FeatureKind::kInt64List;
  in.shape = {4};
  in.divide_by = 2;
  Example e;
  SetInt64List(&e, "x", std::vector<int64_t>{2, 4, -6, 8});
  SetInt64(&e, "label", 0);
  int64_t label;
  EXPECT_EQ(DecodeOrDie(*Make(in), e, &label), (std::vector<float>{1, 2, -3, 4}));

  in.kind = FeatureKind::kBytes;
  in.bytes_dtype = DataType::kFloat32;
  in.divide_by = 1;
  const float values[4] = {0.5f, -1.25f, 3.0f, 1e-3f};
  SetBytes(&e, "x", absl::string_view(reinterpret_cast<const char*>(values), sizeof(values)));
  EXPECT_EQ(DecodeOrDie(*Make(in), e, &label), (std::vector<float>{0.5f, -1.25f, 3.0f, 1e-3f}));
}

TEST(ExampleDecoderTest, ChannelsLastBytesComeOutChannelsFirst) {
  ExampleInputSpec in;
  in.key = "img";
  in.kind = FeatureKind::kBytes;
  in.shape = {3, 1, 2};  // C, H, W; stored H, W, C
  in.channels_last_stored = true;
  Example e;
  const uint8_t hwc[6] = {10, 20, 30, 11, 21, 31};  // pixel 0: RGB 10 20 30, pixel 1: 11 21 31
  SetBytes(&e, "img", absl::string_view(reinterpret_cast<const char*>(hwc), 6));
  SetInt64(&e, "label", 1);
  int64_t label;
  EXPECT_EQ(DecodeOrDie(*Make(in), e, &label), (std::vector<float>{10, 11, 20, 21, 30, 31}));
}

TEST(ExampleDecoderTest, FashionMnistSpecDecodesExactlyAsTheRawImageDecoder) {
  RawImageDecoderOptions raw;
  raw.dtype = DataType::kFloat32;
  raw.mean = {0.2860f};
  raw.stddev = {0.3530f};
  RawImageDecoder reference(raw);
  ExampleInputSpec in;
  in.key = "image/raw";
  in.kind = FeatureKind::kBytes;
  in.shape = {1, 28, 28};
  in.divide_by = 255;
  in.mean = {0.2860f};
  in.stddev = {0.3530f};
  auto d = Make(in, "image/class/label");
  Example e;
  std::string pixels(28 * 28, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>((i * 37) % 256);
  SetBytes(&e, "image/raw", pixels);
  SetInt64(&e, "image/class/label", 3);
  std::vector<float> want(28 * 28);
  int64_t want_label = 0, label = 0;
  ASSERT_TRUE(reference.Decode(SerializeExample(e), {}, want.data(), &want_label).ok());
  const std::vector<float> got = DecodeOrDie(*d, e, &label);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ(label, want_label);
}

TEST(ExampleDecoderTest, JpegKindIsTheImageNetTransform) {
  RgbImage image;
  image.width = 48;
  image.height = 40;
  image.pixels.resize(48 * 40 * 3);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = (i * 13) % 251;
  auto jpeg = EncodeJpeg(image, 90);
  ASSERT_TRUE(jpeg.ok());
  ImageNetDecoderOptions eval = ImageNetDecoderOptions::Eval();
  eval.out_size = 32;
  eval.resize_shorter = 36;
  ImageNetDecoder reference(eval);
  ExampleInputSpec in;
  in.key = "jpg";
  in.kind = FeatureKind::kJpeg;
  in.jpeg = eval;
  auto d = Make(in);
  EXPECT_EQ(d->sample_shape().dims(), (std::vector<int64_t>{3, 32, 32}));
  Example e;
  SetBytes(&e, "jpg", *jpeg);
  SetInt64(&e, "label", 2);
  std::vector<float> want(3 * 32 * 32);
  ASSERT_TRUE(reference.DecodeImage(*jpeg, {1, 0, 7}, want.data()).ok());
  int64_t label;
  EXPECT_EQ(DecodeOrDie(*d, e, &label), want);
  EXPECT_EQ(label, 2);
}

TEST(ExampleDecoderTest, RecordsThatDoNotMatchNameTheFeatureAndWhatWasExpected) {
  ExampleInputSpec in;
  in.key = "x";
  in.kind = FeatureKind::kFloatList;
  in.shape = {1, 28, 28};
  auto d = Make(in);
  std::vector<float> out(784);
  int64_t label;
  auto decode = [&](const Example& e) {
    return std::string(d->Decode(SerializeExample(e), {}, out.data(), &label).message());
  };
  Example e;
  SetInt64(&e, "label", 1);
  SetFloatList(&e, "x", std::vector<float>(700, 0.f));
  EXPECT_EQ(decode(e),
            "feature 'x' has 700 float values, expected 784 for the input shape "
            "[1, 28, 28]");
  SetInt64List(&e, "x", std::vector<int64_t>(784, 0));
  EXPECT_EQ(decode(e), "feature 'x' is int64_list, expected float_list");
  Example no_label;
  SetFloatList(&no_label, "x", std::vector<float>(784, 0.f));
  EXPECT_EQ(decode(no_label), "feature 'label' is missing (the example has: x)");
}

TEST(ExampleDecoderTest, SpecsThatCannotWorkAreRefused) {
  auto message = [](ExampleInputSpec in) {
    return std::string(ExampleDecoder::Create({std::move(in), "label"}).status().message());
  };
  ExampleInputSpec in;
  in.key = "x";
  in.kind = FeatureKind::kFloatList;
  EXPECT_EQ(message(in),
            "input feature 'x': give the shape of one sample's input, e.g. [1, 28, 28]");
  in.shape = {3, 0};
  EXPECT_EQ(message(in), "input feature 'x': shape [3, 0] has a dimension < 1");
  in.shape = {3, 4};
  in.mean = {0, 0};
  EXPECT_EQ(message(in),
            "input feature 'x': mean and stddev need 1 or 3 values (the first dimension of the "
            "shape), got 2");
  in.mean = {0};
  in.channels_last_stored = true;
  EXPECT_EQ(message(in),
            "input feature 'x': channels_last_stored needs a [C, H, W] shape, got [3, 4]");
  in.channels_last_stored = false;
  in.stddev = {0};
  EXPECT_EQ(message(in), "input feature 'x': stddev must not be 0");
  in.key = "";
  EXPECT_EQ(message(in), "input feature: no key given");
}

}  // namespace
}  // namespace data
}  // namespace hvx
