#include "hvx/train/device.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"
#include "hvx/common/cluster.h"
#include "hvx/common/env.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/nccl/gpu_backend.h"
#include "hvx/nccl/policy.h"
#ifdef HVX_TRAIN_GPU_BACKEND
#include "hvx/nccl/nccl_data_plane.h"
#endif

namespace hvx {
namespace train {

std::string DescribeBuild() {
  std::string line = absl::StrCat("torch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".",
                                  TORCH_VERSION_PATCH);
  // LibTorch's CUDA library registers these hooks when it is linked; no GPU is needed to ask.
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  if (hooks.hasCUDART()) {
    const long v = hooks.versionCUDART();  // 13000: 13.0
    absl::StrAppend(&line, " with CUDA ", v / 1000, ".", (v % 1000) / 10);
  } else {
    absl::StrAppend(&line, " for the CPU only");
  }
  absl::StrAppend(&line, "; ", nccl::DescribeGpuBackend());
  return line;
}

absl::StatusOr<torch::Device> ChooseTrainingDevice(const std::string& device,
                                                   const DeviceFacts& facts) {
  if (device == "cpu") return torch::Device(torch::kCPU);
  if (device != "cuda" && device != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("device: must be \"cpu\", \"cuda\" or \"auto\", got \"", device, "\""));
  }
  // "auto" falls back to the CPU only where no GPU is evident: on a GPU host it would train
  // there unnoticed (a CPU build or image on GPU instances: 16 ranks, each on the CPU).
  const auto no_gpu_training = [&](absl::string_view missing) -> absl::Status {
    return absl::FailedPreconditionError(absl::StrCat(
        "device: \"auto\" on rank ", facts.rank, " (host ", facts.host, "): this host shows GPUs (",
        facts.gpu_evidence, ") but ", missing,
        ", so training would run on the CPU. Use a build with the GPU backend against a CUDA "
        "LibTorch (`bazel build --config=cuda //tools:train`, HVX_TORCH_PATH) in a container "
        "given the GPUs, or set device: \"cpu\" to train on the CPU anyway"));
  };
  if (!facts.gpu_backend) {
    if (device == "auto") {
      if (facts.gpu_evidence.empty()) return torch::Device(torch::kCPU);
      return no_gpu_training("this binary was built without the NCCL backend (--config=cuda)");
    }
    return absl::FailedPreconditionError(
        "device: \"cuda\" needs the NCCL backend, which this binary was built without; build it "
        "with "
        "`bazel build --config=cuda //tools:train`, or set device: \"cpu\"");
  }
  // "auto" without a GPU LibTorch can use (none visible, or a CPU-only LibTorch) is the CPU, where
  // the host shows none either.
  if (device == "auto" && !facts.torch_cuda) {
    if (facts.gpu_evidence.empty()) return torch::Device(torch::kCPU);
    return no_gpu_training(
        "LibTorch sees no GPU it can use (a CPU-only LibTorch, or a container given no GPU: "
        "torch::cuda::is_available() is false)");
  }
  auto ordinal =
      nccl::SelectDevice(facts.local_rank, facts.local_size, facts.visible_gpus, facts.host);
  if (!ordinal.ok())
    return Annotate(ordinal.status(),
                    absl::StrCat("device: \"", device, "\" on rank ", facts.rank));
  if (!facts.torch_cuda) {
    return absl::FailedPreconditionError(
        "device: \"cuda\": this LibTorch has no CUDA support (torch::cuda::is_available() is "
        "false); build "
        "with HVX_TORCH_PATH pointing at a CUDA LibTorch");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(*ordinal));
}

absl::StatusOr<torch::Device> SelectTrainingDevice(const std::string& device) {
  DeviceFacts facts;
  facts.gpu_backend = nccl::HasGpuBackend();
  facts.rank = Rank();
  facts.local_rank = LocalRank();
  facts.local_size = LocalSize();
#ifdef HVX_TRAIN_GPU_BACKEND
  // Counting devices creates no CUDA context.
  facts.torch_cuda = torch::cuda::is_available();
  facts.visible_gpus = static_cast<int>(torch::cuda::device_count());
#endif
  facts.host = HostName();
  facts.gpu_evidence = GpuEvidence(Environment::Process());
  HVX_ASSIGN_OR_RETURN(torch::Device chosen, ChooseTrainingDevice(device, facts));
#ifdef HVX_TRAIN_GPU_BACKEND
  if (chosen.is_cuda()) {
    // Bound before torch does any CUDA work of its own, so that its context and allocations land on
    // this rank's GPU rather than on GPU 0.
    auto bound = nccl::BindLocalDevice(facts.local_rank, facts.local_size);
    if (!bound.ok())
      return Annotate(bound.status(),
                      absl::StrCat("device: \"", device, "\" on rank ", facts.rank));
    if (*bound != chosen.index()) {
      return absl::InternalError(
          absl::StrCat("device: bound cuda:", *bound, " but chose ", chosen.str()));
    }
  }
#endif
  return chosen;
}

}  // namespace train
}  // namespace hvx
