#include "hvx/torch/tensor.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"

#if defined(HVX_TORCH_CUDA_EVENTS)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace hvx {
namespace {

#if defined(HVX_TORCH_CUDA_EVENTS)
// A CUDA event recorded on torch's current stream of a tensor's GPU when the op is submitted: the
// NCCL plane's stream waits for it, so a tensor produced on a side stream (torch.cuda.stream(s))
// is complete before the collective reads it, as with Horovod's ready events.
class CudaReadyEvent final : public ReadyEvent {
 public:
  explicit CudaReadyEvent(cudaEvent_t event) : event_(event) {}
  ~CudaReadyEvent() override { cudaEventDestroy(event_); }
  void* native() const override { return event_; }

 private:
  cudaEvent_t event_;
};

// None when torch's current stream is its default stream: the plane already waits for the legacy
// default stream.
absl::StatusOr<std::shared_ptr<const ReadyEvent>> RecordReadyEvent(const at::Tensor& tensor,
                                                                   const std::string& name) {
  const c10::DeviceIndex index = tensor.device().index();
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(index);
  if (stream == c10::cuda::getDefaultCUDAStream(index)) return nullptr;
  const c10::cuda::CUDAGuard guard(index);
  cudaEvent_t event = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err == cudaSuccess) {
    err = cudaEventRecord(event, stream.stream());
    if (err != cudaSuccess) cudaEventDestroy(event);
  }
  if (err != cudaSuccess) {
    return absl::InternalError(absl::StrCat(
        name, ": recording a CUDA event on torch's stream: ", cudaGetErrorString(err)));
  }
  return std::make_shared<const CudaReadyEvent>(event);
}
#endif

}  // namespace

absl::StatusOr<DataType> ToDataType(at::ScalarType type) {
  switch (type) {
    case at::kByte:
      return DataType::kUint8;
    case at::kChar:
      return DataType::kInt8;
    case at::kShort:
      return DataType::kInt16;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBfloat16;
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kBool:
      return DataType::kBool;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("torch dtype ", c10::toString(type), " has no hvx equivalent"));
  }
}

at::ScalarType ToScalarType(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return at::kByte;
    case DataType::kInt8:
      return at::kChar;
    case DataType::kInt16:
      return at::kShort;
    case DataType::kInt32:
      return at::kInt;
    case DataType::kInt64:
      return at::kLong;
    case DataType::kFloat16:
      return at::kHalf;
    case DataType::kBfloat16:
      return at::kBFloat16;
    case DataType::kFloat32:
      return at::kFloat;
    case DataType::kFloat64:
      return at::kDouble;
    case DataType::kBool:
      return at::kBool;
  }
  return at::kFloat;
}

absl::StatusOr<TensorRef> AsTensorRef(const at::Tensor& tensor, const std::string& name) {
  if (!tensor.defined())
    return absl::InvalidArgumentError(absl::StrCat(name, ": tensor is undefined"));
  if (!tensor.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": tensor is not contiguous; call .contiguous() first"));
  }
  auto dtype = ToDataType(tensor.scalar_type());
  if (!dtype.ok()) return Annotate(dtype.status(), name);
  Device device = Device::Cpu();
  if (tensor.is_cuda()) {
    device = Device::Cuda(tensor.device().index());
  } else if (!tensor.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": tensors on ", tensor.device().str(), " are not supported"));
  }
  TensorRef ref(*dtype, TensorShape(tensor.sizes().vec()), tensor.data_ptr(), device);
#if defined(HVX_TORCH_CUDA_EVENTS)
  if (tensor.is_cuda()) {
    HVX_ASSIGN_OR_RETURN(std::shared_ptr<const ReadyEvent> ready, RecordReadyEvent(tensor, name));
    ref.set_ready(std::move(ready));
  }
#endif
  return ref;
}

OutputAllocator AllocateLike(std::shared_ptr<at::Tensor> output, const at::Tensor& like) {
  const at::TensorOptions options = like.options();
  return [output = std::move(output), options](DataType, const TensorShape& shape,
                                               const Device&) -> absl::StatusOr<TensorRef> {
    *output = at::empty(shape.dims(), options);
    return AsTensorRef(*output, "output");
  };
}

absl::StatusOr<Handle> AllreduceAsync(const std::string& name, const at::Tensor& tensor,
                                      const AllreduceOptions& options) {
  HVX_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(tensor, name));
  return Allreduce(name, ref, ref, options);
}

