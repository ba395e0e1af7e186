// What this build's GPU backend is, for the programs' --version lines (hvx-train, hvx_info), so
// that each says the same: :gpu_backend_info, which :gpu_backend links with the NCCL data plane.
//
//   std::printf("hvx_info: %s\n", hvx::nccl::DescribeGpuBackend().c_str());
//   // hvx with its GPU backend (--config=cuda), NCCL 2.27.7, CUDA runtime 12.8
#ifndef HVX_NCCL_GPU_BACKEND_H_
#define HVX_NCCL_GPU_BACKEND_H_

#include <string>

namespace hvx {
namespace nccl {

// Whether this program was built with --config=cuda, where hvx has its NCCL data plane.
bool HasGpuBackend();

// The backend, with the versions of the NCCL and CUDA runtime libraries loaded (no GPU is
// needed to ask), or that there is none and how to get it.
std::string DescribeGpuBackend();

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_GPU_BACKEND_H_
