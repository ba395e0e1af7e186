#include "hvx/nccl/grid.h"

#include <algorithm>

namespace hvx {
namespace nccl {

KernelGrid ComputeGrid(int64_t elements, const DeviceLimits& limits, int elements_per_thread) {
  constexpr int kWarp = 32;
  constexpr int kPreferredThreads = 256;
  KernelGrid c;
  c.threads =
      std::max(kWarp, std::min(kPreferredThreads, limits.max_threads_per_block) / kWarp * kWarp);
  if (elements <= 0) return c;
  const int64_t per_block = static_cast<int64_t>(c.threads) * std::max(1, elements_per_thread);
  const int64_t wanted = (elements + per_block - 1) / per_block;
  const int64_t fill =
      static_cast<int64_t>(std::max(1, limits.sm_count)) * std::max(1, limits.blocks_per_sm);
  c.blocks = std::max<int64_t>(1, std::min({wanted, fill, limits.max_grid_x}));
  return c;
}

bool KernelSupports(DataType in, DataType out) {
  if (in == DataType::kBool || out == DataType::kBool) return false;
  if (in == out) return true;
  const bool half_in = in == DataType::kFloat16 || in == DataType::kBfloat16;
  const bool half_out = out == DataType::kFloat16 || out == DataType::kBfloat16;
  return (half_in && out == DataType::kFloat32) || (half_out && in == DataType::kFloat32);
}

}  // namespace nccl
}  // namespace hvx
