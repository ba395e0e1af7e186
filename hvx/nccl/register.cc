// Registers the NCCL data plane for CUDA tensors with hvx/core's engine, and the device-binding
// check hvx::Init runs: each rank on a host with GPUs needs a GPU of its own.
#include <cuda_runtime.h>

#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/core/transport.h"
#include "hvx/nccl/nccl_data_plane.h"
#include "hvx/nccl/policy.h"

namespace hvx {
namespace nccl {
namespace {

// This rank's device as BindLocalDevice would choose it; device -1 without an error where the host
// shows no GPU (a CPU-only run is not this backend's concern).
MemberInfo DescribeBinding(const InitCheckContext& ctx) {
  MemberInfo mine;
  mine.host = ctx.host;
  if (ctx.visible_gpus <= 0) return mine;  // spares the CUDA runtime start on CPU-only hosts
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible == 0) return mine;
  absl::StatusOr<int> device = SelectDevice(ctx.local_rank, ctx.local_size, visible, ctx.host);
  if (!device.ok()) {
    mine.error = std::string(device.status().message());
    return mine;
  }
  char bus[64] = {};
  cudaError_t err = cudaDeviceGetPCIBusId(bus, sizeof(bus), *device);
  if (err != cudaSuccess) {
    mine.error = absl::StrCat("cudaDeviceGetPCIBusId(", *device, "): ", cudaGetErrorString(err));
    return mine;
  }
  mine.device = *device;
  mine.gpu = bus;
  return mine;
}

absl::Status CheckDeviceBinding(const InitCheckContext& ctx) {
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(ctx.comm->Allgather(EncodeMemberInfo(DescribeBinding(ctx)), &all));
  std::vector<MemberInfo> members;
  for (const std::string& text : all) {
    HVX_ASSIGN_OR_RETURN(MemberInfo m, DecodeMemberInfo(text));
    members.push_back(std::move(m));
  }
  std::vector<int> ranks(members.size());
  std::iota(ranks.begin(), ranks.end(), 0);
  return CheckMembers(members, ranks);
}

}  // namespace
}  // namespace nccl
}  // namespace hvx

HVX_REGISTER_DATA_PLANE(nccl, ::hvx::DeviceType::kCuda, &::hvx::nccl::CreateNcclDataPlaneForEngine);
HVX_REGISTER_INIT_CHECK(cuda_device_binding, &::hvx::nccl::CheckDeviceBinding);
