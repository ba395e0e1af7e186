// One optimizer step of every rank, and what it needs set up: a batch's images and labels as
// tensors, the forward pass under the run's precision, how gradients meet across ranks
// (GradientSync: DistributedOptimizer or ShardedOptimizer by optimizer.shard), loss scaling and the
// moving average.
//
//   HVX_RETURN_IF_ERROR(SetUpPrecision(config, &run));
//   HVX_RETURN_IF_ERROR(SetUpGradientSync(&run));  // after run.model and run.optimizer
//   HVX_ASSIGN_OR_RETURN(StepInputs in, InputsOf(run, std::move(batch)));
//   HVX_ASSIGN_OR_RETURN(StepOutcome s, TrainStep(run, in, global_step, lr));
#ifndef HVX_TRAIN_TRAIN_STEP_H_
#define HVX_TRAIN_TRAIN_STEP_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/data/pipeline.h"
#include "hvx/train/run.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// A batch as the model takes it, on the run's device.
struct StepInputs {
  torch::Tensor images;  // [N, C, H, W]; channels-last batches in NHWC memory
  torch::Tensor labels;  // int64 class indices
};

// The batch's images and its labels plus data.label_offset, checked against the model's classes
// (an unchecked label out of range would abort inside cross_entropy instead of naming the rank and
// sample). The images wrap the batch's memory on the CPU (the tensor owns the batch); a
// channels-last batch ([N, H, W, C] from the decoder) is the permuted view.
absl::StatusOr<StepInputs> InputsOf(const Run& run, std::unique_ptr<data::Batch> batch);

// The model's float32 logits for `images`, under the run's autocast precision.
torch::Tensor Forward(Run& run, const torch::Tensor& images);

// precision: BF16 autocasts on either device; FP16 needs CUDA. On CUDA both scale the loss
// (LossScaler), so that small float16 gradients do not underflow. Sets run->autocast_dtype and
// run->scaler.
absl::Status SetUpPrecision(const TrainConfig& config, Run* run);

// run->sync over run->model and run->optimizer: a DistributedOptimizer (optimizer.shard NONE) or a
// ShardedOptimizer, with run->sharded and run->replicated (the whole-parameter optimizer that
// checkpoints hold). Every rank calls it.
absl::Status SetUpGradientSync(Run* run);

struct StepOutcome {
  double loss = 0;       // this rank's mean training loss over its batch
  double grad_norm = 0;  // the averaged gradients' norm before clipping (clip_grad_norm > 0)
  bool skipped = false;  // loss scaling found inf or NaN gradients: no optimizer step
};

// One optimizer step of every rank on this rank's `batch`, at learning rate `lr`, which makes
// `global_step` + 1 steps done: forward and backward in optimizer.backward_passes_per_step
// micro-batches (each loss weighted by its share of the batch, so the summed gradient is the
// whole batch's mean), the gradients averaged over ranks, clipped, the optimizer step and the
// moving average.
absl::StatusOr<StepOutcome> TrainStep(Run& run, const StepInputs& inputs, int64_t global_step,
                                      double lr);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_TRAIN_STEP_H_
