#include "hvx/torch/distributed_optimizer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/torch/tensor.h"

namespace hvx {

absl::StatusOr<GradientCompression> ParseGradientCompression(const std::string& name) {
  if (name.empty() || name == "none") return GradientCompression::kNone;
  if (name == "fp16") return GradientCompression::kFloat16;
  if (name == "bf16") return GradientCompression::kBfloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown gradient compression \"", name, "\"; use none, fp16 or bf16"));
}

ShardRange ShardOf(int64_t numel, int size, int rank) {
  ShardRange r;
  for (int q = 0; q < rank; ++q) r.begin += ReduceScatterRows(numel, size, q);
  r.size = ReduceScatterRows(numel, size, rank);
  return r;
}

struct DistributedOptimizer::Param {
  std::string name;  // "grad.<parameter name>"
  at::Tensor tensor;
  // Kept alive here: autograd holds it only weakly, and the hook lives on it.
  std::shared_ptr<torch::autograd::Node> grad_accumulator;
  uintptr_t hook_key = 0;
  int passes_left = 0;
  bool submitted = false;
  Handle handle;
  // What travels: the gradient itself, or its float16/bfloat16 copy.
  at::Tensor exchanged;
  // reduce_scatter: where this rank's slice of the average lands (the exchanged dtype), and the
  // slice in the gradient's dtype once Synchronize() returned.
  at::Tensor scattered;
  at::Tensor shard;
  bool finished = false;  // the exchange completed and its result is in place
};

class DistributedOptimizer::Hook : public torch::autograd::FunctionPostHook {
 public:
  Hook(DistributedOptimizer* owner, size_t index) : owner_(owner), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    owner_->OnGradient(index_);
    return outputs;
  }

 private:
  DistributedOptimizer* const owner_;
  const size_t index_;
};

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           const DistributedOptimizerOptions& options)
    : optimizer_(optimizer),
      options_(options),
      exchange_(options.process_set.size() > 1 || options.reduce_scatter) {}

absl::StatusOr<std::unique_ptr<DistributedOptimizer>> DistributedOptimizer::Create(
    torch::optim::Optimizer& optimizer,
    const torch::OrderedDict<std::string, at::Tensor>& named_parameters,
    const DistributedOptimizerOptions& options) {
  if (options.backward_passes_per_step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("backward_passes_per_step must be >= 1, got ",
                                                   options.backward_passes_per_step));
  }
  if (!(options.gradient_predivide_factor > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("gradient_predivide_factor must be > 0, got ",
                                                   options.gradient_predivide_factor));
  }
  std::unique_ptr<DistributedOptimizer> result(new DistributedOptimizer(optimizer, options));
  std::set<std::string> names;
  for (const auto& item : named_parameters) {
    if (!item.value().requires_grad()) continue;
    if (!names.insert(item.key()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter name \"", item.key(), "\" appears twice"));
    }
    auto param = std::make_unique<Param>();
    param->name = "grad." + item.key();
    param->tensor = item.value();
    param->passes_left = options.backward_passes_per_step;
    result->params_.push_back(std::move(param));
  }
  if (result->exchange_) {
    for (size_t i = 0; i < result->params_.size(); ++i) {
      Param& p = *result->params_[i];
      p.grad_accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
      if (p.grad_accumulator == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(p.name, ": parameter is not a leaf tensor"));
      }
      p.hook_key = p.grad_accumulator->add_post_hook(std::make_unique<Hook>(result.get(), i));
    }
  }
  return result;
}

DistributedOptimizer::~DistributedOptimizer() {
  for (auto& p : params_) {
    if (p->grad_accumulator != nullptr) p->grad_accumulator->del_post_hook(p->hook_key);
  }
  // Exchanges still in flight write into gradients this object no longer tracks; wait so their
  // buffers are not freed under the collective.
  for (auto& p : params_) {
    if (p->submitted) Wait(p->handle).IgnoreError();
  }
}

void DistributedOptimizer::OnGradient(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  Param& p = *params_[index];
  if (p.submitted || p.passes_left <= 0) {
    if (hook_error_.ok()) {
      hook_error_ = absl::FailedPreconditionError(
          absl::StrCat(p.name, ": gradient computed more than backward_passes_per_step (",
                       options_.backward_passes_per_step,
                       ") times before Step(); raise backward_passes_per_step"));
    }
    return;
  }
  if (--p.passes_left > 0) return;
  absl::Status status = SubmitLocked(index);
  if (!status.ok() && hook_error_.ok()) hook_error_ = status;
  // Gradients already reduce-scattered are not needed any more: freed during backward, the
  // whole model's gradients never exist at once.
  if (options_.reduce_scatter) ReleaseScatteredLocked();
}

