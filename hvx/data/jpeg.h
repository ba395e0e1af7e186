// JPEG decoding (libjpeg-turbo) and the standard ImageNet augmentations.
//
//   ImageNetDecoder train(ImageNetDecoderOptions::Train());  // random resized crop, flip, 224x224
//   train.Decode(record, {seed, epoch, id}, out, &label);    // out: float32 [3, 224, 224]
//
// Conventions (torchvision's reference recipe): training takes a random crop covering 8%-100% of
// the image area with aspect ratio in [3/4, 4/3] (log-uniform, 10 attempts, then a centre crop
// clamped to that ratio), resizes it bilinearly to 224x224 and flips it horizontally with
// probability 1/2; evaluation resizes the shorter side to 256 and takes the centre 224x224; both
// normalise as (x / 255 - mean) / std with ImageNet's mean (0.485, 0.456, 0.406) and std (0.229,
// 0.224, 0.225), channels first. Random choices come from SampleRng(MixSeed(seed, epoch, id)).
// When the crop is at least twice the output size, the JPEG is decoded at 1/2, 1/4 or 1/8 scale
// (libjpeg's DCT scaling), which is faster and acts as an anti-aliasing filter; and only the rows
// and columns the crop needs are decoded (decode_crop).
#ifndef HVX_DATA_JPEG_H_
#define HVX_DATA_JPEG_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/data/decoder.h"
#include "hvx/data/random.h"
#include "hvx/data/resample.h"

namespace hvx {
namespace data {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3, row-major RGB
};

// Rows [y, y + height) and columns [x, x + width) of an image decoded at full_width x
// full_height, row-major RGB.
struct RgbWindow {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  int full_width = 0;
  int full_height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

struct JpegInfo {
  int width = 0;
  int height = 0;
};

// What DecodeJpeg accepts from a header, checked before anything is allocated for the pixels: a
// corrupt record must not make each decode thread allocate gigabytes. Breaking either limit is
// reported like any other corrupt image.
struct JpegLimits {
  // Width x height of the full-size image. 2^26 (8192 x 8192) is 192 MiB of RGB per decode thread
  // (libjpeg holds about as much again for a progressive image); raise it for larger photos.
  int64_t max_pixels = int64_t{1} << 26;
  // Pixels the header may claim per byte of JPEG data; 0 turns the check off. A Huffman-coded
  // image spends at least one bit on every 8x8 block (one byte per 512 pixels), so a header
  // claiming more than this describes data that is not there. Arithmetic-coded images of one
  // flat colour can be smaller; turn the check off for those.
  int64_t max_pixels_per_byte = 1024;
  // Scans a progressive image may have; 0 turns the check off. Encoders write about 10 (libjpeg's
  // default progression) to a few dozen; thousands of refinement scans of a large image, which
  // fit in a few KiB, cost minutes of decoding each, every epoch.
  int max_scans = 100;
};

// The size from the header. InvalidArgument when the bytes are not a JPEG libjpeg-turbo can read
// or end inside the header.
absl::StatusOr<JpegInfo> ReadJpegHeader(absl::string_view jpeg);
// Decodes to RGB at 1/scale_denominator of the size (1, 2, 4 or 8; sizes round up), reusing
// image->pixels. InvalidArgument, naming the problem, when the image breaks `limits`, when the
// data is truncated or corrupt (libjpeg's warnings that pixels are missing or invented: premature
// end of the file or of a scan, bad Huffman or arithmetic codes, restart markers out of order,
// bad progression), or when libjpeg cannot decode it. Harmless warnings (bytes between marker
// segments, unknown metadata) are ignored, as TensorFlow and PIL do.
absl::Status DecodeJpeg(absl::string_view jpeg, int scale_denominator, const JpegLimits& limits,
                        RgbImage* image);
// InvalidArgument, naming the size and the limit, when a header's size breaks `limits` for a JPEG
// of `bytes` bytes.
absl::Status CheckJpegSize(const JpegInfo& info, size_t bytes, const JpegLimits& limits);
// Encodes RGB pixels (for tests and synthetic datasets).
absl::StatusOr<std::string> EncodeJpeg(const RgbImage& image, int quality);

// A crop window in pixels of the full-size image.
struct CropWindow {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  friend bool operator==(const CropWindow& a, const CropWindow& b) {
    return a.x == b.x && a.y == b.y && a.width == b.width && a.height == b.height;
  }
};

CropWindow RandomResizedCropWindow(int width, int height, double min_area, double max_area,
                                   double min_ratio, double max_ratio, SampleRng* rng);
// The centre out_size x out_size window after resizing the shorter side to resize_shorter.
CropWindow CenterCropWindow(int width, int height, int out_size, int resize_shorter);

struct ImageNetDecoderOptions {
  bool train = true;
  int out_size = 224;
  int resize_shorter = 256;  // evaluation only
  double min_area = 0.08, max_area = 1.0;
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  bool flip = true;  // training only
  // kFloat32: normalised as above. kUint8: the resized pixels, not normalised.
  DataType dtype = DataType::kFloat32;
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> stddev = {0.229f, 0.224f, 0.225f};
  // ImageNet TFRecords store labels 1..1000; -1 gives 0..999.
  int64_t label_offset = -1;
  // Use libjpeg's scaled decoding when the crop is at least twice out_size.
  bool scaled_decode = true;
  // Decode only the rows and columns the crop samples (libjpeg-turbo's partial decode); the
  // output is the same as decoding the whole image. false: decode all of it (the baseline).
  bool decode_crop = true;
  // Output [out_size, out_size, 3] (pixels with their channels together, what NHWC tensors
  // hold) instead of [3, out_size, out_size]; the values are the same.
  bool channels_last = false;
  // Images whose header claims more pixels are refused as corrupt.
  JpegLimits limits;
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";

