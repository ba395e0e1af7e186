// What makes the ranks' requests for one tensor unservable, case by case: each row is two ranks'
// requests (or one request and a set size) and the message the coordinator fails the tensor with.
#include "hvx/core/validation.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace {

Request Allreduce(std::vector<int64_t> shape) {
  Request r;
  r.type = OpType::kAllreduce;
  r.shape = std::move(shape);
  return r;
}

Request Of(OpType type, std::vector<int64_t> shape) {
  Request r = Allreduce(std::move(shape));
  r.type = type;
  return r;
}

template <typename Fn>
Request With(Request r, Fn change) {
  change(r);
  return r;
}

struct MismatchCase {
  const char* what;
  Request a, b;
  std::string message;  // "" when the two agree
};

TEST(ValidationTest, MismatchNamesTheFirstDifferenceAndBothRanks) {
  const RankNames who{{4, 5, 9}, {"h0", "h0", "h1"}};
  const Request a = Allreduce({2, 3});
  const MismatchCase cases[] = {
      {"the same request", a, a, ""},
      {"operation", a, Of(OpType::kBroadcast, {2, 3}),
       "mismatched operations: rank 4 (set rank 0) did ALLREDUCE, rank 9 (set rank 2) did "
       "BROADCAST"},
      {"data type", a, With(a, [](Request& r) { r.dtype = DataType::kInt32; }),
       "mismatched data types: rank 4 (set rank 0) sent float32, rank 9 (set rank 2) sent int32"},
      {"device type, with hosts", a, With(a, [](Request& r) { r.device = Device::Cuda(0); }),
       "mismatched devices: rank 4 (set rank 0) (host h0) used cpu, rank 9 (set rank 2) (host h1) "
       "used cuda:0"},
      {"allreduce shape", a, Allreduce({3, 2}),
       "mismatched ALLREDUCE shapes: rank 4 (set rank 0) sent [2, 3], rank 9 (set rank 2) sent "
       "[3, 2]"},
      {"allgather first dimension may differ", Of(OpType::kAllgather, {2, 3}),
       Of(OpType::kAllgather, {7, 3}), ""},
      {"allgather other dimensions", Of(OpType::kAllgather, {2, 3}), Of(OpType::kAllgather, {2, 4}),
       "mismatched ALLGATHER shapes: rank 4 (set rank 0) sent [2, 3], rank 9 (set rank 2) sent "
       "[2, 4] (all dimensions but the first must agree)"},
      {"reduction", a, With(a, [](Request& r) { r.reduce_op = ReduceOp::kMax; }),
       "mismatched reduction operations: rank 4 (set rank 0) used sum, rank 9 (set rank 2) used "
       "max"},
      {"scale factors", a, With(a, [](Request& r) { r.postscale = 0.5; }),
       "mismatched prescale/postscale factors: rank 4 (set rank 0) used 1/1, rank 9 (set rank 2) "
       "used 1/0.5"},
      {"broadcast root", Of(OpType::kBroadcast, {1}),
       With(Of(OpType::kBroadcast, {1}), [](Request& r) { r.root = 1; }),
       "mismatched BROADCAST root ranks: rank 4 (set rank 0) named root 0, rank 9 (set rank 2) "
       "named root 1"},
      {"a broadcast's reduction does not count", Of(OpType::kBroadcast, {1}),
       With(Of(OpType::kBroadcast, {1}), [](Request& r) { r.reduce_op = ReduceOp::kMax; }), ""},
      {"process set ranks",
       With(Of(OpType::kAddProcessSet, {}), [](Request& r) { r.splits = {0}; }),
       With(Of(OpType::kAddProcessSet, {}),
            [](Request& r) {
              r.splits = {0, 1};
            }),
       "mismatched process set ranks: rank 4 (set rank 0) listed 0, rank 9 (set rank 2) listed "
       "0,1"},
  };
  for (const MismatchCase& c : cases) {
    EXPECT_EQ(Mismatch(who, 0, c.a, 2, c.b), c.message) << c.what;
  }
  // Without global ranks, set ranks are the ranks.
  EXPECT_EQ(Mismatch(RankNames{}, 0, a, 1, Of(OpType::kAllgather, {2, 3})),
            "mismatched operations: rank 0 did ALLREDUCE, rank 1 did ALLGATHER");
}

struct LimitCase {
  const char* what;
  int size;
  Request a;
  std::string message;
};

