// Registers the NCCL data plane for CUDA tensors with hvx/core's engine.
#include "hvx/core/transport.h"
#include "hvx/nccl/nccl_data_plane.h"

HVX_REGISTER_DATA_PLANE(nccl, ::hvx::DeviceType::kCuda, &::hvx::nccl::CreateNcclDataPlaneFromEnv);
