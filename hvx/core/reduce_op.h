// ReduceOp: how a reduction combines the values of several ranks. Its own target so that the
// public API (//hvx/core) and the arithmetic under it (//hvx/core:cpu_ops) share one definition.
//
//   ReduceInto(DataType::kFloat32, ReduceOp::kSum, acc, in, n);
//   HVX_LOG(INFO) << ReduceOpName(ReduceOp::kSum);  // "sum"
#ifndef HVX_CORE_REDUCE_OP_H_
#define HVX_CORE_REDUCE_OP_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace hvx {

// How values from several ranks are combined.
enum class ReduceOp : uint8_t {
  kAverage = 0,  // Sum divided by the number of ranks (integers: truncated toward zero).
  kSum,
  kMin,
  kMax,
  kProduct,
  kAdasum,  // Adaptive summation (Maleki et al.); CPU, float types, power-of-two set sizes.
};
// "average", "sum", "min", "max", "product", "adasum".
absl::string_view ReduceOpName(ReduceOp op);

}  // namespace hvx

#endif  // HVX_CORE_REDUCE_OP_H_
