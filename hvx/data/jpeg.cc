#include "hvx/data/jpeg.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/data/example.h"

namespace hvx {
namespace data {
namespace {

// One decompressor per thread: TurboJPEG handles are not thread-safe, and creating one per image
// costs more than a small image's decode.
class Handles {
 public:
  ~Handles() {
    if (decompress_) tjDestroy(decompress_);
    if (compress_) tjDestroy(compress_);
  }
  tjhandle decompress() {
    if (!decompress_) decompress_ = tjInitDecompress();
    return decompress_;
  }
  tjhandle compress() {
    if (!compress_) compress_ = tjInitCompress();
    return compress_;
  }

 private:
  tjhandle decompress_ = nullptr;
  tjhandle compress_ = nullptr;
};

Handles& ThreadHandles() {
  thread_local Handles handles;
  return handles;
}

absl::Status JpegError(tjhandle h, absl::string_view what, size_t bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " (", bytes, "-byte image): ", h ? tjGetErrorStr2(h) : "no handle"));
}

int ScaledSize(int size, int denominator) { return (size + denominator - 1) / denominator; }

// Bilinear resampling of window (x0, y0, w, h) of `img` (window in img's pixels) to out x out,
// optionally mirrored, written channels-first through `store(channel, y, x, value)`.
template <typename Store>
void ResampleWindow(const RgbImage& img, double x0, double y0, double w, double h, int out,
                    bool flip, Store store) {
  std::vector<int> xi0(out), xi1(out);
  std::vector<float> xf(out);
  const double sx = w / out, sy = h / out;
  for (int ox = 0; ox < out; ++ox) {
    double fx = x0 + (ox + 0.5) * sx - 0.5;
    fx = std::min(std::max(fx, 0.0), static_cast<double>(img.width - 1));
    int i = static_cast<int>(fx);
    xi0[ox] = i;
    xi1[ox] = std::min(i + 1, img.width - 1);
    xf[ox] = static_cast<float>(fx - i);
  }
  const int stride = img.width * 3;
  std::vector<float> row(static_cast<size_t>(stride));
  for (int oy = 0; oy < out; ++oy) {
    double fy = y0 + (oy + 0.5) * sy - 0.5;
    fy = std::min(std::max(fy, 0.0), static_cast<double>(img.height - 1));
    const int y_lo = static_cast<int>(fy);
    const int y_hi = std::min(y_lo + 1, img.height - 1);
    const float wy = static_cast<float>(fy - y_lo);
    const uint8_t* r0 = img.pixels.data() + static_cast<size_t>(y_lo) * stride;
    const uint8_t* r1 = img.pixels.data() + static_cast<size_t>(y_hi) * stride;
    // Blend the two source rows over the window's columns only, then interpolate across.
    const int c_lo = xi0[0] * 3, c_hi = xi1[out - 1] * 3 + 3;
    for (int c = c_lo; c < c_hi; ++c) row[c] = r0[c] + wy * (static_cast<float>(r1[c]) - r0[c]);
    for (int ox = 0; ox < out; ++ox) {
      const float* a = &row[static_cast<size_t>(xi0[ox]) * 3];
      const float* b = &row[static_cast<size_t>(xi1[ox]) * 3];
      const float f = xf[ox];
      const int dx = flip ? out - 1 - ox : ox;
      for (int k = 0; k < 3; ++k) store(k, oy, dx, a[k] + f * (b[k] - a[k]));
    }
  }
}

}  // namespace

absl::StatusOr<JpegInfo> ReadJpegHeader(absl::string_view jpeg) {
  tjhandle h = ThreadHandles().decompress();
  int w = 0, ht = 0, subsamp = 0, colorspace = 0;
  if (h == nullptr ||
      tjDecompressHeader3(h, reinterpret_cast<const unsigned char*>(jpeg.data()),
                          static_cast<unsigned long>(jpeg.size()), &w, &ht, &subsamp,
                          &colorspace) != 0) {
    return JpegError(h, "not a readable JPEG", jpeg.size());
  }
  return JpegInfo{w, ht};
}

