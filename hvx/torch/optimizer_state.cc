#include "hvx/torch/optimizer_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"

namespace hvx {
namespace {

at::Tensor MapDefined(const at::Tensor& t, const StateTensorFn& fn) {
  return t.defined() ? fn(t) : t;
}

// Adam's and AdamW's states have the same fields.
template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> MapAdam(const State& s,
                                                           const StateTensorFn& fn) {
  auto out = std::make_unique<State>();
  out->step(s.step());
  out->exp_avg(MapDefined(s.exp_avg(), fn));
  out->exp_avg_sq(MapDefined(s.exp_avg_sq(), fn));
  out->max_exp_avg_sq(MapDefined(s.max_exp_avg_sq(), fn));
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> MapStateTensors(
    const torch::optim::OptimizerParamState& state, const StateTensorFn& fn,
    const std::string& what) {
  if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    auto out = std::make_unique<torch::optim::SGDParamState>();
    out->momentum_buffer(MapDefined(s->momentum_buffer(), fn));
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(out));
  }
  if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    return MapAdam(*s, fn);
  }
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    return MapAdam(*s, fn);
  }
  return absl::UnimplementedError(
      absl::StrCat(what,
                   ": sharding supports the state of SGD, Adam and AdamW (and optimizers "
                   "built on them); this optimizer keeps another kind"));
}

absl::Status ForEachStateTensor(const torch::optim::OptimizerParamState& state,
                                const std::function<void(const at::Tensor&)>& fn,
                                const std::string& what) {
  return MapStateTensors(
             state,
             [&fn](const at::Tensor& t) {
               fn(t);
               return t;
             },
             what)
      .status();
}

int64_t OptimizerStateBytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    ForEachStateTensor(
        *state, [&](const at::Tensor& t) { bytes += t.numel() * t.element_size(); }, "state")
        .IgnoreError();
  }
  return bytes;
}

}  // namespace hvx
