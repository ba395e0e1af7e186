// The single-file checkpoint format (checkpoint.format SINGLE_FILE), rank 0's alone: writing one
// file and reading it back, with every check a file gets before LibTorch sees it. checkpoint.h
// says what the file holds, and decides when it is written and which one is loaded.
//
//   HVX_RETURN_IF_ERROR(WriteCheckpointFile(path, model, optimizer, position, rank_buffers, {}));
//   HVX_RETURN_IF_ERROR(LoadCheckpointFile(path, device, model, optimizer, &position,
//                                          &rank_buffers, {}, &averages, &state));
#ifndef HVX_TRAIN_CHECKPOINT_FILE_H_
#define HVX_TRAIN_CHECKPOINT_FILE_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/models.h"
#include "hvx/train/sharded_checkpoint.h"

namespace hvx {
namespace train {

// Writes the checkpoint file `path` (to a temporary, synced, renamed): `model` with its
// floating-point buffers replaced by the average of `rank_buffers` (every rank's,
// GatherRankBuffers) while it is written, then restored; `optimizer`, `p`, `rank_buffers` and
// `extras`. Errors name the file and the file system's reason (ENOSPC). Failpoint "checkpoint"
// before the rename.
absl::Status WriteCheckpointFile(const std::string& path, Classifier& model,
                                 torch::optim::Optimizer& optimizer, const TrainingPosition& p,
                                 const std::vector<torch::Tensor>& rank_buffers,
                                 const CheckpointExtras& extras);

// Loads the file `path` onto `device`, after checking it (ReadCheckedArchive: DataLoss for a file
// proven damaged or holding code) and that it was written for `model` and `extras.data_order`
// (FailedPrecondition). *rank_buffers gets the per-rank buffers when the file has them for every
// floating-point buffer of `model`; *found_averages / *found_state say whether the file had
// extras.averages / extras.state, which are then loaded.
absl::Status LoadCheckpointFile(const std::string& path, const torch::Device& device,
                                Classifier& model, torch::optim::Optimizer& optimizer,
                                TrainingPosition* p, std::vector<torch::Tensor>* rank_buffers,
                                const CheckpointExtras& extras, bool* found_averages,
                                bool* found_state);

// The model alone of the file `path` (its averaged buffers); with `use_averages`, the moving
// averages as its parameters (FailedPrecondition when the file has none).
absl::Status LoadCheckpointFileModel(const std::string& path, const torch::Device& device,
                                     Classifier& model, bool use_averages);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_CHECKPOINT_FILE_H_
