#include <cuda_runtime.h>

#include "hvx/data/gpu_resample.h"

namespace hvx {
namespace data {
namespace {

__global__ void ResampleKernel(ResampleParams p) {
  const int64_t n = ResampleCount(p);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    ResampleOne(p, i);
  }
}

}  // namespace

int LaunchResample(const ResampleParams& p, void* stream) {
  constexpr int kThreads = 256;
  const int64_t n = ResampleCount(p);
  const int blocks = static_cast<int>((n + kThreads - 1) / kThreads);
  ResampleKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace data
}  // namespace hvx
