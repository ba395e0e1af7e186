// The pieces of a training recipe that sit around the optimizer step: the optimizer itself (SGD,
// Adam, AdamW, LAMB) with its weight-decay groups, gradient clipping, the training loss with label
// smoothing, top-k counting and an exponential moving average of the weights.
//
//   HVX_ASSIGN_OR_RETURN(auto optimizer, MakeOptimizer(config.optimizer(), model));
//   loss = TrainingLoss(logits, labels, config.label_smoothing());
//   ...averaged gradients...
//   const double norm = ClipGradients(model, config.optimizer().clip_grad_norm());
//   optimizer->step();
//   ema.Update(model, global_step);
#ifndef HVX_TRAIN_RECIPES_H_
#define HVX_TRAIN_RECIPES_H_

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019): for each parameter
// tensor w with Adam moments m, v at step t,
//   r = m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * w
//   w -= lr * trust * r,   trust = ||w|| / ||r|| (1 when either norm is 0).
// It shares AdamW's options and per-parameter state, so it saves, loads and broadcasts as AdamW.
class Lamb : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;
  // For parameters that are slices of tensors spread over ranks (ShardedOptimizer): sums each
  // tensor's squared norms (of the weights and of the update, interleaved) over ranks in place,
  // so the trust ratio is the whole tensor's. One call per step, on every rank.
  using NormSum = std::function<absl::Status(std::vector<double>*)>;
  void set_norm_sum(NormSum sum) { norm_sum_ = std::move(sum); }

 private:
  NormSum norm_sum_;
};

// The optimizer `o` asks for over `model`'s parameters. With o.no_decay_on_bias_and_norm() there
// are two param groups: [0] the parameters that decay, [1] biases and every parameter of at most
// one dimension (normalisation weights), with weight_decay 0.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const OptimizerConfig& o,
                                                                       torch::nn::Module& model);

// Whether `name` (a parameter of shape `dims` dimensions) is left out of weight decay under
// no_decay_on_bias_and_norm.
bool IsBiasOrNorm(const std::string& name, int64_t dims);

// Gradient accumulation: the micro-batches of a batch of `rows` rows in `passes` backward passes
// (no more than one per row), as {first row, rows} in order, as even as they go: the first
// rows % passes of them one row longer.
std::vector<std::pair<int64_t, int64_t>> MicroBatches(int64_t rows, int64_t passes);

// Scales every gradient of `model` so that their global L2 norm is at most max_norm (> 0) and
// returns the norm before scaling; max_norm <= 0 only measures it. Parameters without a gradient
// count as zero.
double ClipGradients(torch::nn::Module& model, double max_norm);

// Mean cross-entropy of `logits` [N, C] against int64 `labels` [N] with label smoothing s: the
// target is (1 - s) on the label and s / C spread over every class.
at::Tensor TrainingLoss(const at::Tensor& logits, const at::Tensor& labels, double smoothing);

// How many rows of `logits` have their label among the k largest logits (all C when k >= C).
int64_t CountTopK(const at::Tensor& logits, const at::Tensor& labels, int64_t k);

// An exponential moving average of a module's parameters (not its buffers: the model that uses it
// takes the live model's BatchNorm statistics). Every rank keeps the same average, since every
// rank steps the same parameters.
class WeightAverage {
 public:
  // Starts from `model`'s current parameters. decay in (0, 1).
  WeightAverage(torch::nn::Module& model, double decay);

  // After the optimizer step that makes `step` steps done (1 after the first):
  // avg = d * avg + (1 - d) * w with d = min(decay, (1 + step) / (10 + step)).
  void Update(int64_t step);
  // Exchanges the live parameters and the averages (twice restores them).
  void Swap();
  // The averages by parameter name, sharing memory: what checkpoints store and load into.
  std::vector<std::pair<std::string, at::Tensor>>& averages() { return averages_; }

 private:
  double decay_;
  std::vector<std::pair<std::string, at::Tensor>> averages_;
  std::vector<at::Tensor> live_;
};

// While alive, `average`'s weights are the module's (for evaluation and export); a null average
// does nothing.
class UseAveragedWeights {
 public:
  explicit UseAveragedWeights(WeightAverage* average) : average_(average) {
    if (average_ != nullptr) average_->Swap();
  }
  ~UseAveragedWeights() {
    if (average_ != nullptr) average_->Swap();
  }
  UseAveragedWeights(const UseAveragedWeights&) = delete;
  UseAveragedWeights& operator=(const UseAveragedWeights&) = delete;

 private:
  WeightAverage* average_;
};

// Mixed precision: while alive, eligible operations on `device_type` (CPU or CUDA) run in `dtype`
// (kBFloat16, or kHalf on CUDA), as torch.autocast does; kFloat does nothing. Guards nest.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, at::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  const bool active_;
  const c10::DeviceType device_;  // CUDA or CPU
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

// Dynamic loss scaling for float16 training, as torch.cuda.amp.GradScaler: the loss is multiplied
// by scale() before backward; after the gradients are averaged over ranks (so every rank decides
// alike), UnscaleOrSkip() divides them by the scale when all are finite, and otherwise asks for the
// step to be skipped and halves the scale; after growth_interval good steps in a row the scale
// doubles.
class LossScaler {
 public:
  explicit LossScaler(double initial_scale = 65536.0, int64_t growth_interval = 2000);

  double scale() const { return values()[0]; }
  int64_t skipped_steps() const { return static_cast<int64_t>(values()[2]); }
  // True: the gradients of `model` are unscaled, step. False: some gradient is inf or NaN, skip.
  bool UnscaleOrSkip(torch::nn::Module& model);
  // The same over `grads`, where `all_finite` is whether every gradient of the step is finite
  // (GradientSync::AllFinite: on every rank, when each rank holds slices).
  bool UnscaleOrSkip(const std::vector<at::Tensor>& grads, bool all_finite);
  // "loss_scale": float64 [scale, good steps in a row, skipped steps], for checkpoints.
  std::vector<std::pair<std::string, at::Tensor>>& state() { return state_; }

 private:
  const double* values() const { return state_[0].second.data_ptr<double>(); }
  double* values() { return state_[0].second.data_ptr<double>(); }

  const int64_t growth_interval_;
  std::vector<std::pair<std::string, at::Tensor>> state_;
};

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_RECIPES_H_
