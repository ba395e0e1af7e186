#include "hvx/train/preemption.h"

#include <atomic>
#include <cstdint>

#include "hvx/common/status.h"
#include "hvx/core/api.h"

namespace hvx {
namespace train {
namespace {

// SIGUSR1: hvxrun forwards a preemption notice (SIGTERM or SIGINT to it) as this request.
// SIGTERM to a rank itself is one too (a process manager that signals every process of a job, a
// trainer run without a launcher). Every SIGTERM only sets the request: one sent to a whole
// process tree reaches a rank twice, once from its wrapper, and whoever sends it follows with
// SIGKILL if the rank does not end.
std::atomic<bool> g_checkpoint_request{false};

void OnCheckpointRequest(int) { g_checkpoint_request.store(true); }

bool MaxStepsReached(const Run& run, const TrainingPosition& pos) {
  return run.options.max_steps > 0 && pos.global_step >= run.options.max_steps;
}

}  // namespace

CheckpointRequestHandlers::CheckpointRequestHandlers() {
  g_checkpoint_request.store(false);
  struct sigaction request {};
  request.sa_handler = OnCheckpointRequest;
  sigemptyset(&request.sa_mask);
  request.sa_flags = SA_RESTART;
  for (int k = 0; k < 2; ++k) sigaction(kSignals[k], &request, &previous_[k]);
}

void CheckpointRequestHandlers::Restore() {
  if (restored_) return;
  restored_ = true;
  for (int k = 0; k < 2; ++k) sigaction(kSignals[k], &previous_[k], nullptr);
}

absl::StatusOr<AfterStep> AgreeAfterStep(const Run& run) {
  const double every_s = run.config.checkpoint().every_seconds();
  int32_t flags[3] = {
      g_checkpoint_request.load() ? 1 : 0,
      Rank() == 0 && every_s > 0 && Seconds(Clock::now() - run.last_checkpoint) >= every_s,
      run.checkpointer != nullptr && run.checkpointer->Writing() ? 1 : 0,
  };
  TensorRef t(DataType::kInt32, {3}, flags);
  AllreduceOptions o;
  o.op = ReduceOp::kMax;
  HVX_RETURN_IF_ERROR(Wait(Allreduce("trainer.after_step", t, t, o)));
  return AfterStep{flags[0] != 0, flags[1] != 0, flags[2] != 0};
}

bool StopAfterThisStep(const Run& run, const TrainingPosition& pos) {
  return run.preempted || MaxStepsReached(run, pos);
}

}  // namespace train
}  // namespace hvx
