// A CUDA kernel and an NCCL call, to prove cuda_library and @hvx_cuda//:nccl build and link.
#ifndef HVX_TESTS_DEPS_CUDA_SCALE_H_
#define HVX_TESTS_DEPS_CUDA_SCALE_H_

// Multiplies n floats at device pointer `data` by `factor` on the default stream and waits.
// Returns the cudaError_t as an int (0 on success).
int ScaleOnDevice(float* data, int n, float factor);

#endif  // HVX_TESTS_DEPS_CUDA_SCALE_H_
