#include "hvx/torch/gradient_sync.h"

#include <torch/torch.h>

namespace hvx {

bool TensorsAllFinite(const std::vector<at::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> finite;
  for (const auto& t : tensors) finite.push_back(t.isfinite().all());
  return finite.empty() || torch::stack(finite).all().item<bool>();
}

double ClipGlobalNorm(const std::vector<at::Tensor>& grads, double max_norm) {
  torch::NoGradGuard no_grad;
  if (grads.empty()) return 0;
  std::vector<at::Tensor> norms;
  for (const auto& g : grads) norms.push_back(g.norm().to(at::kDouble));
  const double norm = torch::stack(norms).norm().item<double>();
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& g : grads) at::Tensor(g).mul_(scale);
  }
  return norm;
}

}  // namespace hvx
