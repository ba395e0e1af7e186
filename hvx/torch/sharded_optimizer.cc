#include "hvx/torch/sharded_optimizer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/torch/optimizer_state.h"
#include "hvx/torch/tensor.h"

namespace hvx {
namespace {

// The parameter as a flat tensor sharing its memory, or a flat copy when its layout is not
// contiguous (channels_last).
at::Tensor Flat(const at::Tensor& t) { return t.detach().reshape(-1); }

// Checks that `full` has the param groups the wrapped optimizer had before sharding.
absl::Status CheckSameGroups(const torch::optim::Optimizer& full,
                             const torch::optim::Optimizer& sharded) {
  bool same = full.param_groups().size() == sharded.param_groups().size();
  for (size_t g = 0; same && g < full.param_groups().size(); ++g) {
    same = full.param_groups()[g].params().size() == sharded.param_groups()[g].params().size();
  }
  if (!same) {
    return absl::InvalidArgumentError(
        "the replicated optimizer's param groups differ from the sharded one's; build both the "
        "same way over the same model");
  }
  return absl::OkStatus();
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(torch::optim::Optimizer& optimizer,
                                   const ShardedOptimizerOptions& options)
    : optimizer_(optimizer), options_(options) {}

ShardedOptimizer::~ShardedOptimizer() = default;

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(
    torch::optim::Optimizer& optimizer,
    const torch::OrderedDict<std::string, at::Tensor>& named_parameters,
    const ShardedOptimizerOptions& options) {
  if (!optimizer.state().empty()) {
    return absl::FailedPreconditionError(
        "ShardedOptimizer needs an optimizer that has not stepped yet (it has state); load state "
        "with ScatterState after Create");
  }
  std::unique_ptr<ShardedOptimizer> result(new ShardedOptimizer(optimizer, options));
  const ProcessSet& set = options.exchange.process_set;
  std::set<std::string> names;
  size_t owned = 0;
  for (const auto& group : optimizer.param_groups()) owned += group.params().size();
  for (const auto& item : named_parameters) {
    if (!item.value().requires_grad()) continue;
    if (!names.insert(item.key()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter name \"", item.key(), "\" appears twice"));
    }
    Slice s;
    s.name = item.key();
    s.parameter = item.value();
    s.range = ShardOf(s.parameter.numel(), set.size(), set.rank());
    bool found = false;
    for (size_t g = 0; g < optimizer.param_groups().size() && !found; ++g) {
      const auto& params = optimizer.param_groups()[g].params();
      for (size_t j = 0; j < params.size() && !found; ++j) {
        if (params[j].is_same(s.parameter)) {
          s.group = g;
          s.position = j;
          found = true;
        }
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter \"", s.name, "\" is not one the optimizer owns"));
    }
    s.slice = Flat(s.parameter).narrow(0, s.range.begin, s.range.size).clone();
    result->slices_.push_back(std::move(s));
  }
  if (result->slices_.size() != owned) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer owns ", owned,
                                                   " tensors, named_parameters names ",
                                                   result->slices_.size(), " of them"));
  }
  DistributedOptimizerOptions exchange = options.exchange;
  exchange.reduce_scatter = options.stage == ShardStage::kGradients;
  HVX_ASSIGN_OR_RETURN(result->exchange_,
                       DistributedOptimizer::Create(optimizer, named_parameters, exchange));
  for (const Slice& s : result->slices_) {
    optimizer.param_groups()[s.group].params()[s.position] = s.slice;
  }
  return result;
}

absl::Status ShardedOptimizer::ZeroGrad() {
  // The slices' gradients may be views of the parameters' (kState), which the optimizer's
  // zero_grad() cannot detach: released first, they leave it nothing to do.
  for (Slice& s : slices_) s.slice.mutable_grad().reset();
  HVX_RETURN_IF_ERROR(exchange_->ZeroGrad());
  for (Slice& s : slices_) s.parameter.mutable_grad().reset();
  return absl::OkStatus();
}

absl::Status ShardedOptimizer::Synchronize() {
  HVX_RETURN_IF_ERROR(exchange_->Synchronize());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < slices_.size(); ++i) {
    Slice& s = slices_[i];
    if (options_.stage == ShardStage::kGradients) {
      s.slice.mutable_grad() = exchange_->GradientShard(i);
    } else if (s.parameter.grad().defined()) {
      s.slice.mutable_grad() = Flat(s.parameter.grad()).narrow(0, s.range.begin, s.range.size);
    } else {
      // One rank and no gradient: nothing was exchanged.
      s.slice.mutable_grad() = at::zeros_like(s.slice);
    }
  }
  return absl::OkStatus();
}

