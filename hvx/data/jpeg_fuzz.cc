// Fuzz target: a JPEG record as a dataset may hold it, through the header read and the decode the
// ImageNet pipeline uses (jpeg.h), with limits small enough to keep each input fast. The first
// byte picks the scale. A decoded image has the header's size at that scale and exactly its pixels.
#include <string>
#include <vector>

#include "hvx/data/jpeg.h"
#include "hvx/data/test_util.h"
#include "hvx/testing/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hvx::data;
  if (size == 0) return 0;
  const int scale = 1 << (data[0] & 3);
  const absl::string_view jpeg = hvx::fuzz::AsText(data + 1, size - 1);
  const absl::StatusOr<JpegInfo> info = ReadJpegHeader(jpeg);
  JpegLimits limits;
  limits.max_pixels = int64_t{1} << 20;
  RgbImage image;
  const absl::Status decoded = DecodeJpeg(jpeg, scale, limits, &image);
  if (!decoded.ok()) return 0;
  HVX_FUZZ_CHECK(info.ok(), "an image decodes whose header does not read");
  HVX_FUZZ_CHECK(image.width == (info->width + scale - 1) / scale &&
                     image.height == (info->height + scale - 1) / scale,
                 "a decoded image does not have the header's size at its scale");
  HVX_FUZZ_CHECK(image.pixels.size() == static_cast<size_t>(image.width) * image.height * 3,
                 "a decoded image's pixels do not fill it exactly");
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using namespace hvx::data;
  std::vector<std::string> seeds;
  const int sizes[][2] = {{32, 24}, {17, 9}, {8, 64}};
  for (int k = 0; k < 3; ++k) {
    const RgbImage photo = SyntheticPhoto(sizes[k][0], sizes[k][1], k + 1);
    const absl::StatusOr<std::string> jpeg = EncodeJpeg(photo, k == 0 ? 90 : 50);
    if (jpeg.ok()) seeds.push_back(std::string(1, static_cast<char>(k)) + *jpeg);
  }
  return seeds;
}
