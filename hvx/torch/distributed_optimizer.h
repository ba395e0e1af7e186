// Data-parallel gradient averaging for a LibTorch optimizer.
//
// clang-format off
//   HVX_ASSIGN_OR_RETURN(auto opt,
//                        DistributedOptimizer::Create(sgd, model->named_parameters(), {}));
//   loss.backward();
//   HVX_RETURN_IF_ERROR(opt->Step());  // gradients averaged over ranks, then SGD
// clang-format on
//
// Each parameter gets a hook on its gradient accumulator: as soon as backward has produced the
// parameter's gradient, the hook submits an asynchronous allreduce of it, named "grad.<parameter
// name>" (identical on every rank), so communication overlaps the rest of backward. Step() waits
// for every allreduce, writes the averaged gradients back and steps the wrapped optimizer.
//
// - backward_passes_per_step = N: gradients accumulate locally over N backward passes and are
//   exchanged on the N-th; a parameter whose gradient is produced more often fails Step().
// - gradient_predivide_factor = f: each rank multiplies by 1/f before the sum and the result by
//   f/size after (instead of 1/size at the end), which keeps float16 sums from overflowing.
// - compression: gradients travel as float16/bfloat16 and are cast back after the exchange.
// - A parameter that got no gradient on this rank in this step (an unused branch) is exchanged as
//   zeros by Step(), so the other ranks never wait for it.
// - reduce_scatter: each rank keeps only its slice of every averaged gradient (ShardedOptimizer,
//   hvx/torch/sharded_optimizer.h).
// With one rank nothing is exchanged and Step() only steps the optimizer.
#ifndef HVX_TORCH_DISTRIBUTED_OPTIMIZER_H_
#define HVX_TORCH_DISTRIBUTED_OPTIMIZER_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/core/api.h"
#include "hvx/torch/gradient_sync.h"

namespace hvx {

enum class GradientCompression { kNone, kFloat16, kBfloat16 };

// "" or "none", "fp16", "bf16".
absl::StatusOr<GradientCompression> ParseGradientCompression(const std::string& name);

struct DistributedOptimizerOptions {
  int backward_passes_per_step = 1;
  double gradient_predivide_factor = 1.0;
  GradientCompression compression = GradientCompression::kNone;
  ProcessSet process_set;
  // Each gradient is reduce-scattered (as a flat vector, "grad.<name>") instead of allreduced:
  // after Synchronize() this rank holds only its slice of each average (GradientShard), the
  // parameters' .grad() are released, and Step() is not available (ShardedOptimizer steps).
  bool reduce_scatter = false;
};

// The slice of a flattened tensor of `numel` elements that rank `rank` of `size` holds when it
// is sharded: the reduce-scatter's rows (the first numel % size ranks hold one more element).
struct ShardRange {
  int64_t begin = 0;
  int64_t size = 0;
};
ShardRange ShardOf(int64_t numel, int size, int rank);

class DistributedOptimizer : public GradientSync {
 public:
  // `optimizer` must outlive the returned object and own exactly the tensors in `named_parameters`
  // that require gradients. InvalidArgument for duplicate names, backward_passes_per_step < 1 or a
  // predivide factor <= 0.
  static absl::StatusOr<std::unique_ptr<DistributedOptimizer>> Create(
      torch::optim::Optimizer& optimizer,
      const torch::OrderedDict<std::string, at::Tensor>& named_parameters,
      const DistributedOptimizerOptions& options);
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;
  ~DistributedOptimizer() override;

  // Submits the exchange of every gradient not yet submitted this step, waits for all and writes
  // the averages into the parameters' .grad(). Step() calls it; call it directly to clip or
  // inspect averaged gradients, then call Step(/*synchronize=*/false).
  absl::Status Synchronize() override;
  // Synchronize() (unless told otherwise) and the wrapped optimizer's step().
  absl::Status Step(bool synchronize = true) override;
  // Zeroes the gradients. FailedPrecondition while exchanges are in flight.
  absl::Status ZeroGrad() override;

  // The parameters' gradients (with reduce_scatter, this rank's slices of them: GradientShard).
  std::vector<at::Tensor> Gradients() const override;
  // Every rank holds the same averages: checked here, without communication. With
  // reduce_scatter a rank holds only slices: FailedPrecondition (ShardedOptimizer answers).
  absl::StatusOr<bool> AllFinite() override;
  // ClipGlobalNorm of Gradients(), without communication; FailedPrecondition with reduce_scatter.
  absl::StatusOr<double> ClipGradNorm(double max_norm) override;

  // With reduce_scatter, after Synchronize(): this rank's ShardOf slice of the averaged flat
  // gradient of parameter `index` (in named_parameters order, those requiring gradients).
  const at::Tensor& GradientShard(size_t index) const;
  size_t num_parameters() const { return params_.size(); }

  torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptimizerOptions& options() const { return options_; }

 private:
  struct Param;
  class Hook;
  DistributedOptimizer(torch::optim::Optimizer& optimizer,
                       const DistributedOptimizerOptions& options);
  // Called from backward (any autograd thread) when parameter `index` got its gradient.
  void OnGradient(size_t index);
  // Submits parameter `index`'s exchange; requires mu_.
  absl::Status SubmitLocked(size_t index);
  // After `p`'s exchange completed: the average into .grad(), or with reduce_scatter the slice
  // kept and the gradient released. Requires mu_.
  void FinishLocked(Param& p);
  // reduce_scatter: finishes every exchange already complete (from the hooks, during backward).
  void ReleaseScatteredLocked();
  // FailedPrecondition naming `what` with reduce_scatter, whose ranks hold different slices.
  absl::Status CheckHoldsWholeGradients(const char* what) const;

  torch::optim::Optimizer& optimizer_;
  const DistributedOptimizerOptions options_;
  const bool exchange_;  // more than one rank in the process set, or reduce_scatter
  std::vector<std::unique_ptr<Param>> params_;
  std::mutex mu_;
  absl::Status hook_error_;  // the first error a hook ran into, reported by the next Step()
};

}  // namespace hvx

#endif  // HVX_TORCH_DISTRIBUTED_OPTIMIZER_H_
