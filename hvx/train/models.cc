#include "hvx/train/models.h"

#include <torch/nn.h>
#include <torch/script.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/train/config.h"

namespace hvx {
namespace train {
namespace {

namespace nn = torch::nn;

class Mlp : public Classifier {
 public:
  explicit Mlp(int num_classes) {
    fc1_ = register_module("fc1", nn::Linear(28 * 28, 256));
    fc2_ = register_module("fc2", nn::Linear(256, 128));
    fc3_ = register_module("fc3", nn::Linear(128, num_classes));
  }
  at::Tensor forward(const at::Tensor& images) override {
    at::Tensor x = images.flatten(1);
    x = torch::relu(fc1_(x));
    x = torch::relu(fc2_(x));
    return fc3_(x);
  }

 private:
  nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

// Two conv blocks (conv-BN-ReLU x2, max-pool, dropout), then a dense head: a small network that
// lands in the published 91-93% range on Fashion-MNIST within a few epochs.
class SmallCnn : public Classifier {
 public:
  explicit SmallCnn(int num_classes) {
    features_ = register_module(
        "features",
        nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1).bias(false)),
                       nn::BatchNorm2d(32), nn::ReLU(),
                       nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(1).bias(false)),
                       nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2), nn::Dropout(0.1),
                       nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)),
                       nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2), nn::Dropout(0.2)));
    classifier_ = register_module(
        "classifier", nn::Sequential(nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                                     nn::Dropout(0.3), nn::Linear(128, num_classes)));
  }
  at::Tensor forward(const at::Tensor& images) override {
    return classifier_->forward(features_->forward(images));
  }

 private:
  nn::Sequential features_{nullptr}, classifier_{nullptr};
};

nn::Conv2d Conv(int in, int out, int kernel, int stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// One residual block; `bottleneck` selects 1x1-3x3-1x1 (expansion 4) over 3x3-3x3.
class ResidualBlock : public nn::Module {
 public:
  ResidualBlock(int in, int width, int stride, bool bottleneck) {
    const int out = bottleneck ? width * 4 : width;
    if (bottleneck) {
      body_ = register_module(
          "body", nn::Sequential(Conv(in, width, 1, 1), nn::BatchNorm2d(width), nn::ReLU(),
                                 Conv(width, width, 3, stride), nn::BatchNorm2d(width), nn::ReLU(),
                                 Conv(width, out, 1, 1), nn::BatchNorm2d(out)));
    } else {
      body_ = register_module(
          "body", nn::Sequential(Conv(in, width, 3, stride), nn::BatchNorm2d(width), nn::ReLU(),
                                 Conv(width, out, 3, 1), nn::BatchNorm2d(out)));
    }
    if (stride != 1 || in != out) {
      shortcut_ = register_module("shortcut",
                                  nn::Sequential(Conv(in, out, 1, stride), nn::BatchNorm2d(out)));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor identity = shortcut_ ? shortcut_->forward(x) : x;
    return torch::relu(body_->forward(x) + identity);
  }

 private:
  nn::Sequential body_{nullptr}, shortcut_{nullptr};
};

class ResNet : public Classifier {
 public:
  ResNet(const std::vector<int>& blocks, bool bottleneck, int num_classes) {
    stem_ = register_module(
        "stem", nn::Sequential(Conv(3, 64, 7, 2), nn::BatchNorm2d(64), nn::ReLU(),
                               nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))));
    int in = 64;
    const int widths[] = {64, 128, 256, 512};
    stages_ = register_module("stages", nn::Sequential());
    for (size_t s = 0; s < blocks.size(); ++s) {
      for (int b = 0; b < blocks[s]; ++b) {
        const int stride = (b == 0 && s > 0) ? 2 : 1;
        stages_->push_back(std::make_shared<ResidualBlock>(in, widths[s], stride, bottleneck));
        in = bottleneck ? widths[s] * 4 : widths[s];
      }
    }
    fc_ = register_module("fc", nn::Linear(in, num_classes));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      }
    }
  }
  at::Tensor forward(const at::Tensor& images) override {
    at::Tensor x = stages_->forward(stem_->forward(images));
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc_(x);
  }

 private:
  nn::Sequential stem_{nullptr}, stages_{nullptr};
  nn::Linear fc_{nullptr};
};

// A TorchScript module as a Classifier: a tree of plain modules with the scripted module's names,
// registering the scripted module's own parameter and buffer tensors (the same TensorImpls), so
// the optimizer, checkpoints (load writes into the tensors in place), device moves (set_data) and
// hooks act on what the scripted forward uses.
class ScriptedClassifier : public Classifier {
 public:
  explicit ScriptedClassifier(torch::jit::Module module) : script_(std::move(module)) {
    Mirror(script_, *this);
  }
  at::Tensor forward(const at::Tensor& images) override {
    return script_.forward({images}).toTensor();
  }
  void train(bool on) override {
    Classifier::train(on);
    script_.train(on);
  }
  const torch::jit::Module& script() const { return script_; }

