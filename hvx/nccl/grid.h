// The grid of hvx's element-wise CUDA kernels (scale, cast), computed on the host in plain
// C++ so it is tested without a GPU. The kernels use a grid-stride loop, so any grid size is
// correct; the grid is sized to fill the device once and no more.
//
//   KernelGrid c = ComputeGrid(/*elements=*/1 << 20, DeviceLimits{/*sm_count=*/132});
//   Kernel<<<c.blocks, c.threads, 0, stream>>>(...);          // skipped when c.blocks == 0
#ifndef HVX_NCCL_GRID_H_
#define HVX_NCCL_GRID_H_

#include <cstdint>

#include "hvx/common/types.h"

namespace hvx {
namespace nccl {

struct DeviceLimits {
  int sm_count = 1;
  int max_threads_per_block = 1024;
  // Resident blocks per multiprocessor the grid aims for (enough to hide memory latency).
  int blocks_per_sm = 8;
  int64_t max_grid_x = 2147483647;
};

struct KernelGrid {
  int64_t blocks = 0;  // 0: nothing to do, do not launch
  int threads = 0;
};

// Threads per block: 256 capped by the device's limit and rounded down to whole warps (at least
// one warp). Blocks: enough for each thread to own at least `elements_per_thread` elements, at most
// sm_count * blocks_per_sm and the grid limit, at least 1 when elements > 0.
KernelGrid ComputeGrid(int64_t elements, const DeviceLimits& limits, int elements_per_thread = 4);

// Conversions the scale/cast kernels implement: same-type scaling of every numeric dtype (bool
// excluded), and float16/bfloat16 <-> float32 with an optional scale.
bool KernelSupports(DataType in, DataType out);

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_GRID_H_
