// JPEG decode, augmentation shapes and determinism.
#include "hvx/data/jpeg.h"

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/data/dataset.h"
#include "hvx/data/example.h"
#include "hvx/data/pipeline.h"
#include "hvx/data/record.h"
#include "hvx/data/test_util.h"

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

// Offset of the first marker `code` (0xC0: SOF0, 0xDA: SOS) in `jpeg`, walking the marker
// segments from SOI; npos when absent.
size_t FindMarker(const std::string& jpeg, uint8_t code) {
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && static_cast<uint8_t>(jpeg[pos]) == 0xff) {
    if (static_cast<uint8_t>(jpeg[pos + 1]) == code) return pos;
    const size_t length =
        static_cast<uint8_t>(jpeg[pos + 2]) << 8 | static_cast<uint8_t>(jpeg[pos + 3]);
    pos += 2 + length;
  }
  return std::string::npos;
}

// `jpeg` with its SOF0 header edited to claim width x height (the entropy-coded data unchanged).
std::string ClaimSize(std::string jpeg, int width, int height) {
  const size_t sof = FindMarker(jpeg, 0xc0);
  EXPECT_NE(sof, std::string::npos);
  if (sof == std::string::npos) return jpeg;
  // FF C0, length (2), precision (1), height (2), width (2), all big-endian.
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xff);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xff);
  return jpeg;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
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
  ASSERT_TRUE(DecodeJpeg(*jpeg, 1, JpegLimits(), &full).ok());
  ASSERT_EQ(full.pixels.size(), 500u * 375 * 3);
  double err = 0;
  for (size_t i = 0; i < full.pixels.size(); ++i) err += std::abs(full.pixels[i] - src.pixels[i]);
  EXPECT_LT(err / full.pixels.size(), 3.0);
  RgbImage quarter;
  ASSERT_TRUE(DecodeJpeg(*jpeg, 4, JpegLimits(), &quarter).ok());
  EXPECT_EQ(quarter.width, 125);
  EXPECT_EQ(quarter.height, 94);
  EXPECT_EQ(DecodeJpeg(*jpeg, 3, JpegLimits(), &quarter).code(),
            absl::StatusCode::kInvalidArgument);
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

// A progressive JPEG of `image` in the scans libjpeg's default progression writes (10), or, with
// `one_coefficient_per_scan`, in 190: the DC of all components, then every AC coefficient of
// every component in a scan of its own, each a valid refinement of the image.
std::string ProgressiveJpeg(const RgbImage& image, bool one_coefficient_per_scan) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_simple_progression(&cinfo);
  std::vector<jpeg_scan_info> scans;
  if (one_coefficient_per_scan) {
    scans.push_back({3, {0, 1, 2, 0}, 0, 0, 0, 0});
    for (int c = 0; c < 3; ++c) {
      for (int k = 1; k < 64; ++k) scans.push_back({1, {c, 0, 0, 0}, k, k, 0, 0});
    }
    cinfo.scan_info = scans.data();
    cinfo.num_scans = static_cast<int>(scans.size());
  }
  jpeg_start_compress(&cinfo, TRUE);
  const int stride = image.width * 3;
  for (int y = 0; y < image.height; ++y) {
    JSAMPROW row = const_cast<uint8_t*>(image.pixels.data()) + static_cast<size_t>(y) * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buf), size);
  free(buf);
  return out;
}

