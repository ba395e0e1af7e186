// Image classifiers in the LibTorch C++ API, built by name from a ModelConfig.
//
//   HVX_ASSIGN_OR_RETURN(std::shared_ptr<Classifier> model, CreateModel(config.model()));
//   torch::Tensor logits = model->forward(images);   // [N, num_classes]
//
// "mlp" and "cnn" take [N, 1, 28, 28] float images (Fashion-MNIST); "resnet18" and "resnet50"
// take [N, 3, H, W] with H, W >= 32 (ImageNet: 224), following He et al. 2015 (the v1.5 layout:
// stride 2 in the 3x3 convolution of a bottleneck).
#ifndef HVX_TRAIN_MODELS_H_
#define HVX_TRAIN_MODELS_H_

#include <torch/nn/module.h>

#include <memory>

#include "absl/status/statusor.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

class Classifier : public torch::nn::Module {
 public:
  // Logits for a batch of images.
  virtual at::Tensor forward(const at::Tensor& images) = 0;
};

// InvalidArgument naming the model when `config.name()` is not one of KnownModels().
absl::StatusOr<std::shared_ptr<Classifier>> CreateModel(const ModelConfig& config);

// Total number of scalar parameters.
int64_t CountParameters(const torch::nn::Module& module);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_MODELS_H_
