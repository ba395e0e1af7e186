#include "hvx/common/types.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hvx {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

absl::string_view DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBfloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kBool:
      return "bool";
    case DataType::kInt16:
      return "int16";
  }
  return "unknown";
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  for (DataType t : kAllDataTypes) {
    if (n == DataTypeName(t)) return t;
  }
  if (n == "float") return DataType::kFloat32;
  if (n == "double") return DataType::kFloat64;
  if (n == "half") return DataType::kFloat16;
  if (n == "int") return DataType::kInt32;
  if (n == "long") return DataType::kInt64;
  if (n == "short") return DataType::kInt16;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown data type '", name,
      "': expected uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64 or "
      "bool"));
}

bool IsFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBfloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

std::string Device::ToString() const {
  if (type == DeviceType::kCpu) return "cpu";
  return absl::StrCat("cuda:", index);
}

int64_t TensorShape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t TensorShape::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims_.size(); ++i) n *= dims_[i];
  return n;
}

absl::Status TensorShape::Validate() const {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", DebugString(), " has negative dimension ", i));
    }
  }
  return absl::OkStatus();
}

std::string TensorShape::DebugString() const {
  return absl::StrCat("[", absl::StrJoin(dims_, ", "), "]");
}

std::string TensorRef::DebugString() const {
  return absl::StrCat(DataTypeName(dtype_), shape_.DebugString(), " ", device_.ToString());
}

}  // namespace hvx
