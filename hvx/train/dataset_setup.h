// Getting a config's data ready: creating Fashion-MNIST shards on first use, and the ImageNet
// decoder. Collective: every rank calls PrepareDataset after hvx::Init.
//
//   HVX_RETURN_IF_ERROR(PrepareDataset(config));   // rank 0 writes missing shards, others wait
//   HVX_ASSIGN_OR_RETURN(auto decoder, MakeImageNetDecoder(config, /*train=*/true));
#ifndef HVX_TRAIN_DATASET_SETUP_H_
#define HVX_TRAIN_DATASET_SETUP_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/data/decoder.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// When data.train_files matches nothing and data.fashion_mnist_source.output_dir is set, rank 0
// converts the IDX files into record shards there (written under a temporary name and renamed,
// so an interrupted conversion is redone) while the other ranks wait. Then checks that the
// train and eval patterns match files, with a message that says where the data was expected.
absl::Status PrepareDataset(const TrainConfig& config);

// ImageNet Example records (hvx/data/jpeg.h): JPEG decode, random-resized crop and flip for
// training, shorter side to image_size * 256 / 224 and centre crop for evaluation, normalised
// float32 [3, image_size, image_size]. Labels come out as stored (1..1000 in the standard layout);
// the trainer adds data.label_offset.
absl::StatusOr<std::shared_ptr<const data::Decoder>> MakeImageNetDecoder(const TrainConfig& config,
                                                                         bool train);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_DATASET_SETUP_H_
