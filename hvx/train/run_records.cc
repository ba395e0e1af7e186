#include "hvx/train/run_records.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "hvx/common/logging.h"
#include "hvx/common/random_hex.h"
#include "hvx/common/status.h"
#include "hvx/train/run_dir.h"

namespace hvx {
namespace train {

absl::StatusOr<std::unique_ptr<RunRecords>> RunRecords::Open(const Options& options) {
  std::unique_ptr<RunRecords> records(new RunRecords());
  std::string stored = options.run;
  if (!stored.empty() && !IsRunName(stored)) {
    HVX_LOG(WARNING) << "the checkpoint names run \"" << stored
                     << "\", which cannot name a folder; this run gets a new name";
    stored.clear();
  }
  const bool named = !stored.empty();
  if (options.summaries_dir.empty()) {
    records->run_ = named ? stored : NewRunName(absl::Now(), RandomHex());
  } else {
    HVX_ASSIGN_OR_RETURN(const RunDir dir, OpenRunDir(options.summaries_dir, stored));
    records->run_ = dir.name;
    records->dir_ = dir.path;
    HVX_LOG(INFO) << "run " << records->run_ << ": "
                  << (options.failed                  ? "failed before training"
                      : options.resumed_from_step < 0 ? "started"
                      : named                         ? "resumed"
                              : "resumed from a checkpoint that names no run")
                  << "; its report, metrics and TensorBoard events are in " << records->dir_;
  }
  std::string metrics_path = options.metrics_file;
  if (metrics_path.empty() && !records->dir_.empty())
    metrics_path = records->dir_ + "/metrics.jsonl";
  if (!metrics_path.empty()) {
    HVX_ASSIGN_OR_RETURN(records->metrics_, MetricsLog::Open(metrics_path));
  }
  if (records->dir_.empty()) return records;
  HVX_ASSIGN_OR_RETURN(records->events_, SummaryWriter::Create(records->dir_));
  records->report_ =
      std::make_unique<RunReport>(options.model, options.config_text, options.world_size);
  records->report_->SetRun(records->run_);
  if (options.resumed_from_step >= 0) {
    HVX_RETURN_IF_ERROR(AddRecordedRun(metrics_path, records->run_, options.resumed_from_step,
                                       records->report_.get()));
  }
  HVX_RETURN_IF_ERROR(records->report_->Write(records->ReportPath()));
  return records;
}

absl::Status RunRecords::Scalar(const char* tag, double value, int64_t step) {
  return events_ ? events_->AddScalar(tag, value, step) : absl::OkStatus();
}

absl::Status RunRecords::Start(const Json& fields) {
  if (metrics_ == nullptr) return absl::OkStatus();
  Json record = fields;
  record["run"] = run_;
  return metrics_->Write("start", record);
}

absl::Status RunRecords::Progress(const ProgressPoint& point, const Json& record,
                                  std::optional<double> grad_norm) {
  if (report_) report_->AddProgress(point);
  if (metrics_) HVX_RETURN_IF_ERROR(metrics_->Write("progress", record));
  if (grad_norm) HVX_RETURN_IF_ERROR(Scalar("train/grad_norm", *grad_norm, point.step));
  HVX_RETURN_IF_ERROR(Scalar("train/loss", point.loss, point.step));
  HVX_RETURN_IF_ERROR(Scalar("train/lr", point.lr, point.step));
  return Scalar("train/samples_per_s", point.samples_per_s, point.step);
}

absl::Status RunRecords::Eval(const EvalPoint& point, const Json& record) {
  if (metrics_) HVX_RETURN_IF_ERROR(metrics_->Write("eval", record));
  HVX_RETURN_IF_ERROR(Scalar("eval/accuracy", point.accuracy, point.step));
  HVX_RETURN_IF_ERROR(Scalar("eval/loss", point.loss, point.step));
  HVX_RETURN_IF_ERROR(Scalar("eval/top5_accuracy", point.top5, point.step));
  if (report_) {
    report_->AddEval(point);
    HVX_RETURN_IF_ERROR(report_->Write(ReportPath()));
  }
  return events_ ? events_->Flush() : absl::OkStatus();
}

absl::Status RunRecords::Checkpoint(const Json& record) {
  return metrics_ ? metrics_->Write("checkpoint", record) : absl::OkStatus();
}

void RunRecords::End(const Json& record, const std::string& state) {
  if (metrics_) {
    absl::Status recorded = metrics_->Write("end", record);
    if (!recorded.ok()) HVX_LOG(WARNING) << recorded;
  }
  if (events_) events_->Close().IgnoreError();
  if (report_) {
    report_->SetState(state);
    absl::Status written = report_->Write(ReportPath());
    if (!written.ok()) HVX_LOG(WARNING) << written;
  }
}

}  // namespace train
}  // namespace hvx
