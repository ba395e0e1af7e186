// Element types, shapes and non-owning tensor views shared by every hvx package.
//
//   float grads[6];
//   TensorRef t(DataType::kFloat32, TensorShape({2, 3}), grads);   // CPU by default
//   t.num_bytes();            // 24
//   t.DebugString();          // "float32[2, 3] cpu"
#ifndef HVX_COMMON_TYPES_H_
#define HVX_COMMON_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hvx {

enum class DataType : uint8_t {
  kUint8 = 0,
  kInt8,
  kInt32,
  kInt64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
  kBool,
  // Appended, so that the wire values of the types before it stay as they were.
  kInt16,
};

// Every type, integers first by width (not in wire order).
inline constexpr DataType kAllDataTypes[] = {
    DataType::kUint8,   DataType::kInt8,    DataType::kInt16,    DataType::kInt32,
    DataType::kInt64,   DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
    DataType::kFloat64, DataType::kBool,
};

// Bytes per element, in kAllDataTypes' order: 1, 1, 2, 4, 8, 2, 2, 4, 8, 1.
size_t DataTypeSize(DataType dtype);
// In kAllDataTypes' order: "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
// "float32", "float64", "bool".
absl::string_view DataTypeName(DataType dtype);
// The inverse of DataTypeName; also accepts "float", "double", "half", "short", "int", "long".
absl::StatusOr<DataType> ParseDataType(absl::string_view name);
bool IsFloatingPoint(DataType dtype);

enum class DeviceType : uint8_t { kCpu = 0, kCuda };

// Where a tensor's memory lives. CUDA devices carry the device ordinal.
struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device Cpu() { return Device{}; }
  static Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  // "cpu" or "cuda:N".
  std::string ToString() const;
  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == DeviceType::kCpu || a.index == b.index);
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// The dimensions of a dense tensor. A rank-0 shape (no dims) holds one element.
class TensorShape {
 public:
  TensorShape() = default;
  TensorShape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit TensorShape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  void AddDim(int64_t d) { dims_.push_back(d); }
  void set_dim(int i, int64_t d) { dims_[i] = d; }

  // Product of the dims (1 for rank 0).
  int64_t num_elements() const;
  // Elements in one slice along the first dimension: product of dims[1:] (1 for rank <= 1).
  int64_t row_elements() const;
  // InvalidArgument naming the first negative dimension.
  absl::Status Validate() const;
  // "[2, 3]"; "[]" for a scalar.
  std::string DebugString() const;

  friend bool operator==(const TensorShape& a, const TensorShape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const TensorShape& a, const TensorShape& b) { return !(a == b); }

 private:
  std::vector<int64_t> dims_;
};

// What a data plane must wait for before it touches a tensor on a device: the work the framework
// had queued on its stream when the op was submitted (Horovod's ready event). The framework bridge
// makes it (hvx/torch records a CUDA event on torch's current stream); the device's data plane
// waits for native() on its own stream (a cudaEvent_t for the NCCL plane). CPU tensors have none.
class ReadyEvent {
 public:
  virtual ~ReadyEvent() = default;
  virtual void* native() const = 0;
};

// A non-owning view of a dense, contiguous tensor. The memory must outlive every use of the view;
// copying the view does not copy the data.
class TensorRef {
 public:
  TensorRef() = default;
  TensorRef(DataType dtype, TensorShape shape, void* data, Device device = Device::Cpu())
      : dtype_(dtype), shape_(std::move(shape)), data_(data), device_(device) {}

  DataType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  const Device& device() const { return device_; }
  // Set by the framework bridge for a device tensor whose producer ran asynchronously.
  const std::shared_ptr<const ReadyEvent>& ready() const { return ready_; }
  void set_ready(std::shared_ptr<const ReadyEvent> ready) { ready_ = std::move(ready); }

  int64_t num_elements() const { return shape_.num_elements(); }
  size_t num_bytes() const { return static_cast<size_t>(num_elements()) * DataTypeSize(dtype_); }
  // "float32[2, 3] cpu".
  std::string DebugString() const;

 private:
  DataType dtype_ = DataType::kFloat32;
  TensorShape shape_;
  void* data_ = nullptr;
  Device device_;
  std::shared_ptr<const ReadyEvent> ready_;
};

}  // namespace hvx

#endif  // HVX_COMMON_TYPES_H_
