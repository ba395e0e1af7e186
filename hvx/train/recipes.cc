#include "hvx/train/recipes.h"

#include <ATen/autocast_mode.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hvx/torch/gradient_sync.h"
#include "hvx/torch/optimizer_state.h"
#include "hvx/torch/version.h"

namespace hvx {
namespace train {
namespace {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamGroup;

std::unique_ptr<OptimizerOptions> OptionsFor(const OptimizerConfig& o, double weight_decay) {
  switch (o.kind()) {
    case OptimizerConfig::ADAM:
      return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(o.lr())
                                                             .betas({o.beta1(), o.beta2()})
                                                             .eps(o.eps())
                                                             .weight_decay(weight_decay));
    case OptimizerConfig::ADAMW:
    case OptimizerConfig::LAMB:
      return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(o.lr())
                                                              .betas({o.beta1(), o.beta2()})
                                                              .eps(o.eps())
                                                              .weight_decay(weight_decay));
    default:
      return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(o.lr())
                                                            .momentum(o.momentum())
                                                            .nesterov(o.nesterov())
                                                            .weight_decay(weight_decay));
  }
}

}  // namespace

at::Tensor Lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  // With a norm sum (sharded tensors), every update is computed first so that the squared norms
  // of all tensors are summed over ranks at once; without, each is applied as it is computed.
  struct Pending {
    at::Tensor p, update;
    double lr;
  };
  std::vector<Pending> pending;
  std::vector<double> squares;
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const at::Tensor& grad = p.grad();
      const auto key = StateKeyOf(p);
      auto found = state_.find(key);
      if (found == state_.end()) {
        auto state = std::make_unique<torch::optim::AdamWParamState>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      state.step(state.step() + 1);
      state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
      state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const double correction1 = 1 - std::pow(beta1, state.step());
      const double correction2 = 1 - std::pow(beta2, state.step());
      at::Tensor update = (state.exp_avg() / correction1) /
                          ((state.exp_avg_sq() / correction2).sqrt_().add_(options.eps()));
      if (options.weight_decay() != 0) update.add_(p, options.weight_decay());
      const double w_norm = p.norm().item<double>();
      const double u_norm = update.norm().item<double>();
      if (norm_sum_) {
        squares.push_back(w_norm * w_norm);
        squares.push_back(u_norm * u_norm);
        pending.push_back({p, update, options.lr()});
        continue;
      }
      const double trust = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
      p.add_(update, -options.lr() * trust);
    }
  }
  if (!norm_sum_) return loss;
  const absl::Status summed = norm_sum_(&squares);
  TORCH_CHECK(summed.ok(), "LAMB's norms over ranks: ", summed.ToString());
  for (size_t i = 0; i < pending.size(); ++i) {
    const double w_norm = std::sqrt(squares[2 * i]), u_norm = std::sqrt(squares[2 * i + 1]);
    const double trust = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
    pending[i].p.add_(pending[i].update, -pending[i].lr * trust);
  }
  return loss;
}

bool IsBiasOrNorm(const std::string& name, int64_t dims) {
  return dims <= 1 || name == "bias" || absl::EndsWith(name, ".bias");
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const OptimizerConfig& o,
                                                                       torch::nn::Module& model) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    const bool exempt =
        o.no_decay_on_bias_and_norm() && IsBiasOrNorm(item.key(), item.value().dim());
    (exempt ? no_decay : decay).push_back(item.value());
  }
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(decay, OptionsFor(o, o.weight_decay()));
  if (o.no_decay_on_bias_and_norm()) groups.emplace_back(no_decay, OptionsFor(o, 0.0));
  try {
    switch (o.kind()) {
      case OptimizerConfig::SGD:
        return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<torch::optim::SGD>(
            std::move(groups), static_cast<torch::optim::SGDOptions&>(*OptionsFor(o, 0))));
      case OptimizerConfig::ADAM:
        return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<torch::optim::Adam>(
            std::move(groups), static_cast<torch::optim::AdamOptions&>(*OptionsFor(o, 0))));
      case OptimizerConfig::ADAMW:
        return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<torch::optim::AdamW>(
            std::move(groups), static_cast<torch::optim::AdamWOptions&>(*OptionsFor(o, 0))));
      case OptimizerConfig::LAMB:
        return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<Lamb>(
            std::move(groups), static_cast<torch::optim::AdamWOptions&>(*OptionsFor(o, 0))));
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer.kind: unknown optimizer ", static_cast<int>(o.kind())));
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer: ", e.what_without_backtrace()));
  }
}