  static ImageNetDecoderOptions Train() { return ImageNetDecoderOptions(); }
  static ImageNetDecoderOptions Eval() {
    ImageNetDecoderOptions o;
    o.train = false;
    return o;
  }
};

// What ImageNetDecoder does with one image: the crop (in the full-size image's pixels), whether
// it is mirrored, and the DCT scale it is decoded at (1 without options.scaled_decode).
struct ImageNetSamplePlan {
  CropWindow crop;
  bool flip = false;
  int scale_denominator = 1;
};
// The plan for the image `info` describes as sample `context`: random (from the context) in
// training, the centre crop in evaluation. A GPU decoder plans with this too, so both pick the same
// crop and flip for a sample.
ImageNetSamplePlan PlanImageNetSample(const ImageNetDecoderOptions& options, const JpegInfo& info,
                                      const SampleContext& context);
// The resampling of `plan` from the image decoded at decoded_width x decoded_height (the full
// size, or its 1/scale_denominator); image and dst are left for the caller.
ResampleParams ImageNetResampleParams(const ImageNetDecoderOptions& options,
                                      const ImageNetSamplePlan& plan, const JpegInfo& info,
                                      int decoded_width, int decoded_height);
// InvalidArgument unless options.dtype is float32 or uint8.
absl::Status CheckImageNetDtype(const ImageNetDecoderOptions& options);

// Output shape [3, out_size, out_size], or [out_size, out_size, 3] with channels_last. Decodes on
// the CPU; a subclass may decode elsewhere (hvx/data/gpu_jpeg.h) with the same plan.
class ImageNetDecoder : public Decoder {
 public:
  explicit ImageNetDecoder(ImageNetDecoderOptions options) : options_(std::move(options)) {}
  DataType dtype() const override { return options_.dtype; }
  TensorShape sample_shape() const override {
    if (options_.channels_last) return TensorShape({options_.out_size, options_.out_size, 3});
    return TensorShape({3, options_.out_size, options_.out_size});
  }
  absl::Status Decode(absl::string_view record, const SampleContext& context, void* out,
                      int64_t* label) const override;
  // The same on a bare JPEG (no Example around it).
  virtual absl::Status DecodeImage(absl::string_view jpeg, const SampleContext& context,
                                   void* out) const;
  const ImageNetDecoderOptions& options() const { return options_; }

 private:
  const ImageNetDecoderOptions options_;
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_JPEG_H_
