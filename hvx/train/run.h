// The state one training run's parts share: the model, optimizer, data, schedule, checkpoints and
// records that RunTraining (trainer.cc) sets up and its parts read and change: the step
// (train_step.h), evaluation (evaluation.h), progress and records (progress.h) and the ranks'
// agreement after each step (preemption.h). Internal to hvx/train.
//
//   Run run{config, options};
//   HVX_RETURN_IF_ERROR(SetUpPrecision(config, &run));
#ifndef HVX_TRAIN_RUN_H_
#define HVX_TRAIN_RUN_H_

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "hvx/data/dataset.h"
#include "hvx/data/decoder.h"
#include "hvx/torch/gradient_sync.h"
#include "hvx/torch/sharded_optimizer.h"
#include "hvx/train/checkpoint.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/lr_schedule.h"
#include "hvx/train/models.h"
#include "hvx/train/recipes.h"
#include "hvx/train/run_records.h"
#include "hvx/train/train_config.pb.h"
#include "hvx/train/trainer.h"

namespace hvx {
namespace train {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Run {
  const TrainConfig& config;
  const RunOptions& options;
  torch::Device device{torch::kCPU};
  std::shared_ptr<const data::Dataset> train_data;
  // What decides the order of an epoch's samples (DataOrder), kept in checkpoints.
  std::string data_order;
  // The run this training is part of (hvx/train/run_dir.h): the resumed checkpoint's, else a new
  // one; the same on every rank, kept in checkpoints.
  std::string run_name;
  // The checkpoint this run resumed from, "" when it started afresh.
  std::string resumed_from;
  std::shared_ptr<const data::Dataset> eval_data;
  std::shared_ptr<const data::Decoder> train_decoder;
  std::shared_ptr<const data::Decoder> eval_decoder;
  std::shared_ptr<Classifier> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // How a step's gradients meet across ranks and reach `optimizer`: a DistributedOptimizer
  // (optimizer.shard NONE: gradients averaged, `optimizer` steps the whole parameters) or a
  // ShardedOptimizer (`optimizer` steps this rank's slices of them). The step asks only this.
  std::unique_ptr<GradientSync> sync;
  // With a ShardedOptimizer, that one (owned by `sync`), and `replicated`, the same optimizer over
  // the whole parameters, which checkpoints hold: state is gathered into it to save and scattered
  // from it after loading, and dropped in between.
  ShardedOptimizer* sharded = nullptr;
  std::unique_ptr<torch::optim::Optimizer> replicated;
  // The run's checkpoints (checkpoint.dir), one in progress at a time.
  std::unique_ptr<Checkpointer> checkpointer;
  // TrainConfig.ema_decay > 0: the parameters' moving average, what evaluation and export use.
  std::unique_ptr<WeightAverage> average;
  // precision: what autocast computes in (kFloat: nothing is cast), and the loss scaling of
  // mixed precision on CUDA.
  at::ScalarType autocast_dtype = at::kFloat;
  std::unique_ptr<LossScaler> scaler;
  // Rank 0, once the run is named (OpenRun): its metrics records, TensorBoard scalars and report.
  std::unique_ptr<RunRecords> records;
  // Set by PlanEpochs before the first epoch.
  EpochShape shape;
  int64_t steps_per_epoch = 0;
  std::optional<LrSchedule> schedule;
  // A rank got the launcher's checkpoint request (a preemption notice): every rank stops after
  // the step at which they agreed on it.
  bool preempted = false;
  // When this rank last wrote (rank 0) or took part in a checkpoint: checkpoint.every_seconds.
  Clock::time_point last_checkpoint = Clock::now();
};

inline bool CheckpointsOn(const TrainConfig& config) { return !config.checkpoint().dir().empty(); }

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_RUN_H_
