#include "hvx/train/device.h"

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#ifdef HVX_TRAIN_GPU_BACKEND
#include "hvx/nccl/nccl_data_plane.h"
#endif

namespace hvx {
namespace train {

bool HasGpuBackend() {
#ifdef HVX_TRAIN_GPU_BACKEND
  return true;
#else
  return false;
#endif
}

absl::StatusOr<torch::Device> SelectTrainingDevice(const std::string& device) {
  if (device == "cpu") return torch::Device(torch::kCPU);
  if (device != "cuda" && device != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("device: must be \"cpu\", \"cuda\" or \"auto\", got \"", device, "\""));
  }
#ifdef HVX_TRAIN_GPU_BACKEND
  // "auto" without a GPU LibTorch can use (none visible, or a CPU-only LibTorch) is the CPU. Counting
  // devices creates no CUDA context.
  if (device == "auto" && !torch::cuda::is_available()) return torch::Device(torch::kCPU);
  // Bound before torch does any CUDA work of its own, so that its context and allocations land on
  // this rank's GPU rather than on GPU 0.
  auto ordinal = nccl::BindLocalDevice(LocalRank(), LocalSize());
  if (!ordinal.ok()) return Annotate(ordinal.status(), absl::StrCat("device: \"", device, "\" on rank ", Rank()));
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        "device: \"cuda\": this LibTorch has no CUDA support (torch::cuda::is_available() is false); build "
        "with HVX_TORCH_PATH pointing at a CUDA LibTorch");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(*ordinal));
#else
  if (device == "auto") return torch::Device(torch::kCPU);
  return absl::FailedPreconditionError(
      "device: \"cuda\" needs the NCCL backend, which this binary was built without; build it with "
      "`bazel build --config=cuda //tools:train`, or set device: \"cpu\"");
#endif
}

}  // namespace train
}  // namespace hvx
