// A preemption notice and the ranks' agreement after each step: the launcher's checkpoint request
// (SIGUSR1, or SIGTERM to a rank) caught while training runs, and one small allreduce after every
// step so that every rank acts on the same step: stop, write the checkpoint every_seconds asks
// for, or wait for a background checkpoint still being written.
//
//   CheckpointRequestHandlers handlers;  // for as long as training runs
//   HVX_ASSIGN_OR_RETURN(const AfterStep agreed, AgreeAfterStep(run));
//   run.preempted = run.preempted || agreed.preempt;
#ifndef HVX_TRAIN_PREEMPTION_H_
#define HVX_TRAIN_PREEMPTION_H_

#include <signal.h>

#include "absl/status/statusor.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/run.h"

namespace hvx {
namespace train {

// The request's handlers for as long as training runs; the previous actions come back after. A
// request a run got is not carried into the next run of the same process: making the handlers
// clears it.
class CheckpointRequestHandlers {
 public:
  CheckpointRequestHandlers();
  ~CheckpointRequestHandlers() { Restore(); }
  void Restore();
  CheckpointRequestHandlers(const CheckpointRequestHandlers&) = delete;
  CheckpointRequestHandlers& operator=(const CheckpointRequestHandlers&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGUSR1, SIGTERM};
  struct sigaction previous_[2];
  bool restored_ = false;
};

// What the ranks agreed after a step, in one 12-byte allreduce (max), so that all act on the same
// step: some rank has the launcher's checkpoint request; rank 0's checkpoint.every_seconds is due;
// some rank is still writing its share of a checkpoint in the background.
struct AfterStep {
  bool preempt = false;
  bool checkpoint_due = false;
  bool still_writing = false;
};
absl::StatusOr<AfterStep> AgreeAfterStep(const Run& run);

// Whether the run ends after this step: RunOptions::max_steps, or an agreed checkpoint request.
bool StopAfterThisStep(const Run& run, const TrainingPosition& pos);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_PREEMPTION_H_