// A progressive image that refines in thousands of scans costs minutes per decode (a "scan
// bomb" fits in a few KiB and passes the pixel checks); one sample stalled its rank every epoch.
// Past JpegLimits::max_scans the decode fails, naming the limit; images as encoders write them
// decode as before, and the limit is a knob.
TEST(JpegTest, AnImageWithMoreScansThanTheLimitIsRefused) {
  const RgbImage src = Gradient(64, 48);
  const std::string usual = ProgressiveJpeg(src, false);
  const std::string many = ProgressiveJpeg(src, true);
  RgbImage image;
  absl::Status s = DecodeJpeg(usual, 1, JpegLimits(), &image);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(image.width, 64);

  s = DecodeJpeg(many, 1, JpegLimits(), &image);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "the image has more than 100 scans")) << s;
  EXPECT_TRUE(Contains(s, "JpegLimits::max_scans")) << s;

  // The trainer's path, which decodes a window of the image.
  ImageNetDecoder train(ImageNetDecoderOptions::Train());
  std::vector<float> out(3 * 224 * 224);
  int64_t label;
  s = train.Decode(Record(many, 1), {1, 0, 0}, out.data(), &label);
  EXPECT_TRUE(Contains(s, "the image has more than 100 scans")) << s;
  ASSERT_TRUE(train.Decode(Record(usual, 1), {1, 0, 0}, out.data(), &label).ok());

  // Raised (or off), the same image decodes to the pixels of the usual progression's.
  RgbImage usual_pixels;
  ASSERT_TRUE(DecodeJpeg(usual, 1, JpegLimits(), &usual_pixels).ok());
  for (int limit : {190, 0}) {
    JpegLimits loose;
    loose.max_scans = limit;
    s = DecodeJpeg(many, 1, loose, &image);
    ASSERT_TRUE(s.ok()) << limit << ": " << s;
    ASSERT_EQ(image.pixels.size(), usual_pixels.pixels.size());
    int most = 0;
    for (size_t i = 0; i < image.pixels.size(); ++i) {
      most = std::max(most, std::abs(image.pixels[i] - usual_pixels.pixels[i]));
    }
    EXPECT_LE(most, 2) << limit;
  }
  JpegLimits tight;
  tight.max_scans = 189;
  EXPECT_TRUE(Contains(DecodeJpeg(many, 1, tight, &image), "more than 189 scans"));
}

// A stored label near int64's ends with the label offset wrapped (undefined behaviour; UBSan
// builds aborted): it is refused, naming both.
TEST(JpegTest, ALabelThatWrapsWithTheOffsetIsRefused) {
  auto jpeg = EncodeJpeg(Gradient(64, 48), 90);
  ASSERT_TRUE(jpeg.ok());
  ImageNetDecoderOptions options = ImageNetDecoderOptions::Eval();
  options.label_offset = -1;
  ImageNetDecoder decoder(options);
  std::vector<float> out(3 * 224 * 224);
  int64_t label = 0;
  absl::Status s = decoder.Decode(Record(*jpeg, INT64_MIN), {}, out.data(), &label);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "label -9223372036854775808 plus the label offset -1 is out of int64"))
      << s;
  ASSERT_TRUE(decoder.Decode(Record(*jpeg, 1), {}, out.data(), &label).ok());
  EXPECT_EQ(label, 0);
}

// A header edited to claim 60000x60000 over the data of a 64x48 image used to be decoded as a gray
// 7500x7500 image (at 1/8 scale), after allocating for it.
TEST(JpegTest, HeaderClaimingMorePixelsThanTheLimitIsRefusedBeforeAllocating) {
  auto small = EncodeJpeg(Gradient(64, 48), 90);
  ASSERT_TRUE(small.ok());
  const std::string forged = ClaimSize(*small, 60000, 60000);
  auto info = ReadJpegHeader(forged);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 60000);
  RgbImage image;
  absl::Status s = DecodeJpeg(forged, 8, JpegLimits(), &image);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "JPEG header claims 60000x60000 pixels, more than the limit of 67108864"))
      << s;
  EXPECT_EQ(image.pixels.capacity(), 0u) << "nothing may be allocated for a refused image";

  ImageNetDecoder train(ImageNetDecoderOptions::Train());
  std::vector<float> out(3 * 224 * 224);
  int64_t label;
  s = train.Decode(Record(forged, 1), {1, 0, 0}, out.data(), &label);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "claims 60000x60000 pixels")) << s;

  // The limit is a knob: an image over it is refused with the limit named.
  JpegLimits tight;
  tight.max_pixels = 64 * 48 - 1;
  s = DecodeJpeg(*small, 1, tight, &image);
  EXPECT_TRUE(Contains(s, "JPEG header claims 64x48 pixels, more than the limit of 3071")) << s;
  tight.max_pixels = 64 * 48;
  EXPECT_TRUE(DecodeJpeg(*small, 1, tight, &image).ok());
}

