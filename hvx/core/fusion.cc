#include "hvx/core/fusion.h"

#include <utility>

namespace hvx {
namespace {

bool Fusible(const Response& a, const Response& b) {
  return a.type == OpType::kAllreduce && b.type == OpType::kAllreduce && a.dtype == b.dtype &&
         a.device_type == b.device_type && a.reduce_op == b.reduce_op && a.prescale == b.prescale &&
         a.postscale == b.postscale;
}

}  // namespace

std::vector<Response> FuseResponses(std::vector<Response> responses, int64_t threshold_bytes) {
  if (threshold_bytes <= 0) return responses;
  std::vector<Response> out;
  // Open fused allreduces that may still take tensors: index into out.
  std::vector<size_t> open;
  for (Response& r : responses) {
    bool merged = false;
    if (r.type == OpType::kAllreduce) {
      const int64_t bytes = r.TotalBytes();
      for (size_t i : open) {
        Response& f = out[i];
        if (Fusible(f, r) && f.TotalBytes() + bytes <= threshold_bytes) {
          f.names.insert(f.names.end(), r.names.begin(), r.names.end());
          f.shapes.insert(f.shapes.end(), r.shapes.begin(), r.shapes.end());
          merged = true;
          break;
        }
      }
      if (!merged) open.push_back(out.size());
    }
    if (!merged) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace hvx
