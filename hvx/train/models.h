// Image classifiers in the LibTorch C++ API, built by name from a ModelConfig.
//
//   HVX_ASSIGN_OR_RETURN(std::shared_ptr<Classifier> model, CreateModel(config.model()));
//   torch::Tensor logits = model->forward(images);   // [N, num_classes]
//
// "mlp" and "cnn" take [N, 1, 28, 28] float images (Fashion-MNIST); "resnet18" and "resnet50"
// take [N, 3, H, W] with H, W >= 32 (ImageNet: 224), following He et al. 2015 (the v1.5 layout:
// stride 2 in the 3x3 convolution of a bottleneck).
//
// model { torchscript: "model.pt" } loads a module scripted or traced in Python
// (torch.jit.script(model).save("model.pt")) whose forward takes one tensor and returns the logits.
// Its parameters and buffers keep their Python names ("features.0.weight") and are the module's
// own tensors, so training, checkpoints and export see the scripted module itself.
#ifndef HVX_TRAIN_MODELS_H_
#define HVX_TRAIN_MODELS_H_

#include <torch/nn/module.h>
#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

class Classifier : public torch::nn::Module {
 public:
  // Logits for a batch of images.
  virtual at::Tensor forward(const at::Tensor& images) = 0;
};

// InvalidArgument naming the model when `config.name()` is not one of KnownModels(), or naming the
// file when `config.torchscript()` cannot be loaded or its forward is not
// forward(self, x: Tensor) -> Tensor.
absl::StatusOr<std::shared_ptr<Classifier>> CreateModel(const ModelConfig& config);

// Runs `model` in evaluation mode on a zero batch of 2 inputs of `input_shape` (one sample's) and
// checks that it returns [2, num_classes] logits: FailedPrecondition saying what was expected and
// what came back (or what the model raised) otherwise. The model's state is left as it was.
absl::Status CheckModelFits(Classifier& model, const std::vector<int64_t>& input_shape,
                            int num_classes, const std::string& model_description);

// Puts every 4-D parameter and buffer of `model` (convolution weights) in channels-last memory
// layout, in place (the same tensors, so optimizers and hooks still see them). Returns how many.
int ToChannelsLast(torch::nn::Module& model);

// The trained scripted module when `model` came from model.torchscript, else null; it shares
// its tensors with `model`.
const torch::jit::Module* ScriptedModule(const Classifier& model);

// Total number of scalar parameters.
int64_t CountParameters(const torch::nn::Module& module);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_MODELS_H_
