#include <cuda_runtime.h>

#include "tests/deps/cuda_scale.h"

namespace {
__global__ void ScaleKernel(float* data, int n, float factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}
}  // namespace

int ScaleOnDevice(float* data, int n, float factor) {
  ScaleKernel<<<(n + 255) / 256, 256>>>(data, n, factor);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return static_cast<int>(err);
  return static_cast<int>(cudaDeviceSynchronize());
}
