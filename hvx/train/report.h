// A training run as one self-contained HTML page that a person opens in a browser: no network,
// no scripts, charts as inline SVG. Rank 0 keeps "<summaries_dir>/<run>/report.html" current.
//
//   RunReport report("cnn on 60000 samples", config.DebugString(), /*world_size=*/4);
//   report.AddProgress({step, loss, lr, samples_per_s, data_wait_fraction});
//   report.AddEval({epoch, step, accuracy, top5, loss, samples});
//   HVX_RETURN_IF_ERROR(report.Write(dir + "/report.html"));
//
// The page holds: a summary table (id "summary": the run, model, world size, steps, the last
// evaluation, throughput, state, the straggler named last and when), one chart per series (ids
// "chart-loss", "chart-lr", "chart-samples_per_s", "chart-data_wait", "chart-straggler",
// "chart-accuracy"), each a <polyline class="series"> over the recorded points, the evaluations as
// a table (id "evals") with the numbers as the trainer's log prints them, and the effective config
// (id "config").
#ifndef HVX_TRAIN_REPORT_H_
#define HVX_TRAIN_REPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace hvx {
namespace train {

struct ProgressPoint {
  int64_t step = 0;  // global step at the end of the window
  double loss = 0;   // mean over ranks and the window's steps
  double lr = 0;
  double samples_per_s = 0;  // all ranks
  double data_wait = 0;      // fraction of the window's time spent waiting for input
  // Straggler detection's last window (hvx::Stragglers()): how much later than the median of the
  // others the latest rank submitted its collectives, and the rank named persistently late (-1:
  // none).
  double straggler_late_ms = 0;
  int straggler_rank = -1;
};

struct EvalPoint {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;
  double accuracy = 0;
  double top5 = 0;
  double loss = 0;
  int64_t samples = 0;
};

class RunReport {
 public:
  RunReport(std::string model, std::string config_text, int world_size);

  void AddProgress(const ProgressPoint& point) { progress_.push_back(point); }
  void AddEval(const EvalPoint& point) { evals_.push_back(point); }
  // What the run is doing now or how it ended ("training", "done: 120 steps in 31.0 s ...").
  void SetState(std::string state) { state_ = std::move(state); }
  // The run's name (hvx/train/run_dir.h), shown in the summary's "run" row when set.
  void SetRun(std::string run) { run_ = std::move(run); }

  std::string Html() const;
  // Html(), written atomically (a browser refreshing it never sees half a page).
  absl::Status Write(const std::string& path) const;

 private:
  std::string model_;
  std::string config_text_;
  int world_size_;
  std::string state_ = "training";
  std::string run_;
  std::vector<ProgressPoint> progress_;
  std::vector<EvalPoint> evals_;
};

// `text` with &, <, >, " and ' replaced by HTML entities.
std::string HtmlEscape(const std::string& text);

// An SVG line chart (width x height pixels) of `points` (x, y) with axes, 5 ticks on each and
// the title; "no data yet" when there are no points. The series is one
// <polyline class="series"> in chart coordinates.
std::string SvgLineChart(const std::string& id, const std::string& title,
                         const std::vector<std::pair<double, double>>& points, int width = 560,
                         int height = 240);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_REPORT_H_
