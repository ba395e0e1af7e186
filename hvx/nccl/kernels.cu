#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "hvx/nccl/kernels.h"

namespace hvx {
namespace nccl {
namespace {

// Storage type -> arithmetic type, and the conversions both ways.
template <typename T>
struct Math {
  using type = double;
  __device__ static double Load(T v) { return static_cast<double>(v); }
  __device__ static T Store(double v) { return static_cast<T>(v); }
};
template <>
struct Math<float> {
  using type = float;
  __device__ static float Load(float v) { return v; }
  __device__ static float Store(float v) { return v; }
};
template <>
struct Math<__half> {
  using type = float;
  __device__ static float Load(__half v) { return __half2float(v); }
  __device__ static __half Store(float v) { return __float2half_rn(v); }
};
template <>
struct Math<__nv_bfloat16> {
  using type = float;
  __device__ static float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Store(float v) { return __float2bfloat16_rn(v); }
};

// Grid-stride loop: correct for any grid, sized by ComputeGrid.
template <typename In, typename Out, typename Compute>
__global__ void ScaleConvertKernel(const In* in, Out* out, int64_t n, Compute factor) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const Compute v = static_cast<Compute>(Math<In>::Load(in[i])) * factor;
    out[i] = Math<Out>::Store(static_cast<typename Math<Out>::type>(v));
  }
}

template <typename In, typename Out>
cudaError_t Launch(const void* in, void* out, int64_t n, double factor, const DeviceLimits& limits,
                   cudaStream_t stream) {
  using Compute = typename Math<In>::type;
  const KernelGrid c = ComputeGrid(n, limits);
  if (c.blocks == 0) return cudaSuccess;
  ScaleConvertKernel<In, Out, Compute><<<static_cast<unsigned>(c.blocks), c.threads, 0, stream>>>(
      static_cast<const In*>(in), static_cast<Out*>(out), n, static_cast<Compute>(factor));
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSame(const void* in, void* out, int64_t n, double factor,
                       const DeviceLimits& limits, cudaStream_t stream) {
  if (factor == 1.0) {
    if (in == out || n == 0) return cudaSuccess;
    return cudaMemcpyAsync(out, in, static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice,
                           stream);
  }
  return Launch<T, T>(in, out, n, factor, limits, stream);
}

}  // namespace

cudaError_t ScaleConvert(const void* in, DataType in_type, void* out, DataType out_type, int64_t n,
                         double factor, const DeviceLimits& limits, cudaStream_t stream) {
  if (!KernelSupports(in_type, out_type)) return cudaErrorInvalidValue;
  if (in_type == out_type) {
    switch (in_type) {
      case DataType::kUint8:
        return LaunchSame<uint8_t>(in, out, n, factor, limits, stream);
      case DataType::kInt8:
        return LaunchSame<int8_t>(in, out, n, factor, limits, stream);
      case DataType::kInt16:
        return LaunchSame<int16_t>(in, out, n, factor, limits, stream);
      case DataType::kInt32:
        return LaunchSame<int32_t>(in, out, n, factor, limits, stream);
      case DataType::kInt64:
        return LaunchSame<int64_t>(in, out, n, factor, limits, stream);
      case DataType::kFloat16:
        return LaunchSame<__half>(in, out, n, factor, limits, stream);
      case DataType::kBfloat16:
        return LaunchSame<__nv_bfloat16>(in, out, n, factor, limits, stream);
      case DataType::kFloat32:
        return LaunchSame<float>(in, out, n, factor, limits, stream);
      case DataType::kFloat64:
        return LaunchSame<double>(in, out, n, factor, limits, stream);
      case DataType::kBool:
        break;
    }
    return cudaErrorInvalidValue;
  }
  if (in_type == DataType::kFloat16)
    return Launch<__half, float>(in, out, n, factor, limits, stream);
  if (in_type == DataType::kBfloat16)
    return Launch<__nv_bfloat16, float>(in, out, n, factor, limits, stream);
  if (out_type == DataType::kFloat16)
    return Launch<float, __half>(in, out, n, factor, limits, stream);
  return Launch<float, __nv_bfloat16>(in, out, n, factor, limits, stream);
}

cudaError_t QueryDeviceLimits(int device, DeviceLimits* limits) {
  cudaError_t err =
      cudaDeviceGetAttribute(&limits->sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  err =
      cudaDeviceGetAttribute(&limits->max_threads_per_block, cudaDevAttrMaxThreadsPerBlock, device);
  if (err != cudaSuccess) return err;
  int grid_x = 0;
  err = cudaDeviceGetAttribute(&grid_x, cudaDevAttrMaxGridDimX, device);
  limits->max_grid_x = grid_x;
  return err;
}

}  // namespace nccl
}  // namespace hvx
