// CUDA kernels of the GPU backend: element-wise scale, and float16/bfloat16 <-> float32 casts with
// an optional scale, used to prescale into and postscale out of the device fusion buffer and to
// reduce 16-bit floats in float32. Queued on `stream`; nothing waits.
//
// clang-format off
//   HVX_RETURN_IF_ERROR(CudaStatus(
//       ScaleConvert(in, DataType::kFloat16, buf, DataType::kFloat32, n, 0.5, limits, stream),
//       "prescale"));
// clang-format on
#ifndef HVX_NCCL_KERNELS_H_
#define HVX_NCCL_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hvx/common/types.h"
#include "hvx/nccl/grid.h"

namespace hvx {
namespace nccl {

// out[i] = out_type(factor * in[i]) for i < n (in and out may be the same memory when the types
// match). Arithmetic in float32 for 16-bit floats and float32, float64 for float64 and integers
// (truncated toward zero, as on the CPU). factor == 1 with equal types is a plain copy (none when
// in == out). cudaErrorInvalidValue for a pair KernelSupports rejects.
cudaError_t ScaleConvert(const void* in, DataType in_type, void* out, DataType out_type, int64_t n,
                         double factor, const DeviceLimits& limits, cudaStream_t stream);

// The limits ComputeGrid needs, read once per device.
cudaError_t QueryDeviceLimits(int device, DeviceLimits* limits);

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_KERNELS_H_
