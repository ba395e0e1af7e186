// Sharded optimizer state (ZeRO stage 1) and gradients (stage 2) for a LibTorch optimizer.
//
//   auto adam = std::make_unique<torch::optim::Adam>(model->parameters(), options);
//   HVX_ASSIGN_OR_RETURN(auto opt, ShardedOptimizer::Create(*adam, model->named_parameters(),
//                                                           {ShardStage::kGradients, {}}));
//   HVX_RETURN_IF_ERROR(opt->ZeroGrad());
//   loss.backward();
//   HVX_RETURN_IF_ERROR(opt->Step());  // this rank's slices stepped, parameters gathered
//
// Every parameter is flattened and cut into one slice per rank (ShardOf: the reduce-scatter's
// rows), so each rank holds 1/size of every tensor's optimizer state, balanced by bytes whatever
// the tensors' sizes. Create swaps each parameter in the optimizer's param groups for this rank's
// slice (a 1-D tensor of its own); the optimizer only ever sees, and keeps state for, the slices.
// Step() copies each parameter's slice in (so whatever changed the parameters — a broadcast, a
// checkpoint — is what is stepped), steps the wrapped optimizer on the slices' gradients and
// allgathers every parameter from the stepped slices ("zero.param.<name>").
//
// - kState (stage 1): gradients are allreduced as DistributedOptimizer does; each slice's
//   gradient is a view of its part of the averaged gradient.
// - kGradients (stage 2): each gradient is reduce-scattered during backward as soon as it is
//   ready; this rank keeps only its slice of the average and the parameters' .grad() are released.
//   Each rank sends what an allreduce sends (a reduce-scatter now, an allgather after the step).
// On one host's shared-memory plane a reduce-scatter folds each element as the allreduce does,
// so both stages step exactly the bits of the replicated optimizer.
//
// Optimizers whose update needs a whole tensor (LAMB's trust ratio, global-norm clipping) take
// their norms from SumOverRanks, one small allreduce for all tensors. State tensors are those of
// SGD, Adam and AdamW (and optimizers that use their state classes); GatherState/ScatterState
// convert between the sharded state and the replicated optimizer's, which checkpoints store, so a
// checkpoint resumes at any world size and any stage.
#ifndef HVX_TORCH_SHARDED_OPTIMIZER_H_
#define HVX_TORCH_SHARDED_OPTIMIZER_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/torch/distributed_optimizer.h"

namespace hvx {

enum class ShardStage { kState = 1, kGradients = 2 };

struct ShardedOptimizerOptions {
  ShardStage stage = ShardStage::kState;
  // How gradients travel (micro-batches, compression, predivide, process set). reduce_scatter is
  // set from `stage`.
  DistributedOptimizerOptions exchange;
};

class ShardedOptimizer : public GradientSync {
 public:
  // `optimizer` must own exactly the tensors of `named_parameters` that require gradients, have
  // no state yet, and outlive the result; its param groups then hold this rank's slices.
  // InvalidArgument for a parameter it does not own, a duplicate name, or options
  // DistributedOptimizer refuses.
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(
      torch::optim::Optimizer& optimizer,
      const torch::OrderedDict<std::string, at::Tensor>& named_parameters,
      const ShardedOptimizerOptions& options);
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;
  ~ShardedOptimizer() override;

  // Releases the parameters' gradients and the slices'. FailedPrecondition while exchanges are in
  // flight.
  absl::Status ZeroGrad() override;
  // Waits for every exchange: each slice's .grad() then holds its part of the averaged gradient.
  absl::Status Synchronize() override;
  // Synchronize() (unless told otherwise), the wrapped optimizer's step on the slices, and the
  // allgather of every parameter.
  absl::Status Step(bool synchronize = true) override;

  // After Synchronize(): the global L2 norm of the averaged gradients (the same on every rank);
  // when it exceeds max_norm > 0 every slice's gradient is scaled by max_norm / (norm + 1e-6).
  absl::StatusOr<double> ClipGradNorm(double max_norm) override;
  // After Synchronize(): the slices' gradients (this rank's parts of the averaged gradients).
  std::vector<at::Tensor> Gradients() const override;
  // After Synchronize(): whether every rank's slices are all finite (one small allreduce).
  absl::StatusOr<bool> AllFinite() override;
  // Element-wise sum of `values` over the process set, in place (float64).
  absl::Status SumOverRanks(std::vector<double>* values, const std::string& name);

  // Collective. `full` is an optimizer over the whole parameters with the same param groups as
  // the wrapped one had (built the same way); its state becomes every parameter's gathered state
  // and its groups take the wrapped optimizer's options (lr, betas, ...).
  absl::Status GatherState(torch::optim::Optimizer& full);
  // The inverse, without communication: this rank's slices of `full`'s state (and its options)
  // become the wrapped optimizer's.
  absl::Status ScatterState(torch::optim::Optimizer& full);

  // Each parameter's slice on this rank, in the order of named_parameters: the whole parameter,
  // the tensor the wrapped optimizer steps (its state is keyed by it) and its elements.
  struct SliceView {
    std::string name;
    at::Tensor parameter;
    at::Tensor slice;
    ShardRange range;
  };
  std::vector<SliceView> Slices() const;

  torch::optim::Optimizer& optimizer() { return optimizer_; }
  const ShardedOptimizerOptions& options() const { return options_; }

 private:
  struct Slice {
    std::string name;
    at::Tensor parameter;
    at::Tensor slice;  // what the wrapped optimizer steps
    ShardRange range;
    size_t group = 0, position = 0;  // where the parameter stood in the param groups
  };
  ShardedOptimizer(torch::optim::Optimizer& optimizer, const ShardedOptimizerOptions& options);

  torch::optim::Optimizer& optimizer_;
  const ShardedOptimizerOptions options_;
  std::unique_ptr<DistributedOptimizer> exchange_;
  std::vector<Slice> slices_;  // in DistributedOptimizer's parameter order
};

}  // namespace hvx

#endif  // HVX_TORCH_SHARDED_OPTIMIZER_H_
