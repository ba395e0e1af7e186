// The training loop of one rank: data shard, model, DistributedOptimizer, evaluation, progress
// lines, TensorBoard scalars and the run's report page (rank 0, summaries_dir; hvx/train/report.h),
// checkpoints and resume. This header is free of torch.
//
//   HVX_RETURN_IF_ERROR(hvx::Init(init_options));
//   HVX_ASSIGN_OR_RETURN(TrainResult result, RunTraining(config, {}));
//
// Every rank calls RunTraining with the same config after hvx::Init. Each rank trains on its
// ShardPlan shard (equal batch counts on every rank); evaluation sums correct predictions, loss
// and sample counts over ranks so every evaluation sample counts exactly once; rank 0 prints
// progress, writes summaries and writes checkpoints atomically. With checkpoint.resume, the run
// continues from the newest checkpoint exactly where it stopped: model, optimizer state, epoch,
// data position, each rank's BatchNorm statistics (same world size), and the random stream
// (reseeded from (seed, rank, epoch, step) at every step). At another world size or batch size
// the interrupted epoch trains the samples not yet seen, each once, with the step counters and
// learning rates of an uninterrupted run at the new size (hvx/train/epoch_position.h).
// Checkpoints never change the live model: evaluation averages the BatchNorm statistics over
// ranks, at the same points whether or not the run was interrupted, so resumed and uninterrupted
// runs also evaluate identically.
#ifndef HVX_TRAIN_TRAINER_H_
#define HVX_TRAIN_TRAINER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

struct RunOptions {
  // Writes "<dir>/rank<R>-epoch<E>.txt", one global sample id per line, for every sample this
  // rank trained on in epoch E (padding duplicates included, marked with a trailing " pad").
  std::string sample_log_dir;
  // Stop after this many global steps (optimizer steps of all runs together; 0 = run every
  // epoch), writing a checkpoint first when checkpoints are on: what a preempted job leaves behind.
  int64_t max_steps = 0;
  // Start over even when checkpoint.dir holds checkpoints: rank 0 first moves them into
  // "<dir>/replaced-<unix seconds>/", once per job: a restart of job `fresh_job_id` (FreshJobId in
  // checkpoint.h; "" for none) resumes what the job wrote since.
  bool fresh = false;
  std::string fresh_job_id;
  // Rank 0 writes the final weights (BatchNorm statistics averaged over ranks; the moving average
  // of the parameters when TrainConfig.ema_decay is set) here as a file
  // Python's torch.load reads as a state dict (ExportStateDict), after the last epoch or, for a
  // run already complete, from its newest checkpoint; not when preempted.
  std::string export_path;
  // With export_path: export the model of this checkpoint file and train nothing.
  std::string export_from;
};

struct EvalResult {
  double accuracy = 0;
  double loss = 0;
  double top5_accuracy = 0;  // the label among the 5 largest logits (all, with fewer classes)
  int64_t samples = 0;       // summed over ranks: the evaluation set's size
};

struct TrainResult {
  int64_t global_step = 0;
  // Mean training loss over ranks at each step this run executed.
  std::vector<double> step_losses;
  std::vector<EvalResult> evals;
  // Training samples per second over all ranks (the steps of the last epoch run, also when
  // RunOptions::max_steps stopped it).
  double samples_per_s = 0;
  // Fraction of the training time spent waiting for input batches.
  double data_wait_fraction = 0;
  double wall_s = 0;
  int64_t resumed_from_step = -1;  // -1: started fresh
  std::string exported_to;  // RunOptions::export_path once written (and the scripted module's path)
  // A checkpoint request (SIGUSR1, hvxrun's form of a preemption notice, or SIGTERM to a rank)
  // ended the run: every rank stopped after the same step, which the checkpoint holds.
  bool preempted = false;
  // The newest checkpoint in checkpoint.dir already finished every epoch; nothing was trained
  // (global_step and epochs_done are that run's).
  bool already_complete = false;
  int64_t epochs_done = 0;
  // precision FP16/BF16 on CUDA: optimizer steps skipped for inf or NaN gradients (all runs).
  int64_t skipped_steps = 0;
  // This rank's optimizer state at the end (1/W of it under optimizer.shard), and the peak
  // resident memory of its process.
  int64_t optimizer_state_bytes = 0;
  int64_t peak_resident_bytes = 0;
};

absl::StatusOr<TrainResult> RunTraining(const TrainConfig& config, const RunOptions& options);

// How a run ended, in one line: "done: 120 steps in 31.0 s, eval accuracy 0.9150 on 10000
// samples, 712 samples/s" (also "preempted: ...", "already complete (...)").
std::string DescribeResult(const TrainResult& result);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_TRAINER_H_