absl::Status ShardedOptimizer::Step(bool synchronize) {
  if (synchronize) HVX_RETURN_IF_ERROR(Synchronize());
  at::NoGradGuard no_grad;
  for (Slice& s : slices_) s.slice.copy_(Flat(s.parameter).narrow(0, s.range.begin, s.range.size));
  try {
    optimizer_.step();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("optimizer step failed: ", e.what_without_backtrace()));
  }
  std::vector<Handle> handles;
  std::vector<std::pair<at::Tensor, at::Tensor>> staged;  // (parameter, gathered copy)
  for (Slice& s : slices_) {
    at::Tensor out;
    if (s.parameter.is_contiguous()) {
      out = s.parameter.detach().view(-1);
    } else {
      out = at::empty({s.parameter.numel()}, s.slice.options());
      staged.emplace_back(s.parameter, out);
    }
    HVX_ASSIGN_OR_RETURN(Handle h, AllgatherInto("zero.param." + s.name, s.slice, out,
                                                 options_.exchange.process_set));
    handles.push_back(h);
  }
  HVX_RETURN_IF_ERROR(WaitAll(handles));
  for (auto& [parameter, gathered] : staged) {
    parameter.detach().copy_(gathered.view(parameter.sizes()));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ShardedOptimizer::ClipGradNorm(double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<double> sum = {0.0};
  for (const Slice& s : slices_) {
    if (!s.slice.grad().defined()) continue;
    const double n = s.slice.grad().norm().item<double>();
    sum[0] += n * n;
  }
  HVX_RETURN_IF_ERROR(SumOverRanks(&sum, "grad_norm"));
  const double norm = std::sqrt(sum[0]);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (Slice& s : slices_) {
      if (s.slice.grad().defined()) s.slice.mutable_grad().mul_(scale);
    }
  }
  return norm;
}

std::vector<at::Tensor> ShardedOptimizer::Gradients() const {
  std::vector<at::Tensor> grads;
  for (const Slice& s : slices_) {
    if (s.slice.grad().defined()) grads.push_back(s.slice.grad());
  }
  return grads;
}

absl::StatusOr<bool> ShardedOptimizer::AllFinite() {
  std::vector<double> bad = {TensorsAllFinite(Gradients()) ? 0.0 : 1.0};
  HVX_RETURN_IF_ERROR(SumOverRanks(&bad, "finite"));
  return bad[0] == 0;
}

absl::Status ShardedOptimizer::SumOverRanks(std::vector<double>* values, const std::string& name) {
  HVX_ASSIGN_OR_RETURN(
      *values, SumMetrics(std::move(*values), "zero." + name, options_.exchange.process_set));
  return absl::OkStatus();
}

std::vector<ShardedOptimizer::SliceView> ShardedOptimizer::Slices() const {
  std::vector<SliceView> views;
  for (const Slice& s : slices_) views.push_back({s.name, s.parameter, s.slice, s.range});
  return views;
}

absl::Status ShardedOptimizer::GatherState(torch::optim::Optimizer& full) {
  HVX_RETURN_IF_ERROR(CheckSameGroups(full, optimizer_));
  for (size_t g = 0; g < full.param_groups().size(); ++g) {
    full.param_groups()[g].set_options(optimizer_.param_groups()[g].options().clone());
  }
  full.state().clear();
  std::vector<Handle> handles;
  absl::Status status;
  for (const Slice& s : slices_) {
    const at::Tensor& whole = full.param_groups()[s.group].params()[s.position];
    if (whole.numel() != s.parameter.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("replicated optimizer: parameter \"", s.name,
                                                     "\" has ", whole.numel(), " elements, not ",
                                                     s.parameter.numel()));
    }
    const auto found = optimizer_.state().find(StateKeyOf(s.slice));
    if (found == optimizer_.state().end()) continue;
    int k = 0;
    HVX_ASSIGN_OR_RETURN(auto state,
                         MapStateTensors(
                             *found->second,
                             [&](const at::Tensor& t) {
                               at::Tensor gathered = at::empty({whole.numel()}, t.options());
                               absl::StatusOr<Handle> h = AllgatherInto(
                                   absl::StrCat("zero.state.", s.name, ".", k++), t.contiguous(),
                                   gathered, options_.exchange.process_set);
                               if (h.ok()) {
                                 handles.push_back(*h);
                               } else if (status.ok()) {
                                 status = h.status();
                               }
                               return gathered.view(whole.sizes());
                             },
                             s.name));
    full.state()[StateKeyOf(whole)] = std::move(state);
  }
  absl::Status waited = WaitAll(handles);
  HVX_RETURN_IF_ERROR(status);
  return waited;
}

absl::Status ShardedOptimizer::ScatterState(torch::optim::Optimizer& full) {
  HVX_RETURN_IF_ERROR(CheckSameGroups(full, optimizer_));
  for (size_t g = 0; g < full.param_groups().size(); ++g) {
    optimizer_.param_groups()[g].set_options(full.param_groups()[g].options().clone());
  }
  optimizer_.state().clear();
  for (const Slice& s : slices_) {
    const at::Tensor& whole = full.param_groups()[s.group].params()[s.position];
    const auto found = full.state().find(StateKeyOf(whole));
    if (found == full.state().end()) continue;
    HVX_ASSIGN_OR_RETURN(auto state,
                         MapStateTensors(
                             *found->second,
                             [&](const at::Tensor& t) {
                               return Flat(t).narrow(0, s.range.begin, s.range.size).clone();
                             },
                             s.name));
    optimizer_.state()[StateKeyOf(s.slice)] = std::move(state);
  }
  return absl::OkStatus();
}

}  // namespace hvx
