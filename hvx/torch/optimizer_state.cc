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

absl::StatusOr<StateFields> GetStateFields(const torch::optim::OptimizerParamState& state,
                                           const std::string& what) {
  StateFields fields;
  auto add = [&fields](const char* name, const at::Tensor& t) {
    if (t.defined()) fields.tensors.emplace_back(name, t);
  };
  if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    add("momentum_buffer", s->momentum_buffer());
    return fields;
  }
  auto adam = [&](const auto& s) {
    fields.step = s.step();
    add("exp_avg", s.exp_avg());
    add("exp_avg_sq", s.exp_avg_sq());
    add("max_exp_avg_sq", s.max_exp_avg_sq());
    return fields;
  };
  if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) return adam(*s);
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&state)) return adam(*s);
  return absl::UnimplementedError(absl::StrCat(
      what, ": checkpoints keep the state of SGD, Adam and AdamW (and optimizers built on them)"));
}

namespace {

// Sets the field `name` of an Adam or AdamW state; false for a name it has not.
template <typename State>
bool SetAdamField(State& s, const std::string& name, const at::Tensor& t) {
  if (name == "exp_avg") {
    s.exp_avg(t);
  } else if (name == "exp_avg_sq") {
    s.exp_avg_sq(t);
  } else if (name == "max_exp_avg_sq") {
    s.max_exp_avg_sq(t);
  } else {
    return false;
  }
  return true;
}

template <typename State>
absl::StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> MakeAdam(
    const StateFields& fields, const std::string& what) {
  auto out = std::make_unique<State>();
  out->step(fields.step.value_or(0));
  for (const auto& [name, t] : fields.tensors) {
    if (!SetAdamField(*out, name, t)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": Adam's state has no field \"", name, "\""));
    }
  }
  return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(out));
}

}  // namespace

absl::StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> MakeState(
    const torch::optim::Optimizer& optimizer, const StateFields& fields, const std::string& what) {
  if (optimizer.param_groups().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the optimizer has no param groups"));
  }
  const torch::optim::OptimizerOptions& options = optimizer.param_groups()[0].options();
  if (dynamic_cast<const torch::optim::SGDOptions*>(&options) != nullptr) {
    auto out = std::make_unique<torch::optim::SGDParamState>();
    for (const auto& [name, t] : fields.tensors) {
      if (name != "momentum_buffer") {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": SGD's state has no field \"", name, "\""));
      }
      out->momentum_buffer(t);
    }
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(out));
  }
  if (dynamic_cast<const torch::optim::AdamWOptions*>(&options) != nullptr) {
    return MakeAdam<torch::optim::AdamWParamState>(fields, what);
  }
  if (dynamic_cast<const torch::optim::AdamOptions*>(&options) != nullptr) {
    return MakeAdam<torch::optim::AdamParamState>(fields, what);
  }
  return absl::UnimplementedError(absl::StrCat(
      what, ": checkpoints keep the state of SGD, Adam and AdamW (and optimizers built on them)"));
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
