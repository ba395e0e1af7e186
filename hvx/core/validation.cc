#include "hvx/core/validation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hvx {
namespace {

std::vector<int64_t> Tail(const std::vector<int64_t>& shape) {
  return std::vector<int64_t>(shape.begin() + (shape.empty() ? 0 : 1), shape.end());
}

}  // namespace

std::string RankNames::Who(int set_rank) const {
  if (set_rank < static_cast<int>(global_ranks.size()) && global_ranks[set_rank] != set_rank) {
    return absl::StrCat("rank ", global_ranks[set_rank], " (set rank ", set_rank, ")");
  }
  return absl::StrCat("rank ", set_rank);
}

std::string RankNames::WhoOnHost(int set_rank) const {
  if (set_rank >= static_cast<int>(hosts.size())) return Who(set_rank);
  return absl::StrCat(Who(set_rank), " (host ", hosts[set_rank], ")");
}

std::string Mismatch(const RankNames& who, int first, const Request& a, int r, const Request& b) {
  if (b.type != a.type) {
    return absl::StrCat("mismatched operations: ", who.Who(first), " did ", OpTypeName(a.type),
                        ", ", who.Who(r), " did ", OpTypeName(b.type));
  }
  if (b.dtype != a.dtype) {
    return absl::StrCat("mismatched data types: ", who.Who(first), " sent ", DataTypeName(a.dtype),
                        ", ", who.Who(r), " sent ", DataTypeName(b.dtype));
  }
  if (b.device.type != a.device.type) {
    return absl::StrCat("mismatched devices: ", who.WhoOnHost(first), " used ", a.device.ToString(),
                        ", ", who.WhoOnHost(r), " used ", b.device.ToString());
  }
  switch (a.type) {
    case OpType::kAllreduce:
    case OpType::kReduceScatter:
    case OpType::kBroadcast:
      if (b.shape != a.shape) {
        return absl::StrCat("mismatched ", OpTypeName(a.type), " shapes: ", who.Who(first),
                            " sent ", ShapeString(a.shape), ", ", who.Who(r), " sent ",
                            ShapeString(b.shape));
      }
      break;
    case OpType::kAllgather:
    case OpType::kAlltoall:
      if (b.shape.size() != a.shape.size() || Tail(b.shape) != Tail(a.shape)) {
        return absl::StrCat("mismatched ", OpTypeName(a.type), " shapes: ", who.Who(first),
                            " sent ", ShapeString(a.shape), ", ", who.Who(r), " sent ",
                            ShapeString(b.shape), " (all dimensions but the first must agree)");
      }
      break;
    case OpType::kAddProcessSet:
      if (b.splits != a.splits) {
        return absl::StrCat("mismatched process set ranks: ", who.Who(first), " listed ",
                            absl::StrJoin(a.splits, ","), ", ", who.Who(r), " listed ",
                            absl::StrJoin(b.splits, ","));
      }
      break;
    default:
      break;
  }
  if (a.type == OpType::kAllreduce || a.type == OpType::kReduceScatter) {
    if (b.reduce_op != a.reduce_op) {
      return absl::StrCat("mismatched reduction operations: ", who.Who(first), " used ",
                          ReduceOpName(a.reduce_op), ", ", who.Who(r), " used ",
                          ReduceOpName(b.reduce_op));
    }
    if (b.prescale != a.prescale || b.postscale != a.postscale) {
      return absl::StrCat("mismatched prescale/postscale factors: ", who.Who(first), " used ",
                          a.prescale, "/", a.postscale, ", ", who.Who(r), " used ", b.prescale, "/",
                          b.postscale);
    }
  }
  if (a.type == OpType::kBroadcast && b.root != a.root) {
    return absl::StrCat("mismatched BROADCAST root ranks: ", who.Who(first), " named root ", a.root,
                        ", ", who.Who(r), " named root ", b.root);
  }
  return "";
}

