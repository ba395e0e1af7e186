#include "hvx/data/decoder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/data/example.h"

namespace hvx {
namespace data {

RawImageDecoder::RawImageDecoder(RawImageDecoderOptions options) : options_(std::move(options)) {}

TensorShape RawImageDecoder::sample_shape() const {
  return TensorShape({options_.channels, options_.height, options_.width});
}

absl::Status RawImageDecoder::Decode(absl::string_view record, const SampleContext&, void* out,
                                     int64_t* label) const {
  Example example;
  HVX_RETURN_IF_ERROR(ParseExample(record, &example));
  HVX_ASSIGN_OR_RETURN(absl::string_view pixels, GetBytes(example, options_.image_key));
  HVX_ASSIGN_OR_RETURN(*label, GetInt64(example, options_.label_key));
  const int64_t c = options_.channels, h = options_.height, w = options_.width;
  if (static_cast<int64_t>(pixels.size()) != c * h * w) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", options_.image_key, "' has ",
                                                   pixels.size(), " bytes, expected ", c, "x", h,
                                                   "x", w, " = ", c * h * w));
  }
  const auto* src = reinterpret_cast<const uint8_t*>(pixels.data());
  if (options_.dtype == DataType::kUint8) {
    auto* dst = static_cast<uint8_t*>(out);
    if (c == 1) {
      std::memcpy(dst, src, pixels.size());
    } else {
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          for (int64_t k = 0; k < c; ++k) dst[(k * h + y) * w + x] = src[(y * w + x) * c + k];
    }
    return absl::OkStatus();
  }
  if (options_.dtype != DataType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("raw image decoder: output dtype ",
                                                   DataTypeName(options_.dtype),
                                                   " is not supported (uint8 or float32)"));
  }
  for (const auto* v : {&options_.mean, &options_.stddev}) {
    if (v->size() != 1 && static_cast<int64_t>(v->size()) != c) {
      return absl::InvalidArgumentError(absl::StrCat(
          "raw image decoder: mean and stddev need 1 or ", c, " values, got ", v->size()));
    }
  }
  auto* dst = static_cast<float*>(out);
  for (int64_t k = 0; k < c; ++k) {
    const float mean = options_.mean[options_.mean.size() == 1 ? 0 : static_cast<size_t>(k)];
    const float sd = options_.stddev[options_.stddev.size() == 1 ? 0 : static_cast<size_t>(k)];
    const float scale = 1.0f / (255.0f * sd), shift = -mean / sd;
    float* plane = dst + k * h * w;
    for (int64_t i = 0; i < h * w; ++i)
      plane[i] = static_cast<float>(src[i * c + k]) * scale + shift;
  }
  return absl::OkStatus();
}

}  // namespace data
}  // namespace hvx