absl::Status AllreduceInPlace(const std::string& name, const at::Tensor& tensor,
                              const AllreduceOptions& options) {
  HVX_ASSIGN_OR_RETURN(Handle handle, AllreduceAsync(name, tensor, options));
  return Wait(handle);
}

absl::StatusOr<at::Tensor> Allgather(const std::string& name, const at::Tensor& tensor,
                                     const ProcessSet& process_set) {
  HVX_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(tensor, name));
  // The output shape is known only after negotiation; the allocator runs on hvx's thread.
  auto output = std::make_shared<at::Tensor>();
  CollectiveOptions options;
  options.process_set = process_set;
  options.allocator = AllocateLike(output, tensor);
  Handle handle = hvx::Allgather(name, ref, options);
  HVX_RETURN_IF_ERROR(Wait(handle));
  return *output;
}

namespace {

// An output allocator that hands out `output` (of `what`) when the negotiated shape fits it.
OutputAllocator Into(const at::Tensor& output, const std::string& what) {
  return [output, what](DataType, const TensorShape& shape,
                        const Device&) -> absl::StatusOr<TensorRef> {
    if (shape.num_elements() != output.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the result has ",
                                                     shape.num_elements(), " elements, its output ",
                                                     output.numel()));
    }
    HVX_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(output, what));
    return TensorRef(ref.dtype(), shape, ref.data(), ref.device());
  };
}

absl::Status CheckOutputFits(const at::Tensor& input, const at::Tensor& output,
                             const std::string& name) {
  if (!output.defined() || !output.is_contiguous() || output.scalar_type() != input.scalar_type() ||
      output.device() != input.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": the output must be a contiguous tensor of the input's dtype and device"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Handle> AllgatherInto(const std::string& name, const at::Tensor& input,
                                     const at::Tensor& output, const ProcessSet& process_set) {
  HVX_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(input, name));
  HVX_RETURN_IF_ERROR(CheckOutputFits(input, output, name));
  CollectiveOptions options;
  options.process_set = process_set;
  options.allocator = Into(output, name);
  return hvx::Allgather(name, ref, options);
}

absl::StatusOr<Handle> ReduceScatterInto(const std::string& name, const at::Tensor& input,
                                         const at::Tensor& output,
                                         const ReduceScatterOptions& options) {
  HVX_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(input, name));
  HVX_RETURN_IF_ERROR(CheckOutputFits(input, output, name));
  ReduceScatterOptions o = options;
  o.allocator = Into(output, name);
  return hvx::ReduceScatter(name, ref, o);
}

absl::Status BroadcastInPlace(const std::string& name, const at::Tensor& tensor, int root_rank,
                              const ProcessSet& process_set) {
  HVX_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(tensor, name));
  CollectiveOptions options;
  options.process_set = process_set;
  return Wait(hvx::Broadcast(name, ref, root_rank, options));
}

absl::Status BroadcastTensors(std::vector<std::pair<std::string, at::Tensor>> named, int root_rank,
                              const std::string& prefix) {
  std::sort(named.begin(), named.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Handle> handles;
  // Writing into a leaf parameter is not something autograd should record.
  at::NoGradGuard no_grad;
  // Tensors in another memory layout (channels_last weights) travel as a contiguous copy in
  // logical order and are copied back, so ranks agree on values whatever their layouts.
  std::vector<std::pair<at::Tensor, at::Tensor>> staged;  // (tensor, contiguous copy)
  for (const auto& [name, tensor] : named) {
    at::Tensor sent = tensor;
    if (tensor.defined() && !tensor.is_contiguous()) {
      sent = tensor.contiguous();
      staged.emplace_back(tensor, sent);
    }
    HVX_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(sent, prefix + name));
    handles.push_back(hvx::Broadcast(prefix + name, ref, root_rank));
  }
  HVX_RETURN_IF_ERROR(WaitAll(handles));
  for (auto& [tensor, sent] : staged) tensor.copy_(sent);
  return absl::OkStatus();
}

absl::Status BroadcastParameters(const torch::nn::Module& module, int root_rank) {
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    params.emplace_back(item.key(), item.value());
  }
  HVX_RETURN_IF_ERROR(BroadcastTensors(std::move(params), root_rank, "param."));
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    buffers.emplace_back(item.key(), item.value());
  }
  return BroadcastTensors(std::move(buffers), root_rank, "buffer.");
}

