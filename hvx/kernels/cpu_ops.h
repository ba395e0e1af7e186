// Element-wise arithmetic on host buffers of any DataType, shared by CPU data planes.
//
//   ReduceInto(DataType::kFloat16, ReduceOp::kSum, acc, incoming, n);  // acc[i] += incoming[i]
//   ReduceTo(DataType::kFloat32, ReduceOp::kMax, out, a, b, n);         // out[i] = max(a[i], b[i])
//   ScaleInPlace(DataType::kInt32, acc, n, 0.5);                        // truncated toward zero
//
// float16/bfloat16 are widened to float32 for each operation and rounded back once. Integers are
// scaled in float64 and truncated toward zero. bool: Sum and Max are OR, Min and Product are AND.
// A Scale's factor multiplies in the element's precision (float32 for float16/bfloat16), as
// Horovod's CPU ops do; its divisor then divides so that the quotient is correctly rounded:
// float32(float64(x) * (1.0 / divisor)), which equals x / divisor rounded once for any divisor
// below 2^20 (x / n never lies within 2^-52 of a float32 rounding boundary unless it is one).
#ifndef HVX_KERNELS_CPU_OPS_H_
#define HVX_KERNELS_CPU_OPS_H_

#include <cstddef>
#include <cstdint>

#include "hvx/common/types.h"
#include "hvx/kernels/reduce_op.h"

namespace hvx {

// acc[i] = acc[i] (op) in[i] for i < count. op is kSum, kMin, kMax or kProduct.
void ReduceInto(DataType dtype, ReduceOp op, void* acc, const void* in, int64_t count);

// out[i] = a[i] (op) b[i] for i < count: the bits of copying a to out, then ReduceInto(out, b), in
// one pass. out is a (ReduceInto) or overlaps neither input.
void ReduceTo(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, int64_t count);

// data[i] = data[i] * scale.factor / scale.divisor. No-op for the identity. bool data is left
// alone.
void ScaleInPlace(DataType dtype, void* data, int64_t count, Scale scale);

// Adasum of two vectors, written into a: a*(1 - a.b/(2|a|^2)) + b*(1 - a.b/(2|b|^2)), with a
// coefficient of 1 where a norm is ~0. Symmetric in a and b. Floating-point dtypes only.
void AdasumCombine(DataType dtype, void* a, const void* b, int64_t count);

}  // namespace hvx

#endif  // HVX_KERNELS_CPU_OPS_H_