absl::Status DistributedOptimizer::SubmitLocked(size_t index) {
  Param& p = *params_[index];
  at::NoGradGuard no_grad;
  if (!p.tensor.grad().defined()) p.tensor.mutable_grad() = at::zeros_like(p.tensor);
  at::Tensor grad = p.tensor.grad();
  if (!grad.is_contiguous()) {
    p.tensor.mutable_grad() = grad.contiguous();
    grad = p.tensor.grad();
  }
  switch (options_.compression) {
    case GradientCompression::kNone:
      p.exchanged = grad;
      break;
    case GradientCompression::kFloat16:
      p.exchanged = grad.is_floating_point() ? grad.to(at::kHalf) : grad;
      break;
    case GradientCompression::kBfloat16:
      p.exchanged = grad.is_floating_point() ? grad.to(at::kBFloat16) : grad;
      break;
  }
  if (options_.reduce_scatter) {
    ReduceScatterOptions options;
    options.op = ReduceOp::kAverage;
    options.process_set = options_.process_set;
    options.prescale_factor = 1.0 / options_.gradient_predivide_factor;
    options.postscale_factor = options_.gradient_predivide_factor;
    const ShardRange range =
        ShardOf(grad.numel(), options_.process_set.size(), options_.process_set.rank());
    p.scattered = at::empty({range.size}, p.exchanged.options());
    HVX_ASSIGN_OR_RETURN(p.handle,
                         ReduceScatterInto(p.name, p.exchanged.view(-1), p.scattered, options));
    p.submitted = true;
    return absl::OkStatus();
  }
  AllreduceOptions options;
  options.op = ReduceOp::kAverage;
  options.process_set = options_.process_set;
  options.prescale_factor = 1.0 / options_.gradient_predivide_factor;
  options.postscale_factor = options_.gradient_predivide_factor;
  HVX_ASSIGN_OR_RETURN(p.handle, AllreduceAsync(p.name, p.exchanged, options));
  p.submitted = true;
  return absl::OkStatus();
}

absl::Status DistributedOptimizer::Synchronize() {
  if (!exchange_) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status status = hook_error_;
  // Parameters the hooks never saw (unused this step here, maybe used elsewhere) go out as they
  // are, zeros when they have no gradient, so every rank submits the same set of names.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i]->submitted) {
      absl::Status submit = SubmitLocked(i);
      if (status.ok()) status = submit;
    }
  }
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p->submitted && !p->finished) {
      absl::Status wait = Wait(p->handle);
      if (!wait.ok() && status.ok()) status = wait;
      if (wait.ok()) FinishLocked(*p);
    }
    p->scattered = at::Tensor();
    p->submitted = false;
    p->finished = false;
    p->passes_left = options_.backward_passes_per_step;
    p->exchanged = at::Tensor();
    p->handle = Handle();
  }
  hook_error_ = absl::OkStatus();
  return status;
}

void DistributedOptimizer::FinishLocked(Param& p) {
  if (options_.reduce_scatter) {
    p.shard = p.scattered.to(p.tensor.grad().scalar_type());
    p.tensor.mutable_grad().reset();
    p.exchanged = at::Tensor();
    p.scattered = at::Tensor();
  } else if (!p.exchanged.is_same(p.tensor.grad())) {
    p.tensor.grad().copy_(p.exchanged);
  }
  p.finished = true;
}

void DistributedOptimizer::ReleaseScatteredLocked() {
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p->submitted && !p->finished && Poll(p->handle) && p->handle.status().ok()) {
      FinishLocked(*p);
    }
  }
}

const at::Tensor& DistributedOptimizer::GradientShard(size_t index) const {
  return params_[index]->shard;
}

std::vector<at::Tensor> DistributedOptimizer::Gradients() const {
  std::vector<at::Tensor> grads;
  for (const auto& p : params_) {
    const at::Tensor& g = options_.reduce_scatter ? p->shard : p->tensor.grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}

absl::StatusOr<bool> DistributedOptimizer::AllFinite() {
  HVX_RETURN_IF_ERROR(CheckHoldsWholeGradients("AllFinite"));
  return TensorsAllFinite(Gradients());
}

absl::StatusOr<double> DistributedOptimizer::ClipGradNorm(double max_norm) {
  HVX_RETURN_IF_ERROR(CheckHoldsWholeGradients("ClipGradNorm"));
  return ClipGlobalNorm(Gradients(), max_norm);
}

absl::Status DistributedOptimizer::CheckHoldsWholeGradients(const char* what) const {
  if (!options_.reduce_scatter) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what,
      ": a DistributedOptimizer that reduce-scatters holds only this rank's slices; ask the "
      "ShardedOptimizer, which agrees over ranks"));
}

absl::Status DistributedOptimizer::Step(bool synchronize) {
  if (options_.reduce_scatter) {
    return absl::FailedPreconditionError(
        "a DistributedOptimizer that reduce-scatters gradients is stepped by ShardedOptimizer");
  }
  if (synchronize) HVX_RETURN_IF_ERROR(Synchronize());
  try {
    optimizer_.step();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("optimizer step failed: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status DistributedOptimizer::ZeroGrad() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& p : params_) {
      if (p->submitted) {
        return absl::FailedPreconditionError(absl::StrCat(
            p->name,
            ": gradient exchange in flight; call Step() or Synchronize() before ZeroGrad()"));
      }
    }
  }
  optimizer_.zero_grad();
  return absl::OkStatus();
}

}  // namespace hvx