std::vector<std::pair<int64_t, int64_t>> MicroBatches(int64_t rows, int64_t passes) {
  passes = std::max<int64_t>(1, std::min(passes, rows));
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (int64_t i = 0, begin = 0; i < passes; ++i) {
    const int64_t n = rows / passes + (i < rows % passes ? 1 : 0);
    parts.emplace_back(begin, n);
    begin += n;
  }
  return parts;
}

namespace {

// The gradients of `model`'s parameters that have one.
std::vector<at::Tensor> DefinedGradients(torch::nn::Module& model) {
  std::vector<at::Tensor> grads;
  for (const auto& p : model.parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

}  // namespace

double ClipGradients(torch::nn::Module& model, double max_norm) {
  return ClipGlobalNorm(DefinedGradients(model), max_norm);
}

at::Tensor TrainingLoss(const at::Tensor& logits, const at::Tensor& labels, double smoothing) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().label_smoothing(smoothing));
}

int64_t CountTopK(const at::Tensor& logits, const at::Tensor& labels, int64_t k) {
  k = std::min<int64_t>(k, logits.size(1));
  const at::Tensor top = std::get<1>(logits.topk(k, /*dim=*/1));
  return top.eq(labels.unsqueeze(1)).any(1).sum().item<int64_t>();
}

WeightAverage::WeightAverage(torch::nn::Module& model, double decay) : decay_(decay) {
  torch::NoGradGuard no_grad;
  for (const auto& item : model.named_parameters()) {
    averages_.emplace_back(item.key(), item.value().detach().clone());
    live_.push_back(item.value());
  }
}

void WeightAverage::Update(int64_t step) {
  torch::NoGradGuard no_grad;
  const double d = std::min(decay_, (1.0 + step) / (10.0 + step));
  for (size_t i = 0; i < live_.size(); ++i) {
    averages_[i].second.mul_(d).add_(live_[i].detach(), 1 - d);
  }
}

void WeightAverage::Swap() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) {
    at::Tensor live = live_[i].detach().clone();
    live_[i].detach().copy_(averages_[i].second);
    averages_[i].second.copy_(live);
  }
}

AutocastGuard::AutocastGuard(c10::DeviceType device_type, at::ScalarType dtype)
    : active_(dtype != at::kFloat),
      device_(device_type == c10::DeviceType::CUDA ? c10::DeviceType::CUDA : c10::DeviceType::CPU) {
  if (!active_) return;
#if HVX_TORCH_AT_LEAST(2, 4)
  was_enabled_ = at::autocast::is_autocast_enabled(device_);
  was_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, dtype);
#else
  if (device_ == c10::DeviceType::CUDA) {
    was_enabled_ = at::autocast::is_enabled();
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost guard drops the casts cached for this forward (weights cast once).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if HVX_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device_, was_enabled_);
  at::autocast::set_autocast_dtype(device_, was_dtype_);
#else
  if (device_ == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  }
#endif
}

LossScaler::LossScaler(double initial_scale, int64_t growth_interval)
    : growth_interval_(growth_interval) {
  state_.emplace_back("loss_scale", torch::tensor({initial_scale, 0.0, 0.0}, torch::kFloat64));
}

bool LossScaler::UnscaleOrSkip(torch::nn::Module& model) {
  const std::vector<at::Tensor> grads = DefinedGradients(model);
  return UnscaleOrSkip(grads, TensorsAllFinite(grads));
}

bool LossScaler::UnscaleOrSkip(const std::vector<at::Tensor>& grads, bool all_finite) {
  torch::NoGradGuard no_grad;
  double* v = values();
  if (!all_finite) {
    v[0] *= 0.5;
    v[1] = 0;
    v[2] += 1;
    return false;
  }
  for (const auto& g : grads) at::Tensor(g).mul_(1.0 / v[0]);
  if (++v[1] >= growth_interval_) {
    v[0] *= 2;
    v[1] = 0;
  }
  return true;
}

}  // namespace train
}  // namespace hvx
