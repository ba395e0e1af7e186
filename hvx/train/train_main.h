// The trainer program behind tools/train: flags, config loading, self-launch, init, training.
//
// clang-format off
//   int main(int argc, char** argv) { return hvx::train::TrainMain(argc, argv); }
//   // train --config=fashion_mnist.pbtxt --override='epochs: 2' --override='launch { num_processes: "4" }'
// clang-format on
//
// Flags: --config=NAME (required; see ConfigSearchPath), --override=TEXT (repeatable, merged in
// order), --data_dir=DIR (RebaseDataFiles after the overrides), --sample_log=DIR
// (RunOptions::sample_log_dir), --max_steps=N (RunOptions::max_steps),
// --fresh or --fresh=true|false (RunOptions::fresh), --export=PATH (RunOptions::export_path),
// --export_from=CKPT (RunOptions::export_from), --help. A config whose checkpoint.dir holds a
// finished run prints (rank 0) that the run in DIR is already complete and how to start fresh, and
// exits 0. A run stopped early by a checkpoint request (SIGUSR1 from hvxrun, or SIGTERM), its
// checkpoint written, exits launch::kPreemptedExitCode (75): run it again to go on; with no
// checkpoint.dir it exits 1, nothing saved. Not under a launcher and asked for more than one
// process, the program starts itself under hvxrun with the same arguments and returns the job's
// exit code.
#ifndef HVX_TRAIN_TRAIN_MAIN_H_
#define HVX_TRAIN_TRAIN_MAIN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/common/env.h"

namespace hvx {
namespace train {

struct TrainFlags {
  std::string config;
  std::vector<std::string> overrides;
  std::string data_dir;  // RebaseDataFiles (config.h)
  std::string sample_log;
  int64_t max_steps = 0;
  bool fresh = false;
  std::string export_path;
  std::string export_from;
  bool help = false;
  bool version = false;  // --version: DescribeBuild()
};

// Parses the arguments after argv[0]. Both "--flag=value" and "--flag value" work.
absl::StatusOr<TrainFlags> ParseTrainFlags(const std::vector<std::string>& args);

// Where the trainer's bundled configs are ("" when nowhere): the data/ directory of its runfiles
// under Bazel (RUNFILES_DIR, or SELF.runfiles / ARGV0.runfiles), else, installed as
// PREFIX/bin/NAME, the folder PREFIX/configs (the images: /opt/hvx/bin/hvx-train and
// /opt/hvx/configs). `self` is the executable's real path (SelfExecutable(); "" = argv0).
std::string FindBundledConfigDir(const std::string& argv0, const Environment& env,
                                 const std::string& self);

int TrainMain(int argc, char** argv);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_TRAIN_MAIN_H_