// Under the pixel limit, a header can still claim far more pixels than its data can hold.
TEST(JpegTest, HeaderClaimingMorePixelsThanTheDataCanHoldIsRefused) {
  auto small = EncodeJpeg(Gradient(64, 48), 90);
  ASSERT_TRUE(small.ok());
  const std::string forged = ClaimSize(*small, 4000, 3000);
  RgbImage image;
  absl::Status s = DecodeJpeg(forged, 1, JpegLimits(), &image);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(
      Contains(s, absl::StrCat("JPEG header claims 4000x3000 pixels but the image has only ",
                               forged.size(), " bytes")))
      << s;
  EXPECT_EQ(image.pixels.capacity(), 0u);
  // The flattest real image, one colour everywhere, is far above the bound.
  RgbImage flat;
  flat.width = 2048;
  flat.height = 2048;
  flat.pixels.assign(size_t{2048} * 2048 * 3, 128);
  auto flat_jpeg = EncodeJpeg(flat, 50);
  ASSERT_TRUE(flat_jpeg.ok());
  EXPECT_LT(flat_jpeg->size(), size_t{2048} * 2048 / 32) << "the test needs a very flat image";
  s = DecodeJpeg(*flat_jpeg, 1, JpegLimits(), &image);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(image.width, 2048);
}

// libjpeg reports a truncated image as a warning and fills the missing rows with gray.
TEST(JpegTest, TruncatedJpegIsAnError) {
  auto jpeg = EncodeJpeg(Gradient(500, 375), 90);
  ASSERT_TRUE(jpeg.ok());
  const size_t scan = FindMarker(*jpeg, 0xda);
  ASSERT_NE(scan, std::string::npos);
  for (size_t cut : {scan + 20, jpeg->size() / 2, jpeg->size() - 100, jpeg->size() - 2}) {
    SCOPED_TRACE(cut);
    const std::string truncated = jpeg->substr(0, cut);
    RgbImage image;
    absl::Status s = DecodeJpeg(truncated, 1, JpegLimits(), &image);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(Contains(s, absl::StrCat("truncated JPEG (", cut, "-byte image"))) << s;
    ImageNetDecoder eval(ImageNetDecoderOptions::Eval());
    std::vector<float> out(3 * 224 * 224);
    int64_t label;
    s = eval.Decode(Record(truncated, 1), {}, out.data(), &label);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(Contains(s, "truncated JPEG")) << s;
  }
  // Cut inside the header: not even the size can be read.
  EXPECT_TRUE(Contains(ReadJpegHeader(jpeg->substr(0, scan / 2)).status(), "truncated JPEG"));
}

// Damaged entropy-coded data is an error; harmless oddities (bytes between marker segments, which
// many cameras write) are not.
TEST(JpegTest, CorruptJpegDataIsAnErrorButExtraneousBytesAreNot) {
  auto jpeg = EncodeJpeg(Gradient(500, 375), 90);
  ASSERT_TRUE(jpeg.ok());
  const size_t scan = FindMarker(*jpeg, 0xda);
  ASSERT_NE(scan, std::string::npos);
  // An end-of-image marker in the middle of the scan: the rest of the image is missing.
  std::string cut_scan = *jpeg;
  cut_scan[cut_scan.size() / 2] = static_cast<char>(0xff);
  cut_scan[cut_scan.size() / 2 + 1] = static_cast<char>(0xd9);
  RgbImage image;
  absl::Status s = DecodeJpeg(cut_scan, 1, JpegLimits(), &image);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "corrupt JPEG")) << s;
  EXPECT_TRUE(Contains(s, "premature end of data segment")) << s;

  // Sixteen 1 bits are no Huffman code, and 48 (six stuffed 0xFF bytes) hold sixteen after the
  // start of whatever code they interrupt (a code and its extra bits take at most 27). libjpeg-
  // turbo's fast path decodes a bad code as 0 without a word, so what it reports is the scan data
  // ending before the scan, the decoder having lost its place.
  std::string bad_code = *jpeg;
  size_t at = (scan + bad_code.size()) / 2;
  while (static_cast<uint8_t>(bad_code[at - 1]) == 0xff) ++at;
  bad_code.replace(at, 12,
                   std::string("\xff\x00", 2) + std::string("\xff\x00", 2) +
                       std::string("\xff\x00", 2) + std::string("\xff\x00", 2) +
                       std::string("\xff\x00", 2) + std::string("\xff\x00", 2));
  s = DecodeJpeg(bad_code, 1, JpegLimits(), &image);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "corrupt JPEG (")) << s;

  RgbImage clean;
  ASSERT_TRUE(DecodeJpeg(*jpeg, 1, JpegLimits(), &clean).ok());
  std::string extraneous = *jpeg;
  extraneous.insert(scan, "\x01\x02\x03");
  s = DecodeJpeg(extraneous, 1, JpegLimits(), &image);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(image.pixels, clean.pixels);
}

