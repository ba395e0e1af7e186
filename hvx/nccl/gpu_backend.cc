#include "hvx/nccl/gpu_backend.h"

#include "absl/strings/str_cat.h"

#ifdef HVX_GPU_BACKEND
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace hvx {
namespace nccl {

bool HasGpuBackend() {
#ifdef HVX_GPU_BACKEND
  return true;
#else
  return false;
#endif
}

std::string DescribeGpuBackend() {
#ifdef HVX_GPU_BACKEND
  int nccl = 0;
  ncclGetVersion(&nccl);  // MAJOR * 10000 + MINOR * 100 + PATCH
  int cudart = 0;
  cudaRuntimeGetVersion(&cudart);  // 12080: 12.8
  return absl::StrCat("hvx with its GPU backend (--config=cuda), NCCL ", nccl / 10000, ".",
                      nccl % 10000 / 100, ".", nccl % 100, ", CUDA runtime ", cudart / 1000, ".",
                      cudart % 1000 / 10);
#else
  return "hvx without a GPU backend (built without --config=cuda)";
#endif
}

}  // namespace nccl
}  // namespace hvx