absl::Status BroadcastBytes(const std::string& name, std::string* bytes, int root_rank) {
  int64_t length = static_cast<int64_t>(bytes->size());
  TensorRef length_ref(DataType::kInt64, TensorShape({1}), &length);
  HVX_RETURN_IF_ERROR(Wait(hvx::Broadcast(name + ".size", length_ref, root_rank)));
  if (length < 0) return absl::DataLossError(absl::StrCat(name, ": broadcast a negative length"));
  bytes->resize(static_cast<size_t>(length));
  if (length == 0) return absl::OkStatus();
  TensorRef payload(DataType::kUint8, TensorShape({length}), bytes->data());
  return Wait(hvx::Broadcast(name + ".bytes", payload, root_rank));
}

absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& name,
                                                        const std::string& bytes) {
  HVX_ASSIGN_OR_RETURN(at::Tensor lengths,
                       Allgather(name + ".size", at::full({1}, static_cast<int64_t>(bytes.size()),
                                                          at::dtype(at::kLong))));
  // A rank with nothing to say still sends one byte: the allgather of rows needs a row.
  std::string padded = bytes.empty() ? std::string(1, '\0') : bytes;
  at::Tensor mine =
      at::from_blob(padded.data(), {static_cast<int64_t>(padded.size())}, at::dtype(at::kByte));
  HVX_ASSIGN_OR_RETURN(at::Tensor all, Allgather(name + ".bytes", mine));
  std::vector<std::string> out;
  const char* p = reinterpret_cast<const char*>(all.data_ptr<uint8_t>());
  int64_t at = 0;
  for (int64_t r = 0; r < lengths.numel(); ++r) {
    const int64_t n = lengths[r].item<int64_t>();
    out.emplace_back(p + at, static_cast<size_t>(n));
    at += std::max<int64_t>(n, 1);
  }
  if (at != all.numel()) {
    return absl::InternalError(absl::StrCat(name, ": gathered ", all.numel(), " bytes, not ", at));
  }
  return out;
}

absl::Status BroadcastOptimizerState(torch::optim::Optimizer& optimizer, int root_rank) {
  // Serializing the whole optimizer carries every kind of state (momentum buffers, Adam moments and
  // step counts) and the param-group options without knowing the optimizer's type.
  std::string bytes;
  if (Rank() == root_rank) {
    torch::serialize::OutputArchive archive, state;
    optimizer.save(state);
    archive.write("state", state);
    // optimizer.load() restores state but not the param-group options (lr, momentum, betas...).
    for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
      torch::serialize::OutputArchive options;
      optimizer.param_groups()[i].options().serialize(options);
      archive.write("group" + std::to_string(i), options);
    }
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  HVX_RETURN_IF_ERROR(BroadcastBytes("optimizer.state", &bytes, root_rank));
  if (Rank() == root_rank) return absl::OkStatus();
  c10::optional<c10::Device> device;
  if (!optimizer.param_groups().empty() && !optimizer.param_groups()[0].params().empty()) {
    device = optimizer.param_groups()[0].params()[0].device();
  }
  try {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive, state;
    archive.load_from(in, device);
    archive.read("state", state);
    optimizer.state().clear();
    optimizer.load(state);
    for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
      torch::serialize::InputArchive options;
      archive.read("group" + std::to_string(i), options);
      optimizer.param_groups()[i].options().serialize(options);
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state from rank ", root_rank,
                     " does not fit this rank's optimizer: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> AverageMetric(double value, const std::string& name) {
  TensorRef ref(DataType::kFloat64, TensorShape({1}), &value);
  HVX_RETURN_IF_ERROR(Wait(Allreduce("metric." + name, ref, ref)));
  return value;
}

absl::StatusOr<std::vector<double>> SumMetrics(std::vector<double> values, const std::string& name,
                                               const ProcessSet& process_set) {
  if (values.empty()) return values;
  TensorRef ref(DataType::kFloat64, TensorShape({static_cast<int64_t>(values.size())}),
                values.data());
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.process_set = process_set;
  HVX_RETURN_IF_ERROR(Wait(Allreduce("metric." + name, ref, ref, options)));
  return values;
}

}  // namespace hvx