 private:
  static void Mirror(const torch::jit::Module& from, torch::nn::Module& to) {
    for (const auto& p : from.named_parameters(/*recurse=*/false)) {
      to.register_parameter(p.name, p.value, p.value.requires_grad());
    }
    for (const auto& b : from.named_buffers(/*recurse=*/false)) to.register_buffer(b.name, b.value);
    for (const auto& c : from.named_children()) {
      auto child = std::make_shared<torch::nn::Module>(c.name);
      Mirror(c.value, *child);
      to.register_module(c.name, child);
    }
  }

  torch::jit::Module script_;
};

std::string SchemaText(const c10::FunctionSchema& schema) {
  std::ostringstream out;
  out << schema;
  return out.str();
}

absl::StatusOr<std::shared_ptr<Classifier>> LoadScripted(const std::string& path) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript: cannot load ", path, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript: cannot load ", path, ": ", e.what()));
  }
  const auto method = module.find_method("forward");
  if (!method.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript: ", path, " has no forward method"));
  }
  const c10::FunctionSchema& schema = method->function().getSchema();
  const auto& args = schema.arguments();
  const bool fits = args.size() == 2 && args[1].type()->isSubtypeOf(*c10::TensorType::get()) &&
                    schema.returns().size() == 1 &&
                    schema.returns()[0].type()->isSubtypeOf(*c10::TensorType::get());
  if (!fits) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript: ", path,
                     ": forward must take the batch of inputs and return the logits, expected "
                     "forward(self, x: Tensor) -> Tensor, found ",
                     SchemaText(schema)));
  }
  return std::shared_ptr<Classifier>(std::make_shared<ScriptedClassifier>(std::move(module)));
}

}  // namespace

absl::Status CheckModelFits(Classifier& model, const std::vector<int64_t>& input_shape,
                            int num_classes, const std::string& model_description) {
  std::vector<int64_t> batch = {2};
  batch.insert(batch.end(), input_shape.begin(), input_shape.end());
  const std::vector<int64_t> expected = {2, num_classes};
  const bool was_training = model.is_training();
  model.eval();
  std::string problem;
  try {
    torch::NoGradGuard no_grad;
    const auto& any = model.parameters();
    const auto options =
        any.empty() ? torch::TensorOptions() : torch::TensorOptions().device(any.front().device());
    at::Tensor out = model.forward(torch::zeros(batch, options));
    if (out.sizes().vec() != expected) {
      problem = absl::StrCat("returned logits of shape [", absl::StrJoin(out.sizes(), ", "), "]");
    }
  } catch (const c10::Error& e) {
    problem = absl::StrCat("raised: ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    problem = absl::StrCat("raised: ", e.what());
  }
  model.train(was_training);
  if (problem.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(model_description, " does not fit the configured inputs: on a batch of shape [",
                   absl::StrJoin(batch, ", "), "] it should return logits of shape [2, ",
                   num_classes, "] (model.num_classes), but it ", problem));
}

const torch::jit::Module* ScriptedModule(const Classifier& model) {
  const auto* scripted = dynamic_cast<const ScriptedClassifier*>(&model);
  return scripted != nullptr ? &scripted->script() : nullptr;
}

absl::StatusOr<std::shared_ptr<Classifier>> CreateModel(const ModelConfig& config) {
  const int classes = config.num_classes() > 0 ? config.num_classes() : 10;
  if (!config.torchscript().empty()) return LoadScripted(config.torchscript());
  const std::string& name = config.name();
  if (name == "mlp") return std::shared_ptr<Classifier>(std::make_shared<Mlp>(classes));
  if (name == "cnn") return std::shared_ptr<Classifier>(std::make_shared<SmallCnn>(classes));
  if (name == "resnet18")
    return std::shared_ptr<Classifier>(
        std::make_shared<ResNet>(std::vector<int>{2, 2, 2, 2}, false, classes));
  if (name == "resnet50")
    return std::shared_ptr<Classifier>(
        std::make_shared<ResNet>(std::vector<int>{3, 4, 6, 3}, true, classes));
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model \"", name, "\"; known models: ", absl::StrJoin(KnownModels(), ", ")));
}

int ToChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  int moved = 0;
  auto move = [&moved](at::Tensor& t) {
    if (t.dim() != 4) return;
    t.set_data(t.data().contiguous(at::MemoryFormat::ChannelsLast));
    ++moved;
  };
  for (auto& p : model.parameters()) move(p);
  for (auto& b : model.buffers()) move(b);
  return moved;
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace train
}  // namespace hvx