// A bad image in a training set goes the way of any decode error: Next() returns it, naming the
// rank, the file, the record's offset and the sample.
TEST(JpegTest, BadImagesReachTheConsumerNamingFileAndOffset) {
  auto good = EncodeJpeg(Gradient(300, 200), 90);
  ASSERT_TRUE(good.ok());
  auto small = EncodeJpeg(Gradient(64, 48), 90);
  ASSERT_TRUE(small.ok());
  std::string cut_scan = *good;
  cut_scan[cut_scan.size() / 2] = static_cast<char>(0xff);
  cut_scan[cut_scan.size() / 2 + 1] = static_cast<char>(0xd9);
  const struct {
    const char* name;
    std::string jpeg;
    const char* reason;
  } cases[] = {
      {"forged", ClaimSize(*small, 60000, 60000), "JPEG header claims 60000x60000 pixels"},
      {"truncated", good->substr(0, good->size() / 2), "truncated JPEG"},
      {"corrupt", cut_scan, "corrupt JPEG"},
  };
  const std::string dir = TempDir("jpeg_pipeline");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = absl::StrCat(dir, "/", c.name, "-00000-of-00001");
    {
      RecordWriterOptions options;
      options.write_index = true;
      auto writer = RecordWriter::Open(path, options);
      ASSERT_TRUE(writer.ok()) << writer.status();
      for (int i = 0; i < 6; ++i) {
        ASSERT_TRUE((*writer)->Write(Record(i == 3 ? c.jpeg : *good, i + 1)).ok());
      }
      ASSERT_TRUE((*writer)->Close().ok());
    }
    auto dataset = Dataset::Open({path}, {});
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    std::shared_ptr<const Dataset> shared = std::move(*dataset);
    PipelineOptions o;
    o.plan.shuffle = false;
    o.batch_size = 2;
    o.decode_threads = 2;
    o.decoder = std::make_shared<ImageNetDecoder>(ImageNetDecoderOptions::Train());
    auto p = Pipeline::Create(shared, o);
    ASSERT_TRUE(p.ok()) << p.status();
    // The batches before the bad record may or may not arrive first: an error stops the pipeline.
    absl::Status s;
    for (int batch = 0; batch < 3 && s.ok(); ++batch) s = (*p)->Next().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(Contains(
        s, absl::StrCat("rank 0: ", path, ":", shared->LocationOf(3).offset, " (sample 3)")))
        << s;
    EXPECT_TRUE(Contains(s, c.reason)) << s;
  }
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

// Decoding only the crop's rows and columns (decode_crop, the default) gives exactly the output
// of decoding the whole image, for random training crops (any position, scaled decodes included)
// and the evaluation crop, on 4:2:0 photos of awkward sizes.
TEST(JpegTest, DecodingOnlyTheCropGivesTheSameOutput) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{500, 375}, {333, 517}, {1203, 901}}) {
    auto jpeg = EncodeJpeg(SyntheticPhoto(w, h, w), 90);
    ASSERT_TRUE(jpeg.ok());
    for (bool train : {true, false}) {
      ImageNetDecoderOptions o =
          train ? ImageNetDecoderOptions::Train() : ImageNetDecoderOptions::Eval();
      ImageNetDecoder cropped(o);
      o.decode_crop = false;
      ImageNetDecoder whole(o);
      std::vector<float> a(3 * 224 * 224), b(3 * 224 * 224);
      int64_t label;
      for (int64_t id = 0; id < (train ? 40 : 1); ++id) {
        SCOPED_TRACE(absl::StrCat(w, "x", h, train ? " train" : " eval", " sample ", id));
        ASSERT_TRUE(cropped.Decode(Record(*jpeg, 1), {5, 1, id}, a.data(), &label).ok());
        ASSERT_TRUE(whole.Decode(Record(*jpeg, 1), {5, 1, id}, b.data(), &label).ok());
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
      }
    }
  }
}

