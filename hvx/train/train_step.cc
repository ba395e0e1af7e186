#include "hvx/train/train_step.h"

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/torch/distributed_optimizer.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/dataset_setup.h"

namespace hvx {
namespace train {
namespace {

void SetLr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// Wraps a pipeline batch as a tensor without copying; the tensor owns the batch.
torch::Tensor RawImagesOf(std::unique_ptr<data::Batch>& batch) {
  data::Batch* raw = batch.release();
  return torch::from_blob(
      raw->data(), raw->shape().dims(), [raw](void*) { delete raw; },
      torch::TensorOptions().dtype(ToScalarType(raw->dtype())));
}

// Loss scaling: unscales the averaged gradients, or says to skip the step (every rank alike). A
// sharded optimizer's ranks each hold slices, so they agree on whether all are finite.
absl::StatusOr<bool> UnscaleOrSkip(Run& run) {
  HVX_ASSIGN_OR_RETURN(const bool finite, run.sync->AllFinite());
  return run.scaler->UnscaleOrSkip(run.sync->Gradients(), finite);
}

// The batch's labels plus data.label_offset, checked against the model's classes.
absl::StatusOr<torch::Tensor> LabelsOf(const data::Batch& batch, const TrainConfig& config) {
  const int64_t offset = config.data().label_offset();
  const int64_t classes = config.model().num_classes();
  std::vector<int64_t> labels(batch.labels().begin(), batch.labels().end());
  for (size_t i = 0; i < labels.size(); ++i) {
    // A label near int64's ends (a corrupt record) wraps with the offset: out of range too.
    const bool wrapped = __builtin_add_overflow(labels[i], offset, &labels[i]);
    if (wrapped || labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", Rank(), ": sample ", batch.sample_ids()[i], " has label ", batch.labels()[i],
          ", which with ", "data.label_offset ", offset, " is ",
          wrapped ? std::string("out of int64's range") : absl::StrCat(labels[i]), ", outside [0, ",
          classes, ") of model.num_classes; ",
          "check data.label_offset (-1 for ImageNet's 1-based labels) and model.num_classes"));
    }
  }
  return torch::tensor(labels, torch::kInt64);
}

}  // namespace

absl::StatusOr<StepInputs> InputsOf(const Run& run, std::unique_ptr<data::Batch> batch) {
  StepInputs in;
  HVX_ASSIGN_OR_RETURN(in.labels, LabelsOf(*batch, run.config));
  in.labels = in.labels.to(run.device);
  in.images = RawImagesOf(batch);  // takes the batch
  if (DecodesChannelsLast(run.config)) in.images = in.images.permute({0, 3, 1, 2});
  in.images = in.images.to(run.device);
  return in;
}

torch::Tensor Forward(Run& run, const torch::Tensor& images) {
  AutocastGuard autocast(run.device.type(), run.autocast_dtype);
  if (run.config.model().channels_last() && images.dim() == 4) {
    return run.model->forward(images.contiguous(at::MemoryFormat::ChannelsLast)).to(torch::kFloat);
  }
  return run.model->forward(images).to(torch::kFloat);
}

absl::Status SetUpPrecision(const TrainConfig& config, Run* run) {
  const bool cuda = run->device.is_cuda();
  switch (config.precision()) {
    case FP32:
      return absl::OkStatus();
    case BF16:
      run->autocast_dtype = at::kBFloat16;
      break;
    case FP16:
      if (!cuda) {
        return absl::FailedPreconditionError(
            "precision: FP16 autocast needs CUDA; training runs on the CPU, where BF16 is the "
            "mixed precision: --override='precision: BF16'");
      }
      run->autocast_dtype = at::kHalf;
      break;
    default:
      return absl::InvalidArgumentError("precision: set FP32, BF16 or FP16");
  }
  if (cuda) run->scaler = std::make_unique<LossScaler>();
  HVX_LOG_RANK0(INFO) << "mixed precision: autocast to "
                      << (run->autocast_dtype == at::kHalf ? "float16" : "bfloat16") << " on "
                      << run->device.str()
                      << (cuda ? ", dynamic loss scaling (initial scale 65536)" : "");
  return absl::OkStatus();
}

