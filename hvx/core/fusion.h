// Tensor fusion's plan: which agreed allreduces run as one call of the data plane, which packs
// them into its fusion buffer (AllreduceWork::fusion_buffer_bytes). The coordinator plans the
// slow path's responses with it, and every rank the cached ones (cycle.cc).
//
//   std::vector<Response> plan = FuseResponses(std::move(agreed), options.fusion_threshold_bytes);
#ifndef HVX_CORE_FUSION_H_
#define HVX_CORE_FUSION_H_

#include <cstdint>
#include <vector>

#include "hvx/core/message.h"

namespace hvx {

// Merges consecutive-compatible allreduce responses (same dtype, device, op, scales) up to
// `threshold_bytes` each; keeps every other response in place. Deterministic, so every rank may
// apply it to the same input and get the same plan. threshold 0 disables fusion.
std::vector<Response> FuseResponses(std::vector<Response> responses, int64_t threshold_bytes);

}  // namespace hvx

#endif  // HVX_CORE_FUSION_H_
