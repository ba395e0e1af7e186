// A LibTorch optimizer's per-parameter state, whatever the LibTorch version: its key and its
// tensors.
#ifndef HVX_TORCH_OPTIMIZER_STATE_H_
#define HVX_TORCH_OPTIMIZER_STATE_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"

namespace hvx {

// The key type of Optimizer::state(): a string of the TensorImpl's address before LibTorch 2.x,
// the pointer itself since.
using OptimizerStateKey =
    typename std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

// The key of parameter `p`'s state, as LibTorch's own optimizers make it (a template only so
// that the branch of the other LibTorch version is discarded).
template <typename Key = OptimizerStateKey>
Key StateKeyOf(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// A copy of `state` (SGD's, Adam's or AdamW's) with every defined tensor t replaced by fn(t)
// and step counts kept; fn is called in a fixed order for each kind of state. Unimplemented for
// other kinds, naming `what`.
using StateTensorFn = std::function<at::Tensor(const at::Tensor&)>;
absl::StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> MapStateTensors(
    const torch::optim::OptimizerParamState& state, const StateTensorFn& fn,
    const std::string& what);

// Calls fn for each defined tensor of `state` (the same kinds and order as MapStateTensors).
absl::Status ForEachStateTensor(const torch::optim::OptimizerParamState& state,
                                const std::function<void(const at::Tensor&)>& fn,
                                const std::string& what);

// Bytes of every state tensor `optimizer` holds (kinds ForEachStateTensor knows).
int64_t OptimizerStateBytes(const torch::optim::Optimizer& optimizer);

}  // namespace hvx

#endif  // HVX_TORCH_OPTIMIZER_STATE_H_
