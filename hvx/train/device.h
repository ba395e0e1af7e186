// Which device a rank trains on, and binding it before any other CUDA work.
//
//   HVX_RETURN_IF_ERROR(hvx::Init(options));
//   HVX_ASSIGN_OR_RETURN(torch::Device device, SelectTrainingDevice(config.device()));
//
// "cpu": the CPU. "cuda": the GPU of this rank's local rank, bound with
// hvx::nccl::BindLocalDevice(LocalRank(), LocalSize()) so that the CUDA context, LibTorch's
// allocations and the NCCL data plane all use it; fails with the reason when this binary was built
// without --config=cuda (no NCCL backend to average CUDA gradients), when the host runs more ranks
// than it shows GPUs, or when LibTorch itself has no CUDA support. "auto": "cuda" when the binary
// has the NCCL backend and LibTorch sees a GPU; "cpu" on a host that shows no GPU
// (hvx::GpuEvidence); on one that does, an error naming what it shows and what is missing (the
// backend, CUDA in LibTorch, the GPUs themselves in this container): a job meant for GPUs never
// trains on the CPU unnoticed. Call once per process, after hvx::Init.
#ifndef HVX_TRAIN_DEVICE_H_
#define HVX_TRAIN_DEVICE_H_

#include <torch/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace hvx {
namespace train {

absl::StatusOr<torch::Device> SelectTrainingDevice(const std::string& device);

// What the choice depends on, gathered by SelectTrainingDevice.
struct DeviceFacts {
  bool gpu_backend = false;  // nccl::HasGpuBackend()
  bool torch_cuda = false;   // torch::cuda::is_available()
  int visible_gpus = 0;      // this host's GPUs as this process sees them
  int rank = 0;
  int local_rank = 0;
  int local_size = 1;
  std::string host;
  std::string gpu_evidence;  // hvx::GpuEvidence: what the host shows of GPUs, "" for none
};

// The pure part of SelectTrainingDevice: "cuda" is cuda:<local rank> (hvx::nccl::SelectDevice),
// with the reason when the build, the host's GPUs or LibTorch cannot give it; it binds nothing.
absl::StatusOr<torch::Device> ChooseTrainingDevice(const std::string& device,
                                                   const DeviceFacts& facts);

// What this binary was built with, in one line: LibTorch's version and its CUDA runtime (or CPU
// only), and hvx's GPU backend (nccl::DescribeGpuBackend), e.g. "torch 2.11.0 with CUDA 13.0; hvx
// with its GPU backend (--config=cuda), NCCL 2.28.9, CUDA runtime 13.0". Needs no GPU.
std::string DescribeBuild();

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_DEVICE_H_
