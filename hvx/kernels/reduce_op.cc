#include "hvx/kernels/reduce_op.h"

namespace hvx {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kAdasum:
      return "adasum";
  }
  return "unknown";
}

}  // namespace hvx
