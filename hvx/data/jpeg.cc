#include "hvx/data/jpeg.h"

#include <csetjmp>
// jpeglib.h uses FILE and size_t without declaring them; jerror.h needs jpeglib.h.
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/data/example.h"

namespace hvx {
namespace data {
namespace {

// One TurboJPEG compressor per thread: handles are not thread-safe, and creating one per image
// costs more than a small image's encode.
class Compressor {
 public:
  ~Compressor() {
    if (handle_) tjDestroy(handle_);
  }
  tjhandle get() {
    if (!handle_) handle_ = tjInitCompress();
    return handle_;
  }

 private:
  tjhandle handle_ = nullptr;
};

// Decoding uses libjpeg itself rather than TurboJPEG, because only libjpeg says which warning it
// raised: TurboJPEG either ignores every warning (and so accepts truncated images, their missing
// rows gray) or fails on every one (and so refuses images with a few stray bytes between
// segments, which cameras write and TensorFlow and PIL accept). One per thread, reused.
//
// libjpeg reports errors by calling error_exit, which must not return; here it longjmps back into
// the method that called libjpeg. Those methods keep no objects with destructors alive across the
// libjpeg calls, so the jump skips none.
class Decompressor {
 public:
  Decompressor() {
    cinfo_.err = jpeg_std_error(&errors_.pub);
    errors_.pub.error_exit = &ErrorExit;
    errors_.pub.emit_message = &EmitMessage;
    progress_.progress_monitor = &CountScans;
    if (setjmp(errors_.jump)) return;  // out of memory: every ReadHeader() fails
    jpeg_create_decompress(&cinfo_);
    created_ = true;
  }
  ~Decompressor() {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Reads the header of `jpeg`, which must stay alive until Decode() or Abort(). False on failure
  // (see failure()), after which the decompressor is ready for the next image.
  bool ReadHeader(absl::string_view jpeg) {
    if (!created_) return false;
    errors_.failure = Failure::kNone;
    if (setjmp(errors_.jump)) {
      jpeg_abort_decompress(&cinfo_);
      return false;
    }
    jpeg_mem_src(&cinfo_, reinterpret_cast<const unsigned char*>(jpeg.data()),
                 static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(&cinfo_, TRUE);
    return true;
  }
  // The most scans Decode() and DecodeWindow() read before they fail (0: no limit).
  void set_max_scans(int max_scans) {
    errors_.max_scans = max_scans;
    cinfo_.progress = max_scans > 0 ? &progress_ : nullptr;
  }
  int width() const { return static_cast<int>(cinfo_.image_width); }
  int height() const { return static_cast<int>(cinfo_.image_height); }

  // After ReadHeader(): decodes all of the image to RGB at 1/denominator into *image and ends
  // the image. False on failure (see failure()).
  bool Decode(int denominator, RgbImage* image) {
    RgbWindow all;
    all.pixels.swap(image->pixels);  // reuse the allocation
    const bool ok = DecodeWindow(denominator, 0, 0, width(), height(), &all);
    image->width = all.width;
    image->height = all.height;
    image->pixels.swap(all.pixels);
    return ok;
  }

  // After ReadHeader(): decodes at 1/denominator only what bilinear sampling of the window
  // (x0, y0, w, h) of the full-size image needs, into *out: the rows it touches, and the columns,
  // widened to the image's iMCU column boundaries by libjpeg-turbo (jpeg_crop_scanline). Rows
  // above are skipped without colour conversion or upsampling (jpeg_skip_scanlines), rows below
  // are skipped too (all but the last, which is read) and the image is still read to its end,
  // so a truncated tail is found. The whole image is the window (0, 0, width(), height()). False
  // on failure (see failure()).
  bool DecodeWindow(int denominator, double x0, double y0, double w, double h, RgbWindow* out) {
    errors_.failure = Failure::kNone;
    if (setjmp(errors_.jump)) {
      jpeg_abort_decompress(&cinfo_);
      return false;
    }
    cinfo_.out_color_space = JCS_RGB;
    cinfo_.scale_num = 1;
    cinfo_.scale_denom = static_cast<unsigned int>(denominator);
    jpeg_calc_output_dimensions(&cinfo_);
    const int full_w = static_cast<int>(cinfo_.output_width);
    const int full_h = static_cast<int>(cinfo_.output_height);
    const double fx = static_cast<double>(full_w) / cinfo_.image_width;
    const double fy = static_cast<double>(full_h) / cinfo_.image_height;
    // Sampling reads pixels floor(p) and floor(p) + 1 for p in [x0 - 0.5, x0 + w - 0.5] (in the
    // decoded image's pixels); one more on each side keeps clear of rounding.
    const int left = std::max(0, static_cast<int>(std::floor(x0 * fx)) - 2);
    const int right = std::min(full_w, static_cast<int>(std::ceil((x0 + w) * fx)) + 2);
    const int top = std::max(0, static_cast<int>(std::floor(y0 * fy)) - 2);
    const int bottom = std::min(full_h, static_cast<int>(std::ceil((y0 + h) * fy)) + 2);
    jpeg_start_decompress(&cinfo_);
    JDIMENSION x = static_cast<JDIMENSION>(left);
    JDIMENSION width = static_cast<JDIMENSION>(std::max(1, right - left));
    if (width < cinfo_.output_width) jpeg_crop_scanline(&cinfo_, &x, &width);
    out->x = static_cast<int>(x);
    out->width = static_cast<int>(width);
    out->y = top;
    out->height = std::max(1, bottom - top);
    out->full_width = full_w;
    out->full_height = full_h;
    const size_t stride = static_cast<size_t>(out->width) * 3;
    out->pixels.resize(stride * static_cast<size_t>(out->height));
    if (top > 0) jpeg_skip_scanlines(&cinfo_, static_cast<JDIMENSION>(top));
    for (int row = 0; row < out->height; ++row) {
      JSAMPROW dst = out->pixels.data() + stride * static_cast<size_t>(row);
      jpeg_read_scanlines(&cinfo_, &dst, 1);
    }
    // Rows below: entropy-decoded and dropped, but the last one read, because skipping to the
    // very end decodes nothing and a truncated tail would go unnoticed.
    if (cinfo_.output_scanline + 1 < cinfo_.output_height) {
      jpeg_skip_scanlines(&cinfo_, cinfo_.output_height - cinfo_.output_scanline - 1);
    }
    if (cinfo_.output_scanline < cinfo_.output_height) {
      tail_row_.resize(stride);
      JSAMPROW dst = tail_row_.data();
      jpeg_read_scanlines(&cinfo_, &dst, 1);
    }
    jpeg_finish_decompress(&cinfo_);
    return true;
  }

  // Ends the image after ReadHeader() when Decode() is not called.
  void Abort() { jpeg_abort_decompress(&cinfo_); }

  // Why the last ReadHeader() or Decode() failed, in a sentence naming the problem; `what` names
  // a failure that is not a truncated or corrupt image.
  absl::Status failure(absl::string_view what, size_t bytes) const {
    switch (errors_.failure) {
      case Failure::kTruncated:
        return absl::InvalidArgumentError(
            absl::StrCat("truncated JPEG (", bytes, "-byte image, cut short?): ", errors_.message));
      case Failure::kCorrupt:
        return absl::InvalidArgumentError(absl::StrCat(
            "corrupt JPEG (", bytes, "-byte image, damaged record?): ", errors_.message));
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(what, " (", bytes, "-byte image): ", errors_.message));
    }
  }

 private:
  enum class Failure { kNone, kError, kCorrupt, kTruncated };
  struct ErrorManager {
    jpeg_error_mgr pub;  // first: libjpeg's callbacks get &pub
    jmp_buf jump;
    Failure failure = Failure::kNone;
    char message[JMSG_LENGTH_MAX] = "";
    int max_scans = 0;
  };

  // libjpeg's warnings that pixels are missing or made up (it zeroes the rest of a scan, or fills
  // the rest of the image with gray, and carries on).
  static bool DamagesPixels(int code) {
    switch (code) {
      case JWRN_JPEG_EOF:
      case JWRN_HIT_MARKER:
      case JWRN_HUFF_BAD_CODE:
      case JWRN_ARITH_BAD_CODE:
      case JWRN_MUST_RESYNC:
      case JWRN_BOGUS_PROGRESSION:
      case JWRN_NOT_SEQUENTIAL:
        return true;
      default:
        return false;
    }
  }
  [[noreturn]] static void Fail(j_common_ptr cinfo, Failure failure) {
    auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
    errors->failure = failure;
    (*cinfo->err->format_message)(cinfo, errors->message);
    longjmp(errors->jump, 1);
  }
  [[noreturn]] static void ErrorExit(j_common_ptr cinfo) { Fail(cinfo, Failure::kError); }
  // libjpeg's progress monitor, called as it reads the input: a scan past the limit ends the
  // decode (libjpeg-turbo's djpeg -maxscans).
  static void CountScans(j_common_ptr cinfo) {
    auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
    if (!cinfo->is_decompressor || errors->max_scans <= 0) return;
    if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number <= errors->max_scans) return;
    errors->failure = Failure::kError;
    snprintf(errors->message, sizeof(errors->message),
             "the image has more than %d scans (a progressive JPEG that refines in thousands of "
             "scans costs minutes per decode; corrupt or crafted record? else raise "
             "JpegLimits::max_scans)",
             errors->max_scans);
    longjmp(errors->jump, 1);
  }
  // Level -1 is a warning, 0 and up trace messages; none is printed.
  static void EmitMessage(j_common_ptr cinfo, int level) {
    if (level >= 0) return;
    ++cinfo->err->num_warnings;
    const int code = cinfo->err->msg_code;
    if (DamagesPixels(code)) {
      Fail(cinfo, code == JWRN_JPEG_EOF ? Failure::kTruncated : Failure::kCorrupt);
    }
  }

