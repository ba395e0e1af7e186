// Getting a config's data ready: creating Fashion-MNIST shards on first use, and the decoder of
// its records. Collective: every rank calls PrepareDataset after hvx::Init.
//
//   HVX_RETURN_IF_ERROR(PrepareDataset(config));   // rank 0 writes missing shards, others wait
//   HVX_ASSIGN_OR_RETURN(auto decoder, MakeDecoder(config, /*train=*/true));
#ifndef HVX_TRAIN_DATASET_SETUP_H_
#define HVX_TRAIN_DATASET_SETUP_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/data/decoder.h"
#include "hvx/data/example_decoder.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// When data.train_files matches nothing and data.fashion_mnist_source.output_dir is set, rank 0
// converts the IDX files into record shards there (written under a temporary name and renamed,
// so an interrupted conversion is redone) while the other ranks wait. Then checks that the
// train and eval patterns match files, with a message that says where the data was expected.
absl::Status PrepareDataset(const TrainConfig& config);

// How the records of `config` decode, for training or evaluation: data.example for format
// EXAMPLE, else the preset of the format:
//   FASHION_MNIST  input "image/raw": bytes of uint8 [1, 28, 28], / 255, mean 0.2860, std 0.3530
//                  (the training set's pixel statistics); label "image/class/label"
//   IMAGENET       input "image/encoded": JPEG (hvx/data/jpeg.h) at data.image_size, the
//                  evaluation resize at image_size * 256 / 224; label "image/class/label"
// Labels come out as stored; the trainer adds data.label_offset.
absl::StatusOr<data::ExampleDecoderOptions> DecoderSpec(const TrainConfig& config, bool train);

// Whether the decoder writes images channels last ([H, W, C] per sample): JPEG inputs for a
// model.channels_last model, which then needs no conversion.
bool DecodesChannelsLast(const TrainConfig& config);

// The decoder DecoderSpec describes, its JPEG inputs decoded by `make_jpeg`'s decoder when given
// (else on the CPU). InvalidArgument naming data.example when it cannot work.
absl::StatusOr<std::shared_ptr<const data::Decoder>> MakeDecoder(
    const TrainConfig& config, bool train, const data::JpegDecoderFactory& make_jpeg = nullptr);

// With data.gpu_jpeg_decode, what makes the JPEG decoder of a rank that trains on CUDA device
// `cuda_device` (-1: on the CPU): nvJPEG's there when it can be made (hvx/data/gpu_jpeg.h), else
// the CPU's, after a warning with the reason; the choice is logged. Without it, nullptr.
data::JpegDecoderFactory GpuJpegDecoders(const TrainConfig& config, bool train, int cuda_device);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_DATASET_SETUP_H_
