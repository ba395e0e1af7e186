#include "hvx/data/example_decoder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/status.h"
#include "hvx/data/example.h"

namespace hvx {
namespace data {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

const char* FeatureKindName(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::kJpeg:
      return "jpeg";
    case FeatureKind::kFloatList:
      return "float_list";
    case FeatureKind::kInt64List:
      return "int64_list";
    case FeatureKind::kBytes:
      return "bytes";
  }
  return "?";
}

absl::StatusOr<std::shared_ptr<const ExampleDecoder>> ExampleDecoder::Create(
    ExampleDecoderOptions o, const JpegDecoderFactory& make_jpeg) {
  const ExampleInputSpec& in = o.input;
  auto bad = [&in](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("input feature '", in.key, "': ", what));
  };
  if (in.key.empty()) return absl::InvalidArgumentError("input feature: no key given");
  if (o.label_key.empty()) return absl::InvalidArgumentError("label: no key given");
  if (in.kind != FeatureKind::kJpeg) {
    if (in.shape.empty()) return bad("give the shape of one sample's input, e.g. [1, 28, 28]");
    for (int64_t d : in.shape) {
      if (d < 1) return bad(absl::StrCat("shape ", ShapeText(in.shape), " has a dimension < 1"));
    }
    if (in.channels_last_stored && in.shape.size() != 3) {
      return bad(
          absl::StrCat("channels_last_stored needs a [C, H, W] shape, got ", ShapeText(in.shape)));
    }
    if (in.kind == FeatureKind::kBytes && in.bytes_dtype != DataType::kUint8 &&
        in.bytes_dtype != DataType::kFloat32) {
      return bad(absl::StrCat("bytes of ", DataTypeName(in.bytes_dtype),
                              " are not supported (uint8 or float32)"));
    }
    if (!(in.divide_by != 0)) return bad("divide_by must not be 0");
    const int64_t channels = in.shape[0];
    for (const auto* v : {&in.mean, &in.stddev}) {
      if (v->size() != 1 && static_cast<int64_t>(v->size()) != channels) {
        return bad(absl::StrCat("mean and stddev need 1 or ", channels,
                                " values (the first dimension of the shape), got ", v->size()));
      }
    }
    for (float s : in.stddev) {
      if (!(s != 0)) return bad("stddev must not be 0");
    }
  }
  return std::shared_ptr<const ExampleDecoder>(new ExampleDecoder(std::move(o), make_jpeg));
}

ExampleDecoder::ExampleDecoder(ExampleDecoderOptions o, const JpegDecoderFactory& make_jpeg)
    : options_(std::move(o)) {
  const ExampleInputSpec& in = options_.input;
  if (in.kind == FeatureKind::kJpeg) {
    ImageNetDecoderOptions jpeg = in.jpeg;
    jpeg.dtype = DataType::kFloat32;
    if (make_jpeg) jpeg_ = make_jpeg(jpeg);
    if (!jpeg_) jpeg_ = std::make_unique<ImageNetDecoder>(std::move(jpeg));
    return;
  }
  num_elements_ = 1;
  for (int64_t d : in.shape) num_elements_ *= d;
  // The arithmetic RawImageDecoder uses, so a preset decodes to the same floats.
  for (int64_t k = 0; k < in.shape[0]; ++k) {
    const float mean = in.mean[in.mean.size() == 1 ? 0 : static_cast<size_t>(k)];
    const float sd = in.stddev[in.stddev.size() == 1 ? 0 : static_cast<size_t>(k)];
    scale_.push_back(1.0f / (in.divide_by * sd));
    shift_.push_back(-mean / sd);
  }
}

TensorShape ExampleDecoder::sample_shape() const {
  if (jpeg_) return jpeg_->sample_shape();
  return TensorShape(options_.input.shape);
}

template <typename Get>
void ExampleDecoder::Store(int64_t n, Get get, float* out) const {
  const ExampleInputSpec& in = options_.input;
  const int64_t c = in.shape[0];
  const int64_t plane = n / c;
  if (in.channels_last_stored) {
    for (int64_t p = 0; p < plane; ++p)
      for (int64_t k = 0; k < c; ++k)
        out[k * plane + p] = static_cast<float>(get(p * c + k)) * scale_[k] + shift_[k];
    return;
  }
  for (int64_t k = 0; k < c; ++k)
    for (int64_t p = 0; p < plane; ++p)
      out[k * plane + p] = static_cast<float>(get(k * plane + p)) * scale_[k] + shift_[k];
}

absl::Status ExampleDecoder::Decode(absl::string_view record, const SampleContext& context,
                                    void* out, int64_t* label) const {
  Example example;
  HVX_RETURN_IF_ERROR(ParseExample(record, &example));
  HVX_ASSIGN_OR_RETURN(*label, GetInt64(example, options_.label_key));
  const ExampleInputSpec& in = options_.input;
  auto* dst = static_cast<float*>(out);
  auto count_error = [&](int64_t found, absl::string_view unit, int64_t expected,
                         absl::string_view detail) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", in.key, "' has ", found, " ", unit,
                                                   ", expected ", expected, detail,
                                                   " for the input shape ", ShapeText(in.shape)));
  };
  switch (in.kind) {
    case FeatureKind::kJpeg: {
      HVX_ASSIGN_OR_RETURN(absl::string_view jpeg, GetBytes(example, in.key));
      return Annotate(jpeg_->DecodeImage(jpeg, context, out),
                      absl::StrCat("feature '", in.key, "' (jpeg)"));
    }
    case FeatureKind::kFloatList: {
      HVX_ASSIGN_OR_RETURN(absl::Span<const float> values, GetFloatList(example, in.key));
      if (static_cast<int64_t>(values.size()) != num_elements_)
        return count_error(values.size(), "float values", num_elements_, "");
      Store(
          num_elements_, [&values](int64_t i) { return values[i]; }, dst);
      return absl::OkStatus();
    }
    case FeatureKind::kInt64List: {
      HVX_ASSIGN_OR_RETURN(absl::Span<const int64_t> values, GetInt64List(example, in.key));
      if (static_cast<int64_t>(values.size()) != num_elements_)
        return count_error(values.size(), "int64 values", num_elements_, "");
      Store(
          num_elements_, [&values](int64_t i) { return values[i]; }, dst);
      return absl::OkStatus();
    }
    case FeatureKind::kBytes: {
      HVX_ASSIGN_OR_RETURN(absl::string_view bytes, GetBytes(example, in.key));
      const int64_t width = in.bytes_dtype == DataType::kFloat32 ? 4 : 1;
      if (static_cast<int64_t>(bytes.size()) != num_elements_ * width) {
        return count_error(
            bytes.size(), "bytes", num_elements_ * width,
            absl::StrCat(" (", num_elements_, " ", DataTypeName(in.bytes_dtype), " values)"));
      }
      if (width == 1) {
        const auto* src = reinterpret_cast<const uint8_t*>(bytes.data());
        Store(
            num_elements_, [src](int64_t i) { return src[i]; }, dst);
      } else {
        Store(
            num_elements_,
            [&bytes](int64_t i) {
              float v;
              std::memcpy(&v, bytes.data() + 4 * i, 4);
              return v;
            },
            dst);
      }
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown feature kind");
}

}  // namespace data
}  // namespace hvx
