// Turns one record into one sample of a batch: a fixed-shape tensor plus an int64 label.
//
//   RawImageDecoder decoder(RawImageDecoderOptions{});         // Fashion-MNIST records
//   decoder.Decode(record, {seed, epoch, id}, out, &label);    // out: 1x28x28 uint8
//
// Decoders are immutable after construction and Decode() is called from many threads at once.
// Random choices (augmentation) must depend only on the SampleContext, so that the same
// (seed, epoch, sample id) gives the same bytes whatever the thread or the world size.
#ifndef HVX_DATA_DECODER_H_
#define HVX_DATA_DECODER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "hvx/common/types.h"

namespace hvx {
namespace data {

struct SampleContext {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t sample_id = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Element type and per-sample shape of the output (a batch is [n] + sample_shape()).
  virtual DataType dtype() const = 0;
  virtual TensorShape sample_shape() const = 0;
  // Writes sample_shape().num_elements() elements of dtype() to `out` and the label to *label.
  // Errors name the feature or the image problem; the pipeline adds file and offset.
  virtual absl::Status Decode(absl::string_view record, const SampleContext& context, void* out,
                              int64_t* label) const = 0;
};

// Records holding raw pixels (what WriteIdxShards writes):
//   image/raw      bytes  height*width*channels uint8, row-major HWC
//   image/height, image/width, image/channels   int64
//   image/class/label                           int64
struct RawImageDecoderOptions {
  int64_t height = 28;
  int64_t width = 28;
  int64_t channels = 1;
  // kUint8: pixels as stored. kFloat32: (pixel / 255 - mean) / std per channel (one value for all
  // channels when the vectors have one element).
  DataType dtype = DataType::kUint8;
  std::vector<float> mean = {0.0f};
  std::vector<float> stddev = {1.0f};
  std::string image_key = "image/raw";
  std::string label_key = "image/class/label";
};

// Output shape [channels, height, width].
class RawImageDecoder : public Decoder {
 public:
  explicit RawImageDecoder(RawImageDecoderOptions options);
  DataType dtype() const override { return options_.dtype; }
  TensorShape sample_shape() const override;
  absl::Status Decode(absl::string_view record, const SampleContext& context, void* out,
                      int64_t* label) const override;

 private:
  const RawImageDecoderOptions options_;
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_DECODER_H_
