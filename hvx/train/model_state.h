// What both checkpoint formats check and keep of a model, one way: its fingerprint, its
// floating-point buffers (every rank's), and the data order a checkpoint was written in.
//
//   HVX_RETURN_IF_ERROR(CheckFingerprint(ModelFingerprint(model), theirs, path));
//   HVX_ASSIGN_OR_RETURN(std::vector<torch::Tensor> all, GatherRankBuffers(model));  // collective
#ifndef HVX_TRAIN_MODEL_STATE_H_
#define HVX_TRAIN_MODEL_STATE_H_

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/models.h"

namespace hvx {
namespace train {

// The floating-point buffers of `model` (BatchNorm running statistics) by name, in a fixed order,
// the same on every rank. The tensors share memory with the model's.
std::vector<std::pair<std::string, torch::Tensor>> FloatBuffers(Classifier& model);

// Every rank's floating-point buffers, each as [size, numel] on the CPU, in FloatBuffers order.
// Running statistics differ between ranks (each sees its own batches); a checkpoint keeps all of
// them so that a resumed run continues with exactly the statistics an uninterrupted run has.
// Collective.
absl::StatusOr<std::vector<torch::Tensor>> GatherRankBuffers(Classifier& model);

// What a checkpoint was written for: one line per parameter and buffer of the model, in
// named_parameters then named_buffers order, "name dtype [d0, d1, ...]".
std::vector<std::string> ModelFingerprint(Classifier& model);

// FailedPrecondition naming the checkpoint at `path` and the first line at which `theirs` (a
// checkpoint's fingerprint) differs from `mine`; OK when they are the same.
absl::Status CheckFingerprint(const std::vector<std::string>& mine,
                              const std::vector<std::string>& theirs, const std::string& path);
// The same refusal for `what` found some other way (an older checkpoint's shapes).
absl::Status RefuseOtherModel(const std::string& path, const std::string& what);

// Refuses a checkpoint written mid-epoch (position `p`) in the data order `theirs` when this run's
// is `mine` (CheckpointExtras::data_order); at an epoch's start the order may change, which is
// logged. Null `mine`: the run keeps no order, anything goes.
absl::Status CheckDataOrder(const std::string& theirs, const TrainingPosition& p,
                            const std::string* mine, const std::string& path);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_MODEL_STATE_H_
