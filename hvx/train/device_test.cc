// The trainer's device choice through its pure part, on simulated hosts with several GPUs (no GPU
// is needed): every local rank trains on its own GPU, and what cannot work says why.
#include "hvx/train/device.h"

#include <torch/version.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/nccl/gpu_backend.h"

namespace hvx {
namespace train {
namespace {

DeviceFacts GpuHost(int rank, int local_rank, int local_size, int visible) {
  DeviceFacts f;
  f.gpu_backend = true;
  f.torch_cuda = true;
  f.visible_gpus = visible;
  f.rank = rank;
  f.local_rank = local_rank;
  f.local_size = local_size;
  f.host = absl::StrCat("gpuhost", rank / local_size);
  return f;
}

TEST(DeviceTest, TwoHostsOfFourGpusPutEachRankOnItsOwnGpu) {
  for (const char* device : {"cuda", "auto"}) {
    for (int rank = 0; rank < 8; ++rank) {
      auto d = ChooseTrainingDevice(device, GpuHost(rank, rank % 4, 4, 4));
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(*d, torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(rank % 4)))
          << device << " rank " << rank;
    }
  }
  // CUDA_VISIBLE_DEVICES giving each rank only its own GPU: it is device 0 for each of them.
  auto d = ChooseTrainingDevice("cuda", GpuHost(6, 2, 4, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, torch::Device(torch::kCUDA, 0));
}

TEST(DeviceTest, MoreRanksThanGpusFailsNamingTheHost) {
  auto d = ChooseTrainingDevice("cuda", GpuHost(5, 1, 4, 2));
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::StrContains(d.status().message(), "device: \"cuda\" on rank 5")) << d.status();
  EXPECT_TRUE(
      absl::StrContains(d.status().message(), "host gpuhost1 runs 4 ranks but shows only 2 GPUs"))
      << d.status();
}

// A host that shows no GPU at all: "auto" is the CPU whatever the build.
TEST(DeviceTest, AutoFallsBackToTheCpuAndCudaSaysWhyNot) {
  DeviceFacts no_backend = GpuHost(0, 0, 1, 8);
  no_backend.gpu_backend = false;
  EXPECT_EQ(*ChooseTrainingDevice("auto", no_backend), torch::Device(torch::kCPU));
  auto cuda = ChooseTrainingDevice("cuda", no_backend);
  EXPECT_TRUE(absl::StrContains(cuda.status().message(), "bazel build --config=cuda //tools:train"))
      << cuda.status();
  DeviceFacts cpu_torch = GpuHost(0, 0, 1, 8);
  cpu_torch.torch_cuda = false;
  EXPECT_EQ(*ChooseTrainingDevice("auto", cpu_torch), torch::Device(torch::kCPU));
  EXPECT_TRUE(absl::StrContains(ChooseTrainingDevice("cuda", cpu_torch).status().message(),
                                "no CUDA support"));
  EXPECT_EQ(*ChooseTrainingDevice("cpu", GpuHost(0, 0, 1, 8)), torch::Device(torch::kCPU));
  EXPECT_FALSE(ChooseTrainingDevice("tpu", GpuHost(0, 0, 1, 8)).ok());
}

// SageMaker's GPU instances ran the CPU image: hvxrun started a rank per GPU and each trained on
// the CPU, saying only "training on cpu". Where the host shows GPUs, "auto" now fails on every
// rank, naming what it saw and what is missing; device: "cpu" still trains on the CPU.
TEST(DeviceTest, AutoOnAHostShowingGpusItCannotUseFailsSayingWhy) {
  DeviceFacts cpu_build = GpuHost(3, 3, 8, 0);
  cpu_build.gpu_backend = false;
  cpu_build.torch_cuda = false;
  cpu_build.gpu_evidence = "/proc/driver/nvidia/gpus lists 8 GPUs";
  auto d = ChooseTrainingDevice("auto", cpu_build);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition) << d.status();
  EXPECT_TRUE(absl::StrContains(
      d.status().message(),
      "device: \"auto\" on rank 3 (host gpuhost0): this host shows GPUs (/proc/driver/nvidia/gpus "
      "lists 8 GPUs) but this binary was built without the NCCL backend (--config=cuda), so "
      "training would run on the CPU"))
      << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "device: \"cpu\" to train on the CPU"));
  EXPECT_EQ(*ChooseTrainingDevice("cpu", cpu_build), torch::Device(torch::kCPU));

  // The GPU build in a container the runtime gave no GPU (or with a CPU-only LibTorch).
  DeviceFacts no_devices = GpuHost(0, 0, 1, 0);
  no_devices.torch_cuda = false;
  no_devices.gpu_evidence = "/proc/driver/nvidia/gpus lists 1 GPU";
  d = ChooseTrainingDevice("auto", no_devices);
  EXPECT_TRUE(absl::StrContains(d.status().message(), "LibTorch sees no GPU it can use"))
      << d.status();
  no_devices.gpu_evidence = "";
  EXPECT_EQ(*ChooseTrainingDevice("auto", no_devices), torch::Device(torch::kCPU));
}

// What --version prints: LibTorch's version and CUDA (or none), and hvx's backend, matching
// nccl::HasGpuBackend().
TEST(DeviceTest, DescribeBuildNamesTorchAndTheBackend) {
  const std::string line = DescribeBuild();
  EXPECT_TRUE(absl::StartsWith(
      line, absl::StrCat("torch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".")))
      << line;
  EXPECT_TRUE(absl::StrContains(line, " with CUDA ") ||
              absl::StrContains(line, " for the CPU only"))
      << line;
  EXPECT_EQ(absl::StrContains(line, "; hvx with its GPU backend (--config=cuda), NCCL "),
            nccl::HasGpuBackend())
      << line;
}

}  // namespace
}  // namespace train
}  // namespace hvx
