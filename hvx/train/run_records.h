// What rank 0 records of a training run for the people and programs that follow it, each event
// told once and written to every sink the config asks for: the metrics file's JSON lines
// (metrics_log.h), the TensorBoard scalars (summary_writer.h) and report.html (report.h), all in
// the run's own folder (run_dir.h). The trainer computes what happened; this decides where it goes.
//
//   RunRecords::Options o;
//   o.summaries_dir = config.summaries_dir();   // "": no folder, no events, no report
//   o.run = stored_name;                        // "": a new run
//   HVX_ASSIGN_OR_RETURN(auto records, RunRecords::Open(o));
//   HVX_RETURN_IF_ERROR(records->Start({{"model", "cnn"}, ...}));
//   HVX_RETURN_IF_ERROR(records->Progress(point, {{"epoch", 1}, ...}));
//   records->End(end_record, "done: 120 steps in 31.0 s");
#ifndef HVX_TRAIN_RUN_RECORDS_H_
#define HVX_TRAIN_RUN_RECORDS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/common/json.h"
#include "hvx/train/metrics_log.h"
#include "hvx/train/report.h"
#include "hvx/train/summary_writer.h"

namespace hvx {
namespace train {

class RunRecords {
 public:
  struct Options {
    std::string summaries_dir;       // "": no run folder, no TensorBoard events, no report
    std::string metrics_file;        // "": "<run folder>/metrics.jsonl" when there is a folder
    std::string run;                 // the run's name from the checkpoint resumed; "": a new run
    int64_t resumed_from_step = -1;  // >= 0: the step of the checkpoint resumed from
    bool failed = false;             // the run failed before it started: only End follows
    // The report's title, config and world size.
    std::string model;
    std::string config_text;
    int world_size = 1;
  };

  // Names the run (options.run, else a new name), opens its folder (OpenRunDir), metrics file
  // and event file, and writes the first report, which for a resumed run holds what the run's
  // metrics file recorded up to the resumed step (AddRecordedRun). A stored name that is not a
  // run name (IsRunName: a checkpoint not written by hvx) gets the run a new one, with a warning.
  static absl::StatusOr<std::unique_ptr<RunRecords>> Open(const Options& options);

  const std::string& run() const { return run_; }
  const std::string& dir() const { return dir_; }  // "" without summaries_dir

  // The "start" record: `fields` and the run's name as "run".
  absl::Status Start(const Json& fields);
  // A progress point: `record` to the metrics file, the point to the report, and the scalars
  // train/loss, train/lr, train/samples_per_s (and train/grad_norm with `grad_norm`) at its step.
  absl::Status Progress(const ProgressPoint& point, const Json& record,
                        std::optional<double> grad_norm = std::nullopt);
  // An evaluation: `record`, the scalars eval/accuracy, eval/loss and eval/top5_accuracy, the
  // report (rewritten) and the events flushed.
  absl::Status Eval(const EvalPoint& point, const Json& record);
  absl::Status Checkpoint(const Json& record);
  // The end: the "end" record, the events closed, the report's state set and the page rewritten.
  // Failures are logged, not returned: the run's own outcome is what its caller reports.
  void End(const Json& record, const std::string& state);

 private:
  RunRecords() = default;
  absl::Status Scalar(const char* tag, double value, int64_t step);
  std::string ReportPath() const { return dir_ + "/report.html"; }

  std::string run_;
  std::string dir_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<SummaryWriter> events_;
  std::unique_ptr<RunReport> report_;
};

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_RUN_RECORDS_H_
