// The GPU JPEG decoder: on a GPU, its samples against ImageNetDecoder's (the same crop and flip,
// values within nvJPEG's IDCT rounding); without one, the reason it gives.
#include "hvx/data/gpu_jpeg.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/data/jpeg.h"
#include "hvx/data/test_util.h"

namespace hvx {
namespace data {
namespace {

bool Contains(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST(GpuJpegTest, WithoutAGpuDecoderTheReasonIsGiven) {
  auto made = MakeGpuJpegDecoder(ImageNetDecoderOptions::Train(), 0);
  if (made.ok()) GTEST_SKIP() << "this machine has a GPU: " << GpuJpegBuild();
  EXPECT_TRUE(absl::IsUnavailable(made.status())) << made.status();
#ifdef HVX_GPU_JPEG_EXPECTED
  // A --config=cuda build compiles nvJPEG in; here only the library or the device is missing.
  EXPECT_EQ(GpuJpegBuild().rfind("nvJPEG ", 0), 0u) << GpuJpegBuild();
  EXPECT_TRUE(Contains(made.status(), "no CUDA device") ||
              Contains(made.status(), "nvJPEG does not load"))
      << made.status();
#else
  EXPECT_TRUE(Contains(made.status(), "--config=cuda")) << made.status();
  EXPECT_EQ(GpuJpegBuild(), std::string(made.status().message()));
#endif
}

struct Case {
  bool train;
  DataType dtype;
  bool channels_last;
};

TEST(GpuJpegTest, SamplesAreTheCpuDecodersWithinIdctRounding) {
  if (auto made = MakeGpuJpegDecoder(ImageNetDecoderOptions::Train(), 0); !made.ok()) {
    GTEST_SKIP() << made.status().message();
  }
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{500, 375}, {333, 517}}) {
    auto jpeg = EncodeJpeg(SyntheticPhoto(w, h, w), 90);
    ASSERT_TRUE(jpeg.ok());
    for (const Case& c : {Case{true, DataType::kUint8, false}, Case{false, DataType::kUint8, true},
                          Case{true, DataType::kFloat32, true}}) {
      ImageNetDecoderOptions o =
          c.train ? ImageNetDecoderOptions::Train() : ImageNetDecoderOptions::Eval();
      o.dtype = c.dtype;
      o.channels_last = c.channels_last;
      o.scaled_decode = false;  // nvJPEG decodes at full size
      ImageNetDecoder cpu(o);
      auto gpu = MakeGpuJpegDecoder(o, 0);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      const size_t n = 3 * 224 * 224, width = c.dtype == DataType::kUint8 ? 1 : 4;
      std::vector<uint8_t> a(n * width), b(n * width);
      for (int64_t id = 0; id < (c.train ? 8 : 1); ++id) {
        SCOPED_TRACE(absl::StrCat(w, "x", h, c.train ? " train" : " eval", " sample ", id));
        ASSERT_TRUE(cpu.DecodeImage(*jpeg, {3, 1, id}, a.data()).ok());
        ASSERT_TRUE((*gpu)->DecodeImage(*jpeg, {3, 1, id}, b.data()).ok());
        // Differences in levels of 255: a different crop or flip would be tens of levels.
        double sum = 0, worst = 0;
        for (size_t i = 0; i < n; ++i) {
          double d;
          if (width == 1) {
            d = std::abs(static_cast<int>(a[i]) - b[i]);
          } else {
            // Normalised values: back to levels through the smallest stddev.
            d = std::abs(reinterpret_cast<float*>(a.data())[i] -
                         reinterpret_cast<float*>(b.data())[i]) *
                255 * 0.224;
          }
          sum += d;
          worst = std::max(worst, d);
        }
        EXPECT_LT(sum / n, 1.0);
        EXPECT_LT(worst, 24.0);
      }
    }
  }
}

TEST(GpuJpegTest, ThreadsDecodingAtOnceGetWhatOneThreadGets) {
  auto made = MakeGpuJpegDecoder(ImageNetDecoderOptions::Train(), 0);
  if (!made.ok()) GTEST_SKIP() << made.status().message();
  const ImageNetDecoder& gpu = **made;
  std::vector<std::string> jpegs;
  for (int i = 0; i < 4; ++i)
    jpegs.push_back(*EncodeJpeg(SyntheticPhoto(400 + 37 * i, 300, i), 85));
  const size_t n = 3 * 224 * 224;
  std::vector<std::vector<float>> serial(16, std::vector<float>(n)), parallel = serial;
  for (int s = 0; s < 16; ++s)
    ASSERT_TRUE(gpu.DecodeImage(jpegs[s % 4], {1, 0, s}, serial[s].data()).ok());
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(16);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int s = t; s < 16; s += 4)
        status[s] = gpu.DecodeImage(jpegs[s % 4], {1, 0, s}, parallel[s].data());
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < 16; ++s) {
    ASSERT_TRUE(status[s].ok()) << status[s];
    EXPECT_EQ(serial[s], parallel[s]) << "sample " << s;
  }
}

TEST(GpuJpegTest, BadImagesAreErrorsNamingTheProblem) {
  auto made = MakeGpuJpegDecoder(ImageNetDecoderOptions::Train(), 0);
  if (!made.ok()) GTEST_SKIP() << made.status().message();
  std::vector<float> out(3 * 224 * 224);
  absl::Status s = (*made)->DecodeImage("not a jpeg at all", {}, out.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  // The header's size is checked against the limits before anything is decoded.
  ImageNetDecoderOptions o = ImageNetDecoderOptions::Train();
  o.limits.max_pixels = 1000;
  auto small = MakeGpuJpegDecoder(o, 0);
  ASSERT_TRUE(small.ok()) << small.status();
  s = (*small)->DecodeImage(*EncodeJpeg(SyntheticPhoto(64, 64, 1), 90), {}, out.data());
  EXPECT_TRUE(Contains(s, "more than the limit of 1000")) << s;
}

}  // namespace
}  // namespace data
}  // namespace hvx
