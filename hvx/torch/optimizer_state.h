// A LibTorch optimizer's per-parameter state, whatever the LibTorch version: its key and its
// tensors.
#ifndef HVX_TORCH_OPTIMIZER_STATE_H_
#define HVX_TORCH_OPTIMIZER_STATE_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

// A per-parameter state by name: its defined tensors by field ("momentum_buffer" for SGD;
// "exp_avg", "exp_avg_sq", "max_exp_avg_sq" for Adam and AdamW) and its step count (Adam, AdamW).
struct StateFields {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::optional<int64_t> step;
};
// The fields of `state` (the kinds MapStateTensors knows; Unimplemented naming `what` for others).
absl::StatusOr<StateFields> GetStateFields(const torch::optim::OptimizerParamState& state,
                                           const std::string& what);
// A new state of the kind `optimizer` keeps (by its first param group's options: SGD's, Adam's or
// AdamW's) holding `fields`. InvalidArgument naming `what` for a field that kind has not;
// Unimplemented for another kind of optimizer.
absl::StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> MakeState(
    const torch::optim::Optimizer& optimizer, const StateFields& fields, const std::string& what);

// Bytes of every state tensor `optimizer` holds (kinds ForEachStateTensor knows).
int64_t OptimizerStateBytes(const torch::optim::Optimizer& optimizer);

}  // namespace hvx

#endif  // HVX_TORCH_OPTIMIZER_STATE_H_