  ErrorManager errors_;
  jpeg_progress_mgr progress_{};
  jpeg_decompress_struct cinfo_;
  std::vector<uint8_t> tail_row_;  // DecodeWindow's last row, read and dropped
  bool created_ = false;
};

Decompressor& ThreadDecompressor() {
  thread_local Decompressor decompressor;
  return decompressor;
}

// Bilinear resampling of p's crop (in the decoded image's pixels) of `img`, as ResampleOne does
// it value by value, written through `store(channel, y, x, value)`. `img` holds rows and columns
// [img.y, img.y + img.height) x [img.x, img.x + img.width) of an image of img.full_width x
// img.full_height, which must include every pixel sampled. Each source row pair is blended once
// over the window's columns, then interpolated across: the same operations as ResampleOne's.
template <typename Store>
void ResampleWindow(const RgbWindow& img, const ResampleParams& p, Store store) {
  const int out = p.out;
  std::vector<SourceTap> xt(out);
  for (int ox = 0; ox < out; ++ox) {
    xt[ox] = Tap(p.x0, p.w, out, ox, img.full_width);
    xt[ox].lo -= img.x;
    xt[ox].hi -= img.x;
  }
  const int stride = img.width * 3;
  std::vector<float> row(static_cast<size_t>(stride));
  for (int oy = 0; oy < out; ++oy) {
    const SourceTap ty = Tap(p.y0, p.h, out, oy, img.full_height);
    const float wy = ty.frac;
    const uint8_t* r0 = img.pixels.data() + static_cast<size_t>(ty.lo - img.y) * stride;
    const uint8_t* r1 = img.pixels.data() + static_cast<size_t>(ty.hi - img.y) * stride;
    const int c_lo = xt[0].lo * 3, c_hi = xt[out - 1].hi * 3 + 3;
    for (int c = c_lo; c < c_hi; ++c) row[c] = Lerp(r0[c], static_cast<float>(r1[c]), wy);
    for (int ox = 0; ox < out; ++ox) {
      const float* a = &row[static_cast<size_t>(xt[ox].lo) * 3];
      const float* b = &row[static_cast<size_t>(xt[ox].hi) * 3];
      const float f = xt[ox].frac;
      const int dx = p.flip ? out - 1 - ox : ox;
      for (int k = 0; k < 3; ++k) store(k, oy, dx, Lerp(a[k], b[k], f));
    }
  }
}

}  // namespace

absl::Status CheckJpegSize(const JpegInfo& info, size_t bytes, const JpegLimits& limits) {
  const int width = info.width, height = info.height;
  const int64_t pixels = static_cast<int64_t>(width) * height;
  if (pixels > limits.max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG header claims ", width, "x", height, " pixels, more than the limit of ",
                     limits.max_pixels, " (corrupt record? else raise JpegLimits::max_pixels)"));
  }
  if (limits.max_pixels_per_byte > 0 &&
      pixels / limits.max_pixels_per_byte > static_cast<int64_t>(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG header claims ", width, "x", height, " pixels but the image has only ",
                     bytes, " bytes, under 1 per ", limits.max_pixels_per_byte,
                     " pixels (corrupt record? else see JpegLimits::max_pixels_per_byte)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JpegInfo> ReadJpegHeader(absl::string_view jpeg) {
  Decompressor& d = ThreadDecompressor();
  if (!d.ReadHeader(jpeg)) return d.failure("not a readable JPEG", jpeg.size());
  const JpegInfo info{d.width(), d.height()};
  d.Abort();
  return info;
}

absl::Status DecodeJpeg(absl::string_view jpeg, int scale_denominator, const JpegLimits& limits,
                        RgbImage* image) {
  if (scale_denominator != 1 && scale_denominator != 2 && scale_denominator != 4 &&
      scale_denominator != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG scale denominator ", scale_denominator, " is not 1, 2, 4 or 8"));
  }
  Decompressor& d = ThreadDecompressor();
  if (!d.ReadHeader(jpeg)) return d.failure("not a readable JPEG", jpeg.size());
  d.set_max_scans(limits.max_scans);
  absl::Status size = CheckJpegSize({d.width(), d.height()}, jpeg.size(), limits);
  if (!size.ok()) {
    d.Abort();
    return size;
  }
  if (!d.Decode(scale_denominator, image)) return d.failure("JPEG decode failed", jpeg.size());
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeJpeg(const RgbImage& image, int quality) {
  thread_local Compressor compressor;
  tjhandle h = compressor.get();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (h == nullptr ||
      tjCompress2(h, image.pixels.data(), image.width, image.width * 3, image.height, TJPF_RGB,
                  &buf, &size, TJSAMP_420, quality, 0) != 0) {
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
  if (__builtin_add_overflow(stored, options_.label_offset, label)) {
    return absl::InvalidArgumentError(absl::StrCat("label ", stored, " plus the label offset ",
                                                   options_.label_offset,
                                                   " is out of int64's range (corrupt record?)"));
  }
  return DecodeImage(jpeg, context, out);
}

ImageNetSamplePlan PlanImageNetSample(const ImageNetDecoderOptions& options, const JpegInfo& info,
                                      const SampleContext& context) {
  SampleRng rng(MixSeed(context.seed, static_cast<uint64_t>(context.epoch),
                        static_cast<uint64_t>(context.sample_id)));
  ImageNetSamplePlan plan;
  if (options.train) {
    plan.crop = RandomResizedCropWindow(info.width, info.height, options.min_area, options.max_area,
                                        options.min_ratio, options.max_ratio, &rng);
    plan.flip = options.flip && rng.Uniform() < 0.5;
  } else {
    plan.crop = CenterCropWindow(info.width, info.height, options.out_size, options.resize_shorter);
  }
  // Decode at 1/2, 1/4 or 1/8 of the size while the crop still covers out_size pixels. (Other
  // M/8 scales decode fewer pixels but slower: libjpeg-turbo has SIMD code for these only.)
  if (options.scaled_decode) {
    while (plan.scale_denominator < 8 && std::min(plan.crop.width, plan.crop.height) >=
                                             2 * plan.scale_denominator * options.out_size) {
      plan.scale_denominator *= 2;
    }
  }
  return plan;
}

ResampleParams ImageNetResampleParams(const ImageNetDecoderOptions& options,
                                      const ImageNetSamplePlan& plan, const JpegInfo& info,
                                      int decoded_width, int decoded_height) {
  ResampleParams p;
  p.width = decoded_width;
  p.height = decoded_height;
  const double fx = static_cast<double>(decoded_width) / info.width;
  const double fy = static_cast<double>(decoded_height) / info.height;
  p.x0 = plan.crop.x * fx;
  p.y0 = plan.crop.y * fy;
  p.w = plan.crop.width * fx;
  p.h = plan.crop.height * fy;
  p.out = options.out_size;
  p.flip = plan.flip;
  p.channels_last = options.channels_last;
  p.to_uint8 = options.dtype == DataType::kUint8;
  for (int k = 0; k < 3; ++k) {
    p.scale[k] = 1.0f / (255.0f * options.stddev[k]);
    p.shift[k] = -options.mean[k] / options.stddev[k];
  }
  return p;
}

absl::Status CheckImageNetDtype(const ImageNetDecoderOptions& options) {
  if (options.dtype == DataType::kFloat32 || options.dtype == DataType::kUint8) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("ImageNet decoder: output dtype ",
                                                 DataTypeName(options.dtype),
                                                 " is not supported (float32 or uint8)"));
}

absl::Status ImageNetDecoder::DecodeImage(absl::string_view jpeg, const SampleContext& context,
                                          void* out) const {
  HVX_RETURN_IF_ERROR(CheckImageNetDtype(options_));
  Decompressor& d = ThreadDecompressor();
  if (!d.ReadHeader(jpeg)) return d.failure("not a readable JPEG", jpeg.size());
  const JpegInfo info{d.width(), d.height()};
  d.set_max_scans(options_.limits.max_scans);
  absl::Status size = CheckJpegSize(info, jpeg.size(), options_.limits);
  if (!size.ok()) {
    d.Abort();
    return size;
  }
  const ImageNetSamplePlan plan = PlanImageNetSample(options_, info, context);
  thread_local RgbWindow image;  // reused: avoids a large allocation per sample
  // Without decode_crop the window is the whole image.
  const CropWindow decoded =
      options_.decode_crop ? plan.crop : CropWindow{0, 0, info.width, info.height};
  if (!d.DecodeWindow(plan.scale_denominator, decoded.x, decoded.y, decoded.width, decoded.height,
                      &image)) {
    return d.failure("JPEG decode failed", jpeg.size());
  }
  ResampleParams p =
      ImageNetResampleParams(options_, plan, info, image.full_width, image.full_height);
  p.dst = out;
  if (p.to_uint8) {
    auto* dst = static_cast<uint8_t*>(out);
    ResampleWindow(image, p, [&](int k, int y, int x, float v) {
      dst[SampleOffset(p, k, y, x)] = RoundToByte(v);
    });
  } else {
    auto* dst = static_cast<float*>(out);
    ResampleWindow(image, p, [&](int k, int y, int x, float v) {
      dst[SampleOffset(p, k, y, x)] = Normalised(p, k, v);
    });
  }
  return absl::OkStatus();
}

}  // namespace data
}  // namespace hvx
