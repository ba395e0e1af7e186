#include "hvx/train/model_state.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/torch/tensor.h"

namespace hvx {
namespace train {

std::vector<std::pair<std::string, torch::Tensor>> FloatBuffers(Classifier& model) {
  std::vector<std::pair<std::string, torch::Tensor>> buffers;
  for (const auto& item : model.named_buffers()) {
    if (item.value().is_floating_point()) buffers.emplace_back(item.key(), item.value());
  }
  return buffers;
}

absl::StatusOr<std::vector<torch::Tensor>> GatherRankBuffers(Classifier& model) {
  torch::NoGradGuard no_grad;
  const auto buffers = FloatBuffers(model);
  if (buffers.empty()) return std::vector<torch::Tensor>();
  // One allgather of every buffer, flattened and cast to float64 (exact for every floating type),
  // rather than one per buffer: a ResNet has a hundred.
  std::vector<torch::Tensor> flat;
  for (const auto& [name, buffer] : buffers) {
    flat.push_back(buffer.detach().reshape({-1}).to(torch::kCPU, torch::kFloat64));
  }
  HVX_ASSIGN_OR_RETURN(torch::Tensor all,
                       Allgather("checkpoint.buffers", torch::cat(flat).reshape({1, -1})));
  std::vector<torch::Tensor> gathered;
  int64_t at = 0;
  for (const auto& [name, buffer] : buffers) {
    gathered.push_back(all.narrow(1, at, buffer.numel()).to(buffer.scalar_type()).contiguous());
    at += buffer.numel();
  }
  return gathered;
}

std::vector<std::string> ModelFingerprint(Classifier& model) {
  std::vector<std::string> lines;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    std::ostringstream shape;
    shape << t.sizes();
    lines.push_back(absl::StrCat(name, " ", c10::toString(t.scalar_type()), " ", shape.str()));
  };
  for (const auto& item : model.named_parameters()) add(item.key(), item.value());
  for (const auto& item : model.named_buffers()) add(item.key(), item.value());
  return lines;
}

absl::Status RefuseOtherModel(const std::string& path, const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", path, " was written for another model: ", what,
      " (a checkpoint directory belongs to one model and config: give this run its own "
      "checkpoint.dir, or --fresh to move the old checkpoints aside)"));
}

absl::Status CheckFingerprint(const std::vector<std::string>& mine,
                              const std::vector<std::string>& theirs, const std::string& path) {
  for (size_t i = 0; i < std::max(mine.size(), theirs.size()); ++i) {
    if (i < mine.size() && i < theirs.size() && mine[i] == theirs[i]) continue;
    if (i >= theirs.size())
      return RefuseOtherModel(path, absl::StrCat("it has no '", mine[i], "'"));
    if (i >= mine.size()) {
      return RefuseOtherModel(path,
                              absl::StrCat("it has '", theirs[i], "', which this model has not"));
    }
    return RefuseOtherModel(path, absl::StrCat("its tensor ", i + 1, " is '", theirs[i],
                                               "', this model's '", mine[i], "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckDataOrder(const std::string& theirs, const TrainingPosition& p,
                            const std::string* mine, const std::string& path) {
  if (mine == nullptr || theirs == *mine) return absl::OkStatus();
  if (p.samples_in_epoch == 0) {
    HVX_LOG(INFO) << path << " was written at the start of epoch " << p.epoch + 1
                  << " in the data order '" << theirs << "'; this run trains in '" << *mine << "'";
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", path, " was written mid-epoch ", p.epoch + 1, " (", p.samples_in_epoch,
      " of its positions trained) in the data order '", theirs, "'; this run's is '", *mine,
      "': resumed, the epoch would train some samples twice and others never. Resume with the "
      "checkpoint's shuffle seed, remainder and dataset, or start over with --fresh"));
}

}  // namespace train
}  // namespace hvx
