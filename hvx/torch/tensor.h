// LibTorch tensors in hvx collectives: views, synchronous and asynchronous collectives, broadcast
// of model and optimizer state, and averaging of metrics across ranks.
//
//   HVX_RETURN_IF_ERROR(hvx::BroadcastParameters(*model, /*root_rank=*/0));
//   HVX_ASSIGN_OR_RETURN(double loss, hvx::AverageMetric(local_loss, "eval.loss"));
//
// Names passed here must be the same on every rank (see hvx/core/api.h); each function prefixes
// its own ("param.", "buffer.", "optimizer.", "metric.") so they never collide with gradients.
// hvx must be initialized (hvx::Init) before any collective here is called.
#ifndef HVX_TORCH_TENSOR_H_
#define HVX_TORCH_TENSOR_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/common/types.h"
#include "hvx/core/api.h"

namespace hvx {

// The hvx element type of a torch scalar type: Byte, Char, Int, Long, Half, BFloat16, Float,
// Double, Bool. InvalidArgument for others (Short, complex, quantized).
absl::StatusOr<DataType> ToDataType(at::ScalarType type);
at::ScalarType ToScalarType(DataType dtype);

// A view of `tensor`'s memory; the tensor must outlive the view. InvalidArgument for a
// non-contiguous or undefined tensor or an unsupported dtype; the message includes `name`.
absl::StatusOr<TensorRef> AsTensorRef(const at::Tensor& tensor, const std::string& name = "tensor");

// An output allocator for ops whose output shape is known only after negotiation (allgather,
// alltoall, reduce-scatter): on hvx's thread, a new tensor like `like` (dtype, device) of the
// agreed shape into *output, which the caller reads once the op completed.
OutputAllocator AllocateLike(std::shared_ptr<at::Tensor> output, const at::Tensor& like);

// Asynchronous in-place allreduce of `tensor`. The tensor (and its storage) must stay alive and
// untouched until the handle completes.
absl::StatusOr<Handle> AllreduceAsync(const std::string& name, const at::Tensor& tensor,
                                      const AllreduceOptions& options = {});
// Allreduce in place and wait.
absl::Status AllreduceInPlace(const std::string& name, const at::Tensor& tensor,
                              const AllreduceOptions& options = {});
// Concatenation of every rank's `tensor` along dim 0, in rank order, on the tensor's device.
absl::StatusOr<at::Tensor> Allgather(const std::string& name, const at::Tensor& tensor,
                                     const ProcessSet& process_set = {});
// Asynchronous allgather of `input` (along dim 0) straight into `output`, which must be
// contiguous, of the input's dtype and device, and hold exactly the concatenation's elements
// (any shape: a parameter's memory for its gathered shards). Both must stay alive and untouched
// until the handle completes; the handle fails when the sizes do not match.
absl::StatusOr<Handle> AllgatherInto(const std::string& name, const at::Tensor& input,
                                     const at::Tensor& output, const ProcessSet& process_set = {});
// Asynchronous reduce-scatter of `input` into `output`, which holds exactly this rank's rows
// (ReduceScatterRows), contiguous, of the input's dtype and device.
absl::StatusOr<Handle> ReduceScatterInto(const std::string& name, const at::Tensor& input,
                                         const at::Tensor& output,
                                         const ReduceScatterOptions& options = {});
// Broadcast from `root_rank` into `tensor`, in place, and wait.
absl::Status BroadcastInPlace(const std::string& name, const at::Tensor& tensor, int root_rank,
                              const ProcessSet& process_set = {});

// Broadcasts `named` tensors from root_rank in place, sorted by name, and waits for all.
// Every rank must pass the same names with the same shapes; tensors that are not contiguous
// (channels_last) go through a contiguous copy.
absl::Status BroadcastTensors(std::vector<std::pair<std::string, at::Tensor>> named, int root_rank,
                              const std::string& prefix);
// Every parameter and buffer of `module` (recursively) takes root_rank's value.
absl::Status BroadcastParameters(const torch::nn::Module& module, int root_rank);

// Copies `bytes` from root_rank to every rank (length first, then the payload).
absl::Status BroadcastBytes(const std::string& name, std::string* bytes, int root_rank);

// Every rank's `bytes`, by rank (lengths first, then one allgather of the payloads).
absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& name,
                                                        const std::string& bytes);

// Every rank's optimizer takes root_rank's state (SGD momentum buffers, Adam moments and step
// counts) and param-group options (lr, momentum, ...). Ranks must wrap the same parameter list.
// A state that does not exist yet on root (before the first step) is cleared on every rank.
absl::Status BroadcastOptimizerState(torch::optim::Optimizer& optimizer, int root_rank);

// The average of `value` over all ranks (global process set).
absl::StatusOr<double> AverageMetric(double value, const std::string& name);
// The sum of `values` over the process set's ranks, elementwise (for counts that must add up
// exactly).
absl::StatusOr<std::vector<double>> SumMetrics(std::vector<double> values, const std::string& name,
                                               const ProcessSet& process_set = {});

}  // namespace hvx

#endif  // HVX_TORCH_TENSOR_H_
