// What identifies a training run's data, compared between ranks at start and between a checkpoint
// and the run that resumes it: the files each rank sees, and what decides an epoch's sample order.
//
//   run.data_order = DataOrder(config, *train);   // kept in checkpoints (CheckpointExtras)
//   {"training files", FilesFingerprint(*train)}  // agreed by every rank at start
#ifndef HVX_TRAIN_DATA_IDENTITY_H_
#define HVX_TRAIN_DATA_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "hvx/data/dataset.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// FNV-1a (64 bits) of `text`: the same on every rank and every build.
uint64_t Fingerprint(absl::string_view text);

// The dataset's files as this rank sees them, by path and size: "<n> files, fingerprint <hex>".
std::string FilesFingerprint(const data::Dataset& d);

// What decides the order of an epoch's training samples: the shuffle seed, the remainder policy,
// and the dataset by its samples and its files' sizes in order (not their paths: a dataset moved
// elsewhere keeps its order).
std::string DataOrder(const TrainConfig& config, const data::Dataset& d);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_DATA_IDENTITY_H_
