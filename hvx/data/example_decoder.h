// Any dataset of tf.train.Example records as (input, label) samples, from a feature spec: which
// feature is the model's input and how it becomes a float32 tensor of a fixed shape, and which
// is the label.
//
//   ExampleDecoderOptions o;
//   o.input = {.key = "pixels", .kind = FeatureKind::kFloatList, .shape = {1, 28, 28}};
//   o.label_key = "label";
//   HVX_ASSIGN_OR_RETURN(auto decoder, ExampleDecoder::Create(o));
//
// Input kinds:
//   kJpeg       an encoded image: ImageNetDecoder's transforms (`jpeg`: train or eval, size),
//               output [3, size, size] ([size, size, 3] with jpeg.channels_last)
//   kFloatList  a float_list of exactly prod(shape) values
//   kInt64List  an int64_list of exactly prod(shape) values
//   kBytes      one bytes value holding prod(shape) elements of `bytes_dtype` (uint8, or
//               little-endian float32)
// For the list and bytes kinds, values are stored in `shape` order, or channels last when
// `channels_last_stored` (stored [H, W, C], output [C, H, W] as `shape` says), and each output
// value is value / divide_by, minus mean, over stddev (mean and stddev per channel, the first
// dimension of `shape`, or one for all). The label is an int64 feature with one value.
// Errors name the feature, what was expected and what was found; the pipeline adds the file and
// the record's offset.
#ifndef HVX_DATA_EXAMPLE_DECODER_H_
#define HVX_DATA_EXAMPLE_DECODER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/data/decoder.h"
#include "hvx/data/jpeg.h"

namespace hvx {
namespace data {

enum class FeatureKind { kJpeg, kFloatList, kInt64List, kBytes };

// "jpeg", "float_list", "int64_list", "bytes".
const char* FeatureKindName(FeatureKind kind);

struct ExampleInputSpec {
  std::string key;
  FeatureKind kind = FeatureKind::kBytes;
  std::vector<int64_t> shape;  // the output sample's shape (not for kJpeg)
  DataType bytes_dtype = DataType::kUint8;
  bool channels_last_stored = false;  // needs a 3-dimensional shape
  float divide_by = 1;
  std::vector<float> mean = {0};
  std::vector<float> stddev = {1};
  ImageNetDecoderOptions jpeg;  // kJpeg: transforms and size; its keys and label are not used
};

struct ExampleDecoderOptions {
  ExampleInputSpec input;
  std::string label_key = "label";
};

// Makes the decoder of a kJpeg input from its options (float32 output): e.g. one on a GPU
// (hvx/data/gpu_jpeg.h), or the CPU's ImageNetDecoder.
using JpegDecoderFactory =
    std::function<std::unique_ptr<ImageNetDecoder>(const ImageNetDecoderOptions&)>;

class ExampleDecoder : public Decoder {
 public:
  // InvalidArgument naming the field of a spec that cannot work (no key, a shape with a
  // dimension < 1, mean/stddev of the wrong length, a stddev or divide_by of 0, ...). A kJpeg
  // input decodes with `make_jpeg`'s decoder when given, else with ImageNetDecoder.
  static absl::StatusOr<std::shared_ptr<const ExampleDecoder>> Create(
      ExampleDecoderOptions o, const JpegDecoderFactory& make_jpeg = nullptr);

  DataType dtype() const override { return DataType::kFloat32; }
  TensorShape sample_shape() const override;
  absl::Status Decode(absl::string_view record, const SampleContext& context, void* out,
                      int64_t* label) const override;

 private:
  ExampleDecoder(ExampleDecoderOptions o, const JpegDecoderFactory& make_jpeg);
  // Writes n stored values, read by `get(i)`, to `out` normalised and in output order.
  template <typename Get>
  void Store(int64_t n, Get get, float* out) const;

  const ExampleDecoderOptions options_;
  std::unique_ptr<ImageNetDecoder> jpeg_;
  int64_t num_elements_ = 0;
  std::vector<float> scale_, shift_;  // per channel: out = value * scale + shift
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_EXAMPLE_DECODER_H_
