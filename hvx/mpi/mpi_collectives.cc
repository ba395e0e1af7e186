#include "hvx/mpi/mpi_collectives.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "hvx/core/cpu_ops.h"

namespace hvx {
namespace {

int OpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
    default:
      return 0;
  }
}

constexpr ReduceOp kOps[4] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

template <DataType D, int I>
void SixteenBitOp(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceInto(D, kOps[I], inout, in, *len);
}

template <DataType D>
absl::Status CreateOps(MPI_Op* ops) {
  MPI_User_function* fns[4] = {&SixteenBitOp<D, 0>, &SixteenBitOp<D, 1>, &SixteenBitOp<D, 2>, &SixteenBitOp<D, 3>};
  for (int i = 0; i < 4; ++i) {
    absl::Status s = MpiStatus(MPI_Op_create(fns[i], /*commute=*/1, &ops[i]), "MPI_Op_create");
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

MPI_Datatype TypeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kBool:
      return MPI_C_BOOL;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

}  // namespace

absl::Status MpiStatus(int code, absl::string_view what) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrCat(what, ": ", absl::string_view(text, len)));
}

MpiOps& MpiOps::Get() {
  static MpiOps* ops = new MpiOps();
  return *ops;
}

absl::Status MpiOps::Init() {
  if (initialized_) return absl::OkStatus();
  absl::Status s = CreateOps<DataType::kFloat16>(half_);
  if (s.ok()) s = CreateOps<DataType::kBfloat16>(bf16_);
  initialized_ = s.ok();
  return s;
}

void MpiOps::Free() {
  if (!initialized_) return;
  for (int i = 0; i < 4; ++i) {
    MPI_Op_free(&half_[i]);
    MPI_Op_free(&bf16_[i]);
  }
  initialized_ = false;
}

MpiReduceType MpiOps::For(DataType dtype, ReduceOp op) const {
  const int i = OpIndex(op);
  if (dtype == DataType::kFloat16) return {MPI_UINT16_T, half_[i]};
  if (dtype == DataType::kBfloat16) return {MPI_UINT16_T, bf16_[i]};
  if (dtype == DataType::kBool) {
    return {MPI_C_BOOL, (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? MPI_LAND : MPI_LOR};
  }
  static const MPI_Op builtin[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return {TypeOf(dtype), builtin[i]};
}

absl::Status ChunkedAllreduce(MPI_Comm comm, void* data, int64_t count, DataType dtype, ReduceOp op,
                              int64_t chunk_bytes) {
  const MpiReduceType t = MpiOps::Get().For(dtype, op);
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t per = std::max<int64_t>(1, std::min<int64_t>(chunk_bytes / esize, INT32_MAX));
  char* p = static_cast<char*>(data);
  for (int64_t done = 0; done < count; done += per) {
    const int n = static_cast<int>(std::min(per, count - done));
    absl::Status s =
        MpiStatus(MPI_Allreduce(MPI_IN_PLACE, p + done * esize, n, t.type, t.op, comm), "MPI_Allreduce");
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace hvx
