#include "hvx/nccl/mpi_test_comm.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace hvx {
namespace nccl {
namespace {

absl::Status MpiStatus(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return absl::InternalError(absl::StrCat(call, " failed: ", std::string(text, len)));
}

absl::StatusOr<MPI_Datatype> MpiType(DataType t) {
  switch (t) {
    case DataType::kUint8:
    case DataType::kBool:
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
    default:
      return absl::UnimplementedError(absl::StrCat("MpiTestComm: no host allreduce for ", DataTypeName(t)));
  }
}

MPI_Op MpiOp(ReduceOp op, DataType t) {
  const bool is_bool = t == DataType::kBool;
  switch (op) {
    case ReduceOp::kMin:
      return is_bool ? MPI_LAND : MPI_MIN;
    case ReduceOp::kMax:
      return is_bool ? MPI_LOR : MPI_MAX;
    case ReduceOp::kProduct:
      return is_bool ? MPI_LAND : MPI_PROD;
    default:
      return is_bool ? MPI_LOR : MPI_SUM;
  }
}

class MpiHostPlane : public DataPlane {
 public:
  explicit MpiHostPlane(MPI_Comm comm) : comm_(comm) {}
  absl::Status Allreduce(const AllreduceWork& w) override {
    auto type = MpiType(w.dtype);
    if (!type.ok()) return type.status();
    for (size_t i = 0; i < w.inputs.size(); ++i) {
      const void* in = w.inputs[i].data() == w.outputs[i].data() ? MPI_IN_PLACE : w.inputs[i].data();
      absl::Status s = MpiStatus(MPI_Allreduce(in, w.outputs[i].data(), static_cast<int>(w.inputs[i].num_elements()),
                                               *type, MpiOp(w.op, w.dtype), comm_),
                                 "MPI_Allreduce");
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status Allgather(const AllgatherWork&) override { return Unsupported("allgather"); }
  absl::Status Broadcast(const BroadcastWork&) override { return Unsupported("broadcast"); }
  absl::Status Alltoall(const AlltoallWork&) override { return Unsupported("alltoall"); }
  absl::Status ReduceScatter(const ReduceScatterWork&) override { return Unsupported("reducescatter"); }

 private:
  static absl::Status Unsupported(const char* op) {
    return absl::UnimplementedError(absl::StrCat("MpiTestComm has no host ", op));
  }
  MPI_Comm comm_;
};

}  // namespace

MpiTestComm::MpiTestComm(MPI_Comm comm) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  cpu_ = std::make_unique<MpiHostPlane>(comm_);
}

MpiTestComm::~MpiTestComm() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

absl::Status MpiTestComm::Gather(const std::string& mine, std::vector<std::string>* all) {
  std::vector<std::string> everyone;
  absl::Status s = Allgather(mine, &everyone);
  if (!s.ok()) return s;
  all->clear();
  if (rank_ == 0) *all = std::move(everyone);
  return absl::OkStatus();
}

absl::Status MpiTestComm::Broadcast(std::string* message) {
  int len = static_cast<int>(message->size());
  absl::Status s = MpiStatus(MPI_Bcast(&len, 1, MPI_INT, 0, comm_), "MPI_Bcast");
  if (!s.ok()) return s;
  message->resize(len);
  return MpiStatus(MPI_Bcast(message->data(), len, MPI_CHAR, 0, comm_), "MPI_Bcast");
}

absl::Status MpiTestComm::Allgather(const std::string& mine, std::vector<std::string>* all) {
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size_), offsets(size_, 0);
  absl::Status s = MpiStatus(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_), "MPI_Allgather");
  if (!s.ok()) return s;
  for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + lens[r - 1];
  std::string joined(offsets.back() + lens.back(), '\0');
  s = MpiStatus(MPI_Allgatherv(mine.data(), len, MPI_CHAR, joined.data(), lens.data(), offsets.data(), MPI_CHAR, comm_),
                "MPI_Allgatherv");
  if (!s.ok()) return s;
  all->clear();
  for (int r = 0; r < size_; ++r) all->push_back(joined.substr(offsets[r], lens[r]));
  return absl::OkStatus();
}

absl::Status MpiTestComm::BitwiseAnd(std::vector<uint64_t>* bits) {
  return MpiStatus(MPI_Allreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()), MPI_UINT64_T, MPI_BAND,
                                 comm_),
                   "MPI_Allreduce");
}

absl::Status MpiTestComm::Barrier() { return MpiStatus(MPI_Barrier(comm_), "MPI_Barrier"); }

absl::StatusOr<std::unique_ptr<Communicator>> MpiTestComm::Subset(const std::vector<int>& ranks) {
  const bool member = std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
  int key = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  MPI_Comm sub = MPI_COMM_NULL;
  absl::Status s = MpiStatus(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, key, &sub), "MPI_Comm_split");
  if (!s.ok()) return s;
  if (!member) return std::unique_ptr<Communicator>();
  auto out = std::make_unique<MpiTestComm>(sub);
  MPI_Comm_free(&sub);
  return std::unique_ptr<Communicator>(std::move(out));
}

DataPlaneContext ContextFor(MpiTestComm* comm, int device_index) {
  DataPlaneContext ctx;
  ctx.comm = comm;
  ctx.global_ranks.resize(comm->size());
  std::iota(ctx.global_ranks.begin(), ctx.global_ranks.end(), 0);
  ctx.global_rank = comm->rank();
  MPI_Comm local;
  MPI_Comm_split_type(comm->comm(), MPI_COMM_TYPE_SHARED, comm->rank(), MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &ctx.local_rank);
  MPI_Comm_size(local, &ctx.local_size);
  MPI_Comm_free(&local);
  ctx.device = Device::Cuda(device_index);
  return ctx;
}

}  // namespace nccl
}  // namespace hvx
