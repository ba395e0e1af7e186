// The gradient exchange a training step drives, whichever optimizer does it: DistributedOptimizer
// (every rank steps every parameter on the averaged gradients) and ShardedOptimizer (each rank
// steps its slices of them, ZeRO) both implement it, so a training loop written against it has no
// branch on how the state is sharded.
//
//   GradientSync& sync = *optimizer;  // a DistributedOptimizer or a ShardedOptimizer
//   HVX_RETURN_IF_ERROR(sync.ZeroGrad());
//   loss.backward();
//   HVX_RETURN_IF_ERROR(sync.Synchronize());
//   HVX_ASSIGN_OR_RETURN(bool finite, sync.AllFinite());  // loss scaling: skip the step if not
//   HVX_ASSIGN_OR_RETURN(double norm, sync.ClipGradNorm(1.0));
//   HVX_RETURN_IF_ERROR(sync.Step(/*synchronize=*/false));
#ifndef HVX_TORCH_GRADIENT_SYNC_H_
#define HVX_TORCH_GRADIENT_SYNC_H_

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hvx {

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // Releases or zeroes the gradients before a step's backward passes. FailedPrecondition while
  // exchanges are in flight.
  virtual absl::Status ZeroGrad() = 0;
  // Waits for every exchange of this step: Gradients() then hold the averages (or this rank's
  // slices of them).
  virtual absl::Status Synchronize() = 0;
  // Synchronize() (unless told otherwise), then the wrapped optimizer's step.
  virtual absl::Status Step(bool synchronize = true) = 0;

  // After Synchronize(): the gradients this rank's optimizer steps, those defined.
  virtual std::vector<at::Tensor> Gradients() const = 0;
  // After Synchronize(): whether every averaged gradient is finite on every rank; the same answer
  // on every rank (collective where ranks hold different slices).
  virtual absl::StatusOr<bool> AllFinite() = 0;
  // After Synchronize(): the global L2 norm of the averaged gradients (the same on every rank);
  // when it exceeds max_norm > 0 every gradient is scaled by max_norm / (norm + 1e-6).
  virtual absl::StatusOr<double> ClipGradNorm(double max_norm) = 0;
};

// Whether every element of every tensor is finite, with one synchronization for all.
bool TensorsAllFinite(const std::vector<at::Tensor>& tensors);

// The L2 norm of `grads` together (each tensor's norm in float64, then the norm of those); when it
// exceeds max_norm > 0 each is scaled in place by max_norm / (norm + 1e-6). Returns the norm
// before scaling; 0 for none.
double ClipGlobalNorm(const std::vector<at::Tensor>& grads, double max_norm);

}  // namespace hvx

#endif  // HVX_TORCH_GRADIENT_SYNC_H_