TEST(ValidationTest, OpLimitsOfTheSetSizeAndTheOperation) {
  const Request adasum = With(Allreduce({4}), [](Request& r) { r.reduce_op = ReduceOp::kAdasum; });
  const LimitCase cases[] = {
      {"allreduce", 3, Allreduce({4}), ""},
      {"adasum on 4", 4, adasum, ""},
      {"adasum on 3", 3, adasum,
       "Adasum needs a power-of-two number of ranks; this process set has 3"},
      {"adasum of integers", 2, With(adasum, [](Request& r) { r.dtype = DataType::kInt64; }),
       "Adasum needs a floating-point tensor, got int64"},
      {"reducescatter of a scalar", 2, Of(OpType::kReduceScatter, {}),
       "REDUCESCATTER of a rank-0 (scalar) tensor; give it a first dimension"},
      {"reducescatter max", 2,
       With(Of(OpType::kReduceScatter, {4}), [](Request& r) { r.reduce_op = ReduceOp::kMax; }),
       "REDUCESCATTER supports sum and average, not max"},
      {"broadcast root in the set", 2,
       With(Of(OpType::kBroadcast, {1}), [](Request& r) { r.root = 1; }), ""},
      {"broadcast root outside", 2,
       With(Of(OpType::kBroadcast, {1}), [](Request& r) { r.root = 2; }),
       "BROADCAST root rank 2 is outside the process set of size 2"},
      {"negative broadcast root", 2,
       With(Of(OpType::kBroadcast, {1}), [](Request& r) { r.root = -1; }),
       "BROADCAST root rank -1 is outside the process set of size 2"},
      {"allgather of a scalar", 2, Of(OpType::kAllgather, {}),
       "ALLGATHER of a rank-0 (scalar) tensor; give it a first dimension"},
      {"alltoall of a scalar", 2, Of(OpType::kAlltoall, {}),
       "ALLTOALL of a rank-0 (scalar) tensor; give it a first dimension"},
      {"process set ranks outside the job", 2,
       With(Of(OpType::kAddProcessSet, {}),
            [](Request& r) {
              r.splits = {0, 2};
            }),
       "process set rank 2 is outside the job of size 2"},
  };
  for (const LimitCase& c : cases)
    EXPECT_EQ(OpLimits(RankNames{}, c.size, c.a), c.message) << c.what;
}

TEST(ValidationTest, NegativeDimensionsAndJoinedRanks) {
  const RankNames who{{0, 3}, {}};
  EXPECT_EQ(NegativeDimension(who, 1, Allreduce({2, -1})),
            "rank 3 (set rank 1) sent a negative dimension in [2, -1]");
  EXPECT_EQ(NegativeDimension(who, 1, Allreduce({2, 0})), "");
  EXPECT_EQ(JoinProblem(who, {1}, Of(OpType::kBroadcast, {1})),
            "BROADCAST is not supported while ranks have joined (joined: 3)");
  EXPECT_EQ(JoinProblem(who, {1}, Allreduce({1})), "");
  EXPECT_EQ(JoinProblem(who, {}, Of(OpType::kBroadcast, {1})), "");
}

struct RowsCase {
  const char* what;
  std::vector<Request> requests;  // by rank
  std::string message;
  std::vector<int64_t> rows;  // when there is no message
};

Request Alltoall(int64_t dim0, std::vector<int64_t> splits) {
  Request r = Of(OpType::kAlltoall, {dim0, 2});
  r.splits = std::move(splits);
  return r;
}

TEST(ValidationTest, AlltoallRowsFromEachRanksSplits) {
  const RowsCase cases[] = {
      {"equal splits", {Alltoall(4, {}), Alltoall(2, {})}, "", {2, 2, 1, 1}},
      {"given splits", {Alltoall(3, {3, 0}), Alltoall(5, {1, 4})}, "", {3, 0, 1, 4}},
      {"equal split that does not divide",
       {Alltoall(4, {}), Alltoall(3, {})},
       "rank 1 asked for an equal ALLTOALL split of 3 rows, which does not divide by the set size "
       "2",
       {}},
      {"too few splits",
       {Alltoall(2, {2}), Alltoall(2, {})},
       "rank 0 gave 1 ALLTOALL splits for a set of 2 ranks",
       {}},
      {"negative split",
       {Alltoall(2, {}), Alltoall(1, {-1, 2})},
       "rank 1 gave a negative ALLTOALL split -1",
       {}},
      {"splits past int64",
       {Alltoall(2, {}), Alltoall(1, {INT64_MAX, 1})},
       "rank 1's ALLTOALL splits (9223372036854775807, 1) sum past 2^63",
       {}},
      {"splits that do not sum to the rows",
       {Alltoall(2, {1, 2}), Alltoall(2, {})},
       "rank 0's ALLTOALL splits sum to 3 but its first dimension is 2",
       {}},
  };
  for (const RowsCase& c : cases) {
    std::vector<const Request*> of_rank;
    for (const Request& r : c.requests) of_rank.push_back(&r);
    std::vector<int64_t> rows;
    EXPECT_EQ(AlltoallRows(RankNames{}, of_rank, &rows), c.message) << c.what;
    if (c.message.empty()) EXPECT_EQ(rows, c.rows) << c.what;
  }
}

}  // namespace
}  // namespace hvx
