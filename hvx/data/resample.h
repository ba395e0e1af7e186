// The arithmetic of ImageNetDecoder's crop-resize-normalise, shared by the CPU path (jpeg.cc) and
// the GPU one (gpu_resample.cu), so that both compute every output value with the same operations
// in the same order: given the same decoded pixels they give the same bits.
//
// clang-format off
//   ResampleParams p = ...;                        // a decoded RGB image and where its crop goes
//   for (int64_t i = 0; i < ResampleCount(p); ++i) ResampleOne(p, i);   // a GPU thread per i
// clang-format on
//
// Bilinear sampling at pixel centres: output column ox of n samples the source at
// x0 + (ox + 0.5) * w / n - 0.5, clamped to the image; first the two source rows are blended,
// then the two columns (ImageNetDecoder's separable order). Compile device code with --fmad=false:
// a fused multiply-add rounds once where the CPU rounds twice.
#ifndef HVX_DATA_RESAMPLE_H_
#define HVX_DATA_RESAMPLE_H_

#include <cstdint>

#ifdef __CUDACC__
#define HVX_HOST_DEVICE __host__ __device__
#else
#define HVX_HOST_DEVICE
#endif

namespace hvx {
namespace data {

// The two source pixels an output pixel blends along one axis, and the weight of the second.
struct SourceTap {
  int lo = 0;
  int hi = 0;
  float frac = 0;
};

// Output index `o` of `out` sampling [origin, origin + extent) of an axis of `full` pixels.
HVX_HOST_DEVICE inline SourceTap Tap(double origin, double extent, int out, int o, int full) {
  double f = origin + (o + 0.5) * (extent / out) - 0.5;
  const double last = static_cast<double>(full - 1);
  f = f < 0.0 ? 0.0 : (f > last ? last : f);
  SourceTap t;
  t.lo = static_cast<int>(f);
  t.hi = t.lo + 1 < full ? t.lo + 1 : full - 1;
  t.frac = static_cast<float>(f - t.lo);
  return t;
}

HVX_HOST_DEVICE inline float Lerp(float a, float b, float f) { return a + f * (b - a); }

// An RGB image (row-major, 3 bytes a pixel) and the window of it resampled into one sample.
struct ResampleParams {
  const uint8_t* image = nullptr;
  int width = 0;  // of `image`, which is the whole decoded image
  int height = 0;
  double x0 = 0, y0 = 0, w = 0, h = 0;  // the crop, in `image`'s pixels
  int out = 0;                          // the sample is out x out
  bool flip = false;                    // mirrored left to right
  bool channels_last = false;           // [out, out, 3] instead of [3, out, out]
  bool to_uint8 = false;                // rounded bytes instead of normalised float32
  float scale[3] = {1, 1, 1};           // float32: value * scale[k] + shift[k]
  float shift[3] = {0, 0, 0};
  void* dst = nullptr;
};

HVX_HOST_DEVICE inline int64_t ResampleCount(const ResampleParams& p) {
  return static_cast<int64_t>(p.out) * p.out * 3;
}

// Where channel k of output pixel (y, x) goes.
HVX_HOST_DEVICE inline int64_t SampleOffset(const ResampleParams& p, int k, int y, int x) {
  const int64_t pixel = static_cast<int64_t>(y) * p.out + x;
  return p.channels_last ? pixel * 3 + k : k * static_cast<int64_t>(p.out) * p.out + pixel;
}

// Resampled value v as a uint8 sample: rounded, clamped to [0, 255].
HVX_HOST_DEVICE inline uint8_t RoundToByte(float v) {
  const float r = v + 0.5f;
  return static_cast<uint8_t>(r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r));
}

// Resampled value v of channel k as a float32 sample: normalised.
HVX_HOST_DEVICE inline float Normalised(const ResampleParams& p, int k, float v) {
  return v * p.scale[k] + p.shift[k];
}

// Stores resampled value v of channel k as the sample's type.
HVX_HOST_DEVICE inline void StoreSample(const ResampleParams& p, int64_t offset, int k, float v) {
  if (p.to_uint8) {
    static_cast<uint8_t*>(p.dst)[offset] = RoundToByte(v);
  } else {
    static_cast<float*>(p.dst)[offset] = Normalised(p, k, v);
  }
}

// Output value i of ResampleCount(p), in the order (y, x, k) of the sample's pixels.
HVX_HOST_DEVICE inline void ResampleOne(const ResampleParams& p, int64_t i) {
  const int k = static_cast<int>(i % 3);
  const int ox = static_cast<int>((i / 3) % p.out);
  const int oy = static_cast<int>(i / 3 / p.out);
  const SourceTap ty = Tap(p.y0, p.h, p.out, oy, p.height);
  const SourceTap tx = Tap(p.x0, p.w, p.out, ox, p.width);
  const int64_t stride = static_cast<int64_t>(p.width) * 3;
  const uint8_t* r0 = p.image + ty.lo * stride;
  const uint8_t* r1 = p.image + ty.hi * stride;
  const float a = Lerp(r0[tx.lo * 3 + k], static_cast<float>(r1[tx.lo * 3 + k]), ty.frac);
  const float b = Lerp(r0[tx.hi * 3 + k], static_cast<float>(r1[tx.hi * 3 + k]), ty.frac);
  const int dx = p.flip ? p.out - 1 - ox : ox;
  StoreSample(p, SampleOffset(p, k, oy, dx), k, Lerp(a, b, tx.frac));
}

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_RESAMPLE_H_