std::string JoinProblem(const RankNames& who, const std::set<int>& joined, const Request& a) {
  if (joined.empty() || a.type == OpType::kAllreduce) return "";
  std::vector<int> global;
  for (int r : joined) global.push_back(who.global_ranks.empty() ? r : who.global_ranks[r]);
  return absl::StrCat(OpTypeName(a.type), " is not supported while ranks have joined (joined: ",
                      absl::StrJoin(global, ", "), ")");
}

std::string NegativeDimension(const RankNames& who, int rank, const Request& request) {
  for (int64_t d : request.shape) {
    if (d < 0) {
      return absl::StrCat(who.Who(rank), " sent a negative dimension in ",
                          ShapeString(request.shape));
    }
  }
  return "";
}

std::string OpLimits(const RankNames& who, int size, const Request& a) {
  switch (a.type) {
    case OpType::kAllreduce:
      if (a.reduce_op != ReduceOp::kAdasum) return "";
      if ((size & (size - 1)) != 0) {
        return absl::StrCat("Adasum needs a power-of-two number of ranks; this process set has ",
                            size);
      }
      if (!IsFloatingPoint(a.dtype)) {
        return absl::StrCat("Adasum needs a floating-point tensor, got ", DataTypeName(a.dtype));
      }
      return "";
    case OpType::kReduceScatter:
      if (a.shape.empty()) {
        return "REDUCESCATTER of a rank-0 (scalar) tensor; give it a first dimension";
      }
      if (a.reduce_op != ReduceOp::kSum && a.reduce_op != ReduceOp::kAverage) {
        return absl::StrCat("REDUCESCATTER supports sum and average, not ",
                            ReduceOpName(a.reduce_op));
      }
      return "";
    case OpType::kBroadcast:
      if (a.root < 0 || a.root >= size) {
        return absl::StrCat("BROADCAST root rank ", a.root, " is outside the process set of size ",
                            size);
      }
      return "";
    case OpType::kAllgather:
      if (a.shape.empty())
        return "ALLGATHER of a rank-0 (scalar) tensor; give it a first dimension";
      return "";
    case OpType::kAlltoall:
      if (a.shape.empty()) return "ALLTOALL of a rank-0 (scalar) tensor; give it a first dimension";
      return "";
    case OpType::kAddProcessSet:
      for (int64_t rank : a.splits) {
        if (rank < 0 || rank >= size) {
          return absl::StrCat("process set rank ", rank, " is outside the job of size ", size);
        }
      }
      return "";
    default:
      return "";
  }
}

std::string AlltoallRows(const RankNames& who, const std::vector<const Request*>& request_of_rank,
                         std::vector<int64_t>* rows) {
  const int size = static_cast<int>(request_of_rank.size());
  rows->assign(static_cast<size_t>(size) * size, 0);
  for (int r = 0; r < size; ++r) {
    const Request& q = *request_of_rank[r];
    const int64_t dim0 = q.shape[0];
    if (q.splits.empty()) {
      if (dim0 % size != 0) {
        return absl::StrCat(who.Who(r), " asked for an equal ALLTOALL split of ", dim0,
                            " rows, which does not divide by the set size ", size);
      }
      for (int j = 0; j < size; ++j) (*rows)[r * size + j] = dim0 / size;
      continue;
    }
    if (static_cast<int>(q.splits.size()) != size) {
      return absl::StrCat(who.Who(r), " gave ", q.splits.size(), " ALLTOALL splits for a set of ",
                          size, " ranks");
    }
    int64_t sum = 0;
    for (int64_t s : q.splits) {
      if (s < 0) return absl::StrCat(who.Who(r), " gave a negative ALLTOALL split ", s);
      if (__builtin_add_overflow(sum, s, &sum)) {
        return absl::StrCat(who.Who(r), "'s ALLTOALL splits (", absl::StrJoin(q.splits, ", "),
                            ") sum past 2^63");
      }
    }
    if (sum != dim0) {
      return absl::StrCat(who.Who(r), "'s ALLTOALL splits sum to ", sum,
                          " but its first dimension is ", dim0);
    }
    for (int j = 0; j < size; ++j) (*rows)[r * size + j] = q.splits[j];
  }
  return "";
}

}  // namespace hvx
