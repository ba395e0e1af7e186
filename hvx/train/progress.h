// What the loop reports of a run: rank 0's progress lines and records (RunRecords: the metrics
// file, TensorBoard and the report) for a window of steps, each committed checkpoint's record, the
// run's end record and one-line summary.
//
//   StepWindow window;
//   window.Add(loss, grad_norm, batch_samples, waited_s);
//   HVX_RETURN_IF_ERROR(ReportProgress(run, epoch, pos, lr, window));
#ifndef HVX_TRAIN_PROGRESS_H_
#define HVX_TRAIN_PROGRESS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/common/json.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/run.h"
#include "hvx/train/trainer.h"

namespace hvx {
namespace train {

// What a stretch of steps did on this rank: since the last progress line, or since the epoch began.
struct StepWindow {
  Clock::time_point start = Clock::now();
  int64_t steps = 0;
  int64_t samples = 0;
  double loss_sum = 0;
  double grad_norm_sum = 0;  // before clipping; only measured with optimizer.clip_grad_norm
  double data_wait_s = 0;    // waiting for the pipeline's batches

  void Add(double loss, double grad_norm, int64_t batch_samples, double waited_s) {
    ++steps;
    samples += batch_samples;
    loss_sum += loss;
    grad_norm_sum += grad_norm;
    data_wait_s += waited_s;
  }
  double seconds() const { return Seconds(Clock::now() - start); }
};

// Rank 0's progress line and summaries for the steps of `window`, which end at `pos`. Every rank
// calls it: the loss is averaged over ranks.
absl::Status ReportProgress(Run& run, int64_t epoch, const TrainingPosition& pos, double lr,
                            const StepWindow& window);

// The "checkpoint" record of each checkpoint committed since the last: a checkpoint written in
// the background is recorded when it is whole, not when it started.
absl::Status RecordCommitted(Run& run);

// The metrics file's last record of a run: how it ended ("state": "done", "preempted",
// "already_complete" or "failed", with "error"), its steps, time and last evaluation.
Json EndRecord(const Run& run, const absl::StatusOr<TrainResult>& result);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_PROGRESS_H_
