#include "hvx/train/progress.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/torch/tensor.h"

namespace hvx {
namespace train {
namespace {

std::string FormatDuration(double s) {
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  return absl::StrFormat("%dm%02ds", t / 60, t % 60);
}

}  // namespace

absl::Status ReportProgress(Run& run, int64_t epoch, const TrainingPosition& pos, double lr,
                            const StepWindow& window) {
  const TrainConfig& config = run.config;
  const int size = Size();
  double mean_loss = window.loss_sum / window.steps;
  if (size > 1) {
    HVX_ASSIGN_OR_RETURN(mean_loss, AverageMetric(mean_loss, "train.loss"));
  }
  const double window_s = window.seconds();
  const double samples_per_s = window.samples * size / std::max(window_s, 1e-9);
  const double data_wait = window.data_wait_s / std::max(window_s, 1e-9);
  const int64_t epoch_steps = run.steps_per_epoch;
  const int64_t steps_left =
      (config.epochs() - epoch - 1) * epoch_steps + (epoch_steps - pos.steps_in_epoch);
  const double eta_s = steps_left * window_s / window.steps;
  if (Rank() != 0) return absl::OkStatus();
  const bool clipping = config.optimizer().clip_grad_norm() > 0;
  const double grad_norm = window.grad_norm_sum / window.steps;  // the same on every rank
  std::printf(
      "epoch %lld/%d step %lld/%lld loss %.7g lr %.6g samples/s %.0f data_wait %.1f%% eta %s%s\n",
      static_cast<long long>(epoch + 1), config.epochs(),
      static_cast<long long>(pos.steps_in_epoch), static_cast<long long>(epoch_steps), mean_loss,
      lr, samples_per_s, 100.0 * data_wait, FormatDuration(eta_s).c_str(),
      absl::StrCat(clipping ? absl::StrFormat(" grad_norm %.6g", grad_norm) : "",
                   run.scaler ? absl::StrFormat(" loss_scale %g skipped_steps %d",
                                                run.scaler->scale(), run.scaler->skipped_steps())
                              : "")
          .c_str());
  std::fflush(stdout);
  // The same on every rank; windows == 0 until collectives ran across several ranks.
  const StragglerStatus stragglers = Stragglers();
  double latest_ms = 0;
  for (double ms : stragglers.late_ms) latest_ms = std::max(latest_ms, ms);
  Json progress = {{"epoch", epoch + 1},
                   {"epochs", config.epochs()},
                   {"step", pos.steps_in_epoch},
                   {"steps_per_epoch", epoch_steps},
                   {"global_step", pos.global_step},
                   {"loss", mean_loss},
                   {"lr", lr},
                   {"samples_per_s", samples_per_s},
                   {"data_wait", data_wait},
                   {"eta_s", eta_s}};
  if (clipping) progress["grad_norm"] = grad_norm;
  if (stragglers.windows > 0) {
    progress["straggler"] = {{"rank", stragglers.rank},
                             {"late_ms", stragglers.late_ms},
                             {"wait_share", stragglers.share}};
  }
  if (run.scaler) {
    progress["loss_scale"] = run.scaler->scale();
    progress["skipped_steps"] = run.scaler->skipped_steps();
  }
  return run.records->Progress(
      {pos.global_step, mean_loss, lr, samples_per_s, data_wait, latest_ms, stragglers.rank},
      progress, clipping ? std::optional<double>(grad_norm) : std::nullopt);
}

absl::Status RecordCommitted(Run& run) {
  for (const Checkpointer::Committed& c : run.checkpointer->TakeCommitted()) {
    Json record = {{"path", c.path},
                   {"global_step", c.position.global_step},
                   {"epochs_done", c.position.epoch},
                   {"steps_in_epoch", c.position.steps_in_epoch},
                   {"samples_in_epoch", c.position.samples_in_epoch}};
    if (c.bytes >= 0) {
      record["bytes"] = c.bytes;
      record["pause_s"] = c.pause_s;
      record["seconds"] = c.seconds;
    }
    if (run.records) HVX_RETURN_IF_ERROR(run.records->Checkpoint(record));
  }
  return absl::OkStatus();
}

Json EndRecord(const Run& run, const absl::StatusOr<TrainResult>& result) {
  if (!result.ok()) {
    return {{"state", "failed"}, {"error", result.status().ToString()}};
  }
  const char* state = result->already_complete ? "already_complete"
                      : result->preempted      ? "preempted"
                                               : "done";
  Json end = {{"state", state},
              {"global_step", result->global_step},
              {"seconds", result->wall_s},
              {"samples_per_s", result->samples_per_s},
              {"data_wait", result->data_wait_fraction}};
  if (!result->evals.empty()) {
    end["accuracy"] = result->evals.back().accuracy;
    end["eval_samples"] = result->evals.back().samples;
  }
  if (result->preempted && CheckpointsOn(run.config)) {
    end["checkpoint"] = run.checkpointer->Path(result->global_step);
  }
  if (run.scaler) end["skipped_steps"] = result->skipped_steps;
  return end;
}

std::string DescribeResult(const TrainResult& result) {
  if (result.already_complete) {
    return absl::StrFormat("already complete (%d epochs, %d steps)", result.epochs_done,
                           result.global_step);
  }
  std::string line =
      absl::StrFormat("%s: %d steps in %.1f s", result.preempted ? "preempted" : "done",
                      result.global_step, result.wall_s);
  if (!result.evals.empty()) {
    absl::StrAppendFormat(&line, ", eval accuracy %.4f on %d samples", result.evals.back().accuracy,
                          result.evals.back().samples);
  }
  absl::StrAppendFormat(&line, ", %.0f samples/s", result.samples_per_s);
  return line;
}

}  // namespace train
}  // namespace hvx
