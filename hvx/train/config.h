// Loading, merging and checking a TrainConfig (hvx/train/train_config.proto).
//
//   HVX_ASSIGN_OR_RETURN(LoadedConfig loaded, LoadTrainConfig("fashion_mnist.pbtxt", search, {}));
//   const TrainConfig& config = loaded.config;   // defaults filled in, semantically valid
//
// Every error names where it comes from: a syntax error or a bad value in a file reads
// "<file>:<line>:<column>: <field>: <what is wrong>"; one in an --override reads
// "--override #<n>:<line>:<column>: ...". Lines and columns count from 1.
#ifndef HVX_TRAIN_CONFIG_H_
#define HVX_TRAIN_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// Where --config=NAME is looked for, in order: NAME itself when absolute, then
// <working_dir>/NAME (BUILD_WORKING_DIRECTORY under `bazel run`, else the current directory),
// then <bundled_dir>/NAME (the data/ configs shipped with the trainer). `home` (the caller's
// $HOME; empty when unset) expands "~" and "$HOME" in NAME and in the config's paths.
struct ConfigSearchPath {
  std::string working_dir;
  std::string bundled_dir;
  std::string home;
};

// The path --config=NAME names, or NotFound listing every place that was tried.
absl::StatusOr<std::string> ResolveConfigPath(absl::string_view name,
                                              const ConfigSearchPath& search);

// Parses `text` as a TrainConfig; `source` names it in errors.
absl::StatusOr<TrainConfig> ParseTrainConfig(absl::string_view text, absl::string_view source);

struct LoadedConfig {
  std::string path;  // the file that was read
  TrainConfig config;
};

// Resolves and parses --config, merges each override in order (text-format merge: scalars
// replace, messages merge, repeated fields append), fills defaults, expands home directories in
// paths (ExpandConfigPaths with search.home) and validates.
absl::StatusOr<LoadedConfig> LoadTrainConfig(absl::string_view name, const ConfigSearchPath& search,
                                             const std::vector<std::string>& overrides);

// LoadTrainConfig after the file is read: `text` is its contents and `path` names it in errors.
absl::StatusOr<TrainConfig> TrainConfigFromText(absl::string_view text, absl::string_view path,
                                                const std::vector<std::string>& overrides,
                                                const std::string& home);

// Replaces zero/empty fields by the defaults documented in train_config.proto.
void FillDefaults(TrainConfig* config);

// Checks values a trainer cannot run with (batch size 0, unknown model, bad schedule, ...).
// Does not touch the file system. `source` names the config in messages.
absl::Status ValidateTrainConfig(const TrainConfig& config, absl::string_view source);

// Replaces, in every path the config holds (data.train_files and data.eval_files, each
// comma-separated pattern; data.fashion_mnist_source.idx_dir and output_dir; checkpoint.dir;
// summaries_dir; engine.timeline_path), a leading "~" or "~/" and every "$HOME" or "${HOME}" by
// `home`. This is the one place where the trainer expands them: everything downstream takes
// config paths as they are. InvalidArgument naming the field when a path needs `home` and it is
// empty (HOME not set).
absl::Status ExpandConfigPaths(const std::string& home, TrainConfig* config);

// Splits a comma-separated list of glob patterns (whitespace around each is dropped).
std::vector<std::string> SplitFilePatterns(absl::string_view patterns);

// --data_dir=DIR: the data's files are looked for in `dir` under the names the config gives
// them. Each pattern of data.train_files and data.eval_files keeps its last component and takes
// `dir` as its folder ("/data/imagenet/train-*" becomes "DIR/train-*"), and a
// data.fashion_mnist_source.output_dir that is set becomes `dir`, so the shards it makes match.
// For a platform that puts a job's data in a folder of its own (SageMaker's
// /opt/ml/input/data/<channel>). InvalidArgument when `dir` is empty or a pattern has no file
// name (ends in "/").
absl::Status RebaseDataFiles(absl::string_view dir, DataConfig* data);

// Whether the model's input is a JPEG image: format IMAGENET, or EXAMPLE with a JPEG feature.
bool HasJpegInput(const DataConfig& data);

// One path with ExpandConfigPaths' rules; InvalidArgument when it needs `home` and it is empty.
absl::StatusOr<std::string> ExpandHome(absl::string_view path, const std::string& home);

// Models the trainer knows: "mlp", "cnn", "resnet18", "resnet50".
const std::vector<std::string>& KnownModels();

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_CONFIG_H_
