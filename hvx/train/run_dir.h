// Where a run's summaries live. A run is one training from its first step to its last, across
// every resume from its own checkpoints; its TensorBoard events, metrics file and report.html go to
// "<summaries_dir>/<run name>/", a folder no other run writes. Its checkpoints store the name
// (CheckpointExtras::run), so a resumed run continues its folder, while a run that starts afresh
// (another checkpoint.dir, none, or --fresh) gets a new one: two runs never overwrite each other's
// report, and TensorBoard shows each as its own run.
//
//   HVX_ASSIGN_OR_RETURN(RunDir dir, OpenRunDir("/runs/fashion/summaries", stored_name));
//   // dir.path: "/runs/fashion/summaries/20261207-022455-3f9a1c"
//   HVX_RETURN_IF_ERROR(AddRecordedRun(dir.path + "/metrics.jsonl", dir.name, step, &report));
#ifndef HVX_TRAIN_RUN_DIR_H_
#define HVX_TRAIN_RUN_DIR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hvx/train/report.h"

namespace hvx {
namespace train {

// A new run's name: its start in UTC and 6 hex digits of `random_hex` ("20261207-022455-3f9a1c"),
// so that names sort by start and two runs started in one second differ.
std::string NewRunName(absl::Time start, absl::string_view random_hex);

// Whether `name` can be a run's folder: 1 to 64 characters of [A-Za-z0-9._-], not starting with
// '.' (so never "." or ".." or hidden). A checkpoint's stored name is checked with it before it
// becomes a path.
bool IsRunName(absl::string_view name);

struct RunDir {
  std::string name;
  std::string path;        // "<summaries_dir>/<name>"
  bool continued = false;  // the folder was there: a resumed run goes on writing into it
};

// The folder of run `name` in `summaries_dir`, made (with its parents) when missing; with `name`
// empty, a new run: a new name (NewRunName of now) whose folder is created here and did not exist
// before (mkdir, never an existing one: another job's run started in the same second gets its
// own). InvalidArgument when `name` is not IsRunName; the error of the mkdir that failed.
absl::StatusOr<RunDir> OpenRunDir(const std::string& summaries_dir, const std::string& name);

// Adds what the metrics file at `path` recorded of run `run` up to `up_to_step` to `report`, so the
// page of a resumed run shows all of it: the "progress" and "eval" records that follow a "start"
// record of that run (a file named by logging.metrics_file may hold other runs'), each part's
// points past the step the next part resumed from left out (those steps were trained again), and
// so those past `up_to_step`. A
// missing file adds nothing; a line that is not a metrics record is left out with a warning
// naming the file and line (a line cut short by a run that died mid-write).
absl::Status AddRecordedRun(const std::string& path, const std::string& run, int64_t up_to_step,
                            RunReport* report);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_RUN_DIR_H_