absl::Status DecodeJpeg(absl::string_view jpeg, int scale_denominator, RgbImage* image) {
  if (scale_denominator != 1 && scale_denominator != 2 && scale_denominator != 4 &&
      scale_denominator != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG scale denominator ", scale_denominator, " is not 1, 2, 4 or 8"));
  }
  HVX_ASSIGN_OR_RETURN(JpegInfo info, ReadJpegHeader(jpeg));
  image->width = ScaledSize(info.width, scale_denominator);
  image->height = ScaledSize(info.height, scale_denominator);
  image->pixels.resize(static_cast<size_t>(image->width) * image->height * 3);
  tjhandle h = ThreadHandles().decompress();
  if (tjDecompress2(h, reinterpret_cast<const unsigned char*>(jpeg.data()),
                    static_cast<unsigned long>(jpeg.size()), image->pixels.data(), image->width,
                    image->width * 3, image->height, TJPF_RGB, 0) != 0) {
    // Warnings (e.g. premature end of data in a still-displayable image) are not fatal.
    if (tjGetErrorCode(h) != TJERR_WARNING) return JpegError(h, "JPEG decode failed", jpeg.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeJpeg(const RgbImage& image, int quality) {
  tjhandle h = ThreadHandles().compress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (h == nullptr || tjCompress2(h, image.pixels.data(), image.width, image.width * 3,
                                  image.height, TJPF_RGB, &buf, &size, TJSAMP_420, quality,
                                  0) != 0) {
    return absl::InternalError(absl::StrCat("JPEG encode of a ", image.width, "x", image.height,
                                            " image failed: ", h ? tjGetErrorStr2(h) : ""));
  }
  std::string out(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  return out;
}

CropWindow RandomResizedCropWindow(int width, int height, double min_area, double max_area,
                                   double min_ratio, double max_ratio, SampleRng* rng) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(min_ratio), log_hi = std::log(max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng->Uniform(min_area, max_area);
    const double ratio = std::exp(rng->Uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int x = static_cast<int>(rng->Below(static_cast<uint64_t>(width - w + 1)));
      const int y = static_cast<int>(rng->Below(static_cast<uint64_t>(height - h + 1)));
      return CropWindow{x, y, w, h};
    }
  }
  // Fallback: the whole image, cut to the allowed aspect range, centred.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < min_ratio) {
    h = std::max(1, static_cast<int>(std::lround(w / min_ratio)));
  } else if (in_ratio > max_ratio) {
    w = std::max(1, static_cast<int>(std::lround(h * max_ratio)));
  }
  return CropWindow{(width - w) / 2, (height - h) / 2, w, h};
}

CropWindow CenterCropWindow(int width, int height, int out_size, int resize_shorter) {
  const int shorter = std::min(width, height);
  const double scale = static_cast<double>(shorter) / resize_shorter;  // source px per resized px
  const int side = std::max(1, std::min(shorter, static_cast<int>(std::lround(out_size * scale))));
  return CropWindow{(width - side) / 2, (height - side) / 2, side, side};
}

absl::Status ImageNetDecoder::Decode(absl::string_view record, const SampleContext& context,
                                     void* out, int64_t* label) const {
  Example example;
  HVX_RETURN_IF_ERROR(ParseExample(record, &example));
  HVX_ASSIGN_OR_RETURN(absl::string_view jpeg, GetBytes(example, options_.image_key));
  HVX_ASSIGN_OR_RETURN(int64_t stored, GetInt64(example, options_.label_key));
  *label = stored + options_.label_offset;
  return DecodeImage(jpeg, context, out);
}

absl::Status ImageNetDecoder::DecodeImage(absl::string_view jpeg, const SampleContext& context,
                                          void* out) const {
  HVX_ASSIGN_OR_RETURN(JpegInfo info, ReadJpegHeader(jpeg));
  SampleRng rng(MixSeed(context.seed, static_cast<uint64_t>(context.epoch),
                        static_cast<uint64_t>(context.sample_id)));
  CropWindow crop;
  bool flip = false;
  if (options_.train) {
    crop = RandomResizedCropWindow(info.width, info.height, options_.min_area, options_.max_area,
                                   options_.min_ratio, options_.max_ratio, &rng);
    flip = options_.flip && rng.Uniform() < 0.5;
  } else {
    crop = CenterCropWindow(info.width, info.height, options_.out_size, options_.resize_shorter);
  }
  int denominator = 1;
  if (options_.scaled_decode) {
    while (denominator < 8 && std::min(crop.width, crop.height) >= 2 * denominator * options_.out_size) {
      denominator *= 2;
    }
  }
  thread_local RgbImage image;  // reused: avoids a large allocation per sample
  HVX_RETURN_IF_ERROR(DecodeJpeg(jpeg, denominator, &image));
  const double fx = static_cast<double>(image.width) / info.width;
  const double fy = static_cast<double>(image.height) / info.height;
  const int n = options_.out_size;
  const size_t plane = static_cast<size_t>(n) * n;
  if (options_.dtype == DataType::kUint8) {
    auto* dst = static_cast<uint8_t*>(out);
    ResampleWindow(image, crop.x * fx, crop.y * fy, crop.width * fx, crop.height * fy, n, flip,
                   [&](int k, int y, int x, float v) {
                     dst[k * plane + static_cast<size_t>(y) * n + x] =
                         static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v + 0.5f)));
                   });
    return absl::OkStatus();
  }
  if (options_.dtype != DataType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("ImageNet decoder: output dtype ",
                                                   DataTypeName(options_.dtype),
                                                   " is not supported (float32 or uint8)"));
  }
  float scale[3], shift[3];
  for (int k = 0; k < 3; ++k) {
    scale[k] = 1.0f / (255.0f * options_.stddev[k]);
    shift[k] = -options_.mean[k] / options_.stddev[k];
  }
  auto* dst = static_cast<float*>(out);
  ResampleWindow(image, crop.x * fx, crop.y * fy, crop.width * fx, crop.height * fy, n, flip,
                 [&](int k, int y, int x, float v) {
                   dst[k * plane + static_cast<size_t>(y) * n + x] = v * scale[k] + shift[k];
                 });
  return absl::OkStatus();
}

}  // namespace data
}  // namespace hvx
