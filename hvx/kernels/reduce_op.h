// ReduceOp: how a reduction combines the values of several ranks. Its own target so that the
// public API (//hvx/core) and the arithmetic under it (//hvx/kernels:cpu_ops) share one definition.
//
//   ReduceInto(DataType::kFloat32, ReduceOp::kSum, acc, in, n);
//   HVX_LOG(INFO) << ReduceOpName(ReduceOp::kSum);  // "sum"
#ifndef HVX_KERNELS_REDUCE_OP_H_
#define HVX_KERNELS_REDUCE_OP_H_

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

// What a reduction's inputs or result are scaled by: multiplied by `factor`, then divided by
// `divisor` (an Average's set size). The divisor is kept apart from the factor so that an average
// is rounded once, as `sum / size` is: float32 sums multiplied by float(1/3) come out one ulp off
// in a third of cases. Implicit from a double, for the common case of a plain factor.
struct Scale {
  Scale(double factor = 1.0, int divisor = 1) : factor(factor), divisor(divisor) {}  // NOLINT
  bool is_identity() const { return factor == 1.0 && divisor == 1; }
  // The scale as one number, for planes that can only multiply (factor / divisor).
  double value() const { return factor / divisor; }

  double factor;
  int divisor;
};

}  // namespace hvx

#endif  // HVX_KERNELS_REDUCE_OP_H_