TEST(JpegTest, ChannelsLastOutputHoldsTheSameValuesPixelByPixel) {
  auto jpeg = EncodeJpeg(SyntheticPhoto(500, 375, 3), 90);
  ASSERT_TRUE(jpeg.ok());
  for (bool train : {true, false}) {
    ImageNetDecoderOptions o =
        train ? ImageNetDecoderOptions::Train() : ImageNetDecoderOptions::Eval();
    ImageNetDecoder planar(o);
    o.channels_last = true;
    ImageNetDecoder hwc(o);
    EXPECT_EQ(hwc.sample_shape().dims(), (std::vector<int64_t>{224, 224, 3}));
    std::vector<float> a(3 * 224 * 224), b(3 * 224 * 224);
    int64_t label;
    ASSERT_TRUE(planar.Decode(Record(*jpeg, 1), {2, 0, 9}, a.data(), &label).ok());
    ASSERT_TRUE(hwc.Decode(Record(*jpeg, 1), {2, 0, 9}, b.data(), &label).ok());
    for (int k = 0; k < 3; ++k) {
      for (int p = 0; p < 224 * 224; p += 97) {
        ASSERT_EQ(a[k * 224 * 224 + p], b[p * 3 + k]) << "channel " << k << " pixel " << p;
      }
    }
  }
}

// ResampleOne, value by value (what the GPU decoder's kernel runs per thread), over the whole
// decoded image gives the decoder's bits.
TEST(JpegTest, ResampleOneComputesWhatTheDecoderComputes) {
  auto jpeg = EncodeJpeg(SyntheticPhoto(500, 375, 7), 90);
  ASSERT_TRUE(jpeg.ok());
  RgbImage image;
  ASSERT_TRUE(DecodeJpeg(*jpeg, 1, JpegLimits(), &image).ok());
  const JpegInfo info{image.width, image.height};
  for (bool train : {true, false}) {
    for (DataType dtype : {DataType::kFloat32, DataType::kUint8}) {
      for (bool channels_last : {false, true}) {
        ImageNetDecoderOptions o =
            train ? ImageNetDecoderOptions::Train() : ImageNetDecoderOptions::Eval();
        o.dtype = dtype;
        o.channels_last = channels_last;
        o.scaled_decode = false;
        ImageNetDecoder decoder(o);
        const size_t bytes = 3 * 224 * 224 * (dtype == DataType::kUint8 ? 1 : 4);
        std::vector<uint8_t> expected(bytes), got(bytes);
        bool flipped = false;
        for (int64_t id = 0; id < (train ? 12 : 1); ++id) {
          SCOPED_TRACE(absl::StrCat(train ? "train" : "eval", " ", DataTypeName(dtype),
                                    channels_last ? " channels_last" : "", " sample ", id));
          ASSERT_TRUE(decoder.DecodeImage(*jpeg, {11, 2, id}, expected.data()).ok());
          const ImageNetSamplePlan plan = PlanImageNetSample(o, info, {11, 2, id});
          flipped = flipped || plan.flip;
          ResampleParams p = ImageNetResampleParams(o, plan, info, image.width, image.height);
          p.image = image.pixels.data();
          p.dst = got.data();
          for (int64_t i = 0; i < ResampleCount(p); ++i) ResampleOne(p, i);
          ASSERT_EQ(std::memcmp(expected.data(), got.data(), bytes), 0);
        }
        EXPECT_EQ(flipped, train);
      }
    }
  }
}

TEST(JpegTest, SyntheticPhotoEncodesLikeAPhoto) {
  auto jpeg = EncodeJpeg(SyntheticPhoto(500, 375, 1), 90);
  ASSERT_TRUE(jpeg.ok());
  EXPECT_GT(jpeg->size(), 90000u);
  EXPECT_LT(jpeg->size(), 150000u);
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