absl::Status SetUpGradientSync(Run* run) {
  const TrainConfig& config = run->config;
  DistributedOptimizerOptions dopts;
  dopts.backward_passes_per_step = config.optimizer().backward_passes_per_step();
  HVX_ASSIGN_OR_RETURN(dopts.compression, ParseGradientCompression(config.engine().compression()));
  dopts.gradient_predivide_factor = config.engine().gradient_predivide_factor();
  if (config.optimizer().shard() == Sharding::NONE) {
    HVX_ASSIGN_OR_RETURN(run->sync, DistributedOptimizer::Create(
                                        *run->optimizer, run->model->named_parameters(), dopts));
    return absl::OkStatus();
  }
  HVX_ASSIGN_OR_RETURN(run->replicated, MakeOptimizer(config.optimizer(), *run->model));
  ShardedOptimizerOptions sopts;
  sopts.stage = config.optimizer().shard() == Sharding::GRADIENTS ? ShardStage::kGradients
                                                                  : ShardStage::kState;
  sopts.exchange = dopts;
  HVX_ASSIGN_OR_RETURN(
      std::unique_ptr<ShardedOptimizer> sharded,
      ShardedOptimizer::Create(*run->optimizer, run->model->named_parameters(), sopts));
  run->sharded = sharded.get();
  if (auto* lamb = dynamic_cast<Lamb*>(run->optimizer.get())) {
    lamb->set_norm_sum([sharded = run->sharded](std::vector<double>* squares) {
      return sharded->SumOverRanks(squares, "lamb");
    });
  }
  run->sync = std::move(sharded);
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> TrainStep(Run& run, const StepInputs& inputs, int64_t global_step,
                                      double lr) {
  const TrainConfig& config = run.config;
  const torch::Tensor& images = inputs.images;
  const torch::Tensor& labels = inputs.labels;
  // The random stream (dropout) depends only on where training stands, so a resumed run draws
  // exactly what the uninterrupted run drew.
  torch::manual_seed(config.seed() * 1000003 + static_cast<uint64_t>(global_step) * 131 + Rank());
  SetLr(*run.optimizer, lr);
  HVX_RETURN_IF_ERROR(run.sync->ZeroGrad());
  const int64_t rows = images.size(0);
  const auto parts = MicroBatches(rows, config.optimizer().backward_passes_per_step());
  StepOutcome outcome;
  for (const auto& [begin, n] : parts) {
    torch::Tensor loss = TrainingLoss(Forward(run, images.narrow(0, begin, n)),
                                      labels.narrow(0, begin, n), config.label_smoothing());
    if (parts.size() > 1) loss = loss * (static_cast<double>(n) / rows);
    (run.scaler ? loss * run.scaler->scale() : loss).backward();
    outcome.loss += loss.item<double>();
  }
  HVX_RETURN_IF_ERROR(run.sync->Synchronize());
  // A checkpoint being written in the background copies the parameters and the optimizer's state
  // while forward and backward ran; the step below changes them.
  if (run.checkpointer != nullptr) run.checkpointer->AwaitSnapshot();
  // Every rank sees the same averaged gradients, so every rank skips the same steps.
  if (run.scaler) {
    HVX_ASSIGN_OR_RETURN(const bool step, UnscaleOrSkip(run));
    if (!step) {
      outcome.skipped = true;
      return outcome;
    }
  }
  // The averaged gradients are the same on every rank, so is their norm and the clipped step.
  const double max_norm = config.optimizer().clip_grad_norm();
  if (max_norm > 0) {
    HVX_ASSIGN_OR_RETURN(outcome.grad_norm, run.sync->ClipGradNorm(max_norm));
  }
  HVX_RETURN_IF_ERROR(run.sync->Step(/*synchronize=*/false));
  if (run.average) run.average->Update(global_step + 1);
  return outcome;
}

}  // namespace train
}  // namespace hvx
