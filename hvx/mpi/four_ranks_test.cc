// Four ranks (more than this machine's cores: kept short): averages, uneven gathers and
// scatters, even/odd process sets, Adasum's recursive doubling, join and a mismatch that must
// reach all four ranks.
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hvx/common/half.h"
#include "hvx/core/api.h"

namespace hvx {
namespace {

class HvxEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    InitOptions o;
    o.stall_check_time_s = 0;
    o.shutdown_timeout_s = 20;
    ASSERT_TRUE(Init(o).ok());
  }
  void TearDown() override {
    EXPECT_TRUE(Wait(Barrier()).ok());
    EXPECT_TRUE(Shutdown().ok());
  }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new HvxEnvironment);

TEST(FourRanksTest, AverageAndBfloat16Sum) {
  ASSERT_EQ(Size(), 4);
  std::vector<float> x(33, static_cast<float>(Rank()));
  std::vector<uint16_t> h(9, FloatToBfloat16(static_cast<float>(Rank() + 1)));
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  Handle a = Allreduce("avg", TensorRef(DataType::kFloat32, {33}, x.data()), TensorRef(DataType::kFloat32, {33}, x.data()));
  Handle b = Allreduce("bf16", TensorRef(DataType::kBfloat16, {9}, h.data()),
                       TensorRef(DataType::kBfloat16, {9}, h.data()), sum);
  ASSERT_TRUE(WaitAll({a, b}).ok());
  for (float v : x) EXPECT_EQ(v, 1.5f);
  for (uint16_t v : h) EXPECT_EQ(Bfloat16ToFloat(v), 10.0f);
}

TEST(FourRanksTest, LargeRingAllreduceFloat16) {
  const int64_t n = 150001;  // 300 KB: the ring path, segments not aligned to anything
  std::vector<uint16_t> x(n), y(7);
  for (int64_t i = 0; i < n; ++i) x[i] = FloatToHalf(static_cast<float>(i % 5 + Rank()));
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  std::vector<TensorRef> refs = {TensorRef(DataType::kFloat16, {n}, x.data()), TensorRef(DataType::kFloat16, {7}, y.data())};
  ASSERT_TRUE(Wait(GroupedAllreduce("ring16", refs, refs, o)).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(HalfToFloat(x[i]), 4.0f * (i % 5) + 6.0f) << i;
}

TEST(FourRanksTest, AllgatherAndReduceScatterUneven) {
  std::vector<int64_t> in(Rank() + 1, Rank());
  Handle g = Allgather("gather", TensorRef(DataType::kInt64, {Rank() + 1}, in.data()));
  ASSERT_TRUE(Wait(g).ok());
  EXPECT_EQ(g.output().shape(), TensorShape({10}));
  EXPECT_EQ(g.output().data_as<int64_t>()[9], 3);
  std::vector<float> rows(10, 1.0f);
  ReduceScatterOptions o;
  o.op = ReduceOp::kSum;
  Handle r = ReduceScatter("scatter", TensorRef(DataType::kFloat32, {10}, rows.data()), o);
  ASSERT_TRUE(Wait(r).ok());
  EXPECT_EQ(r.output().num_elements(), Rank() < 2 ? 3 : 2);
  EXPECT_EQ(r.output().data_as<float>()[0], 4.0f);
}

TEST(FourRanksTest, EvenAndOddProcessSets) {
  auto even = AddProcessSet({0, 2});
  auto odd = AddProcessSet({1, 3});
  ASSERT_TRUE(even.ok() && odd.ok());
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  o.process_set = Rank() % 2 == 0 ? *even : *odd;
  std::vector<int32_t> x(4, Rank());
  TensorRef t(DataType::kInt32, {4}, x.data());
  ASSERT_TRUE(Wait(Allreduce("ps", t, t, o)).ok());
  EXPECT_EQ(x[0], Rank() % 2 == 0 ? 2 : 4);
  EXPECT_EQ(o.process_set.rank(), Rank() / 2);
}

TEST(FourRanksTest, AdasumOfOrthogonalVectorsIsTheirSum) {
  std::vector<double> x(4, 0.0);
  x[Rank()] = Rank() + 1.0;
  AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  TensorRef t(DataType::kFloat64, {4}, x.data());
  ASSERT_TRUE(Wait(Allreduce("adasum", t, t, o)).ok());
  EXPECT_EQ(x, (std::vector<double>{1, 2, 3, 4}));
}

TEST(FourRanksTest, MismatchReachesAllRanks) {
  std::vector<float> x(4);
  TensorRef t(Rank() == 3 ? DataType::kFloat64 : DataType::kFloat32, {2}, x.data());
  absl::Status s = Wait(Allreduce("mismatch", t, t));
  EXPECT_TRUE(absl::StrContains(s.message(), "mismatched data types")) << s;
}

TEST(FourRanksTest, JoinWithOneEarlyRank) {
  std::vector<float> x(2, 8.0f);
  TensorRef t(DataType::kFloat32, {2}, x.data());
  if (Rank() != 3) {
    ASSERT_TRUE(Wait(Allreduce("uneven", t, t)).ok());
    EXPECT_EQ(x[0], 6.0f);  // (8 * 3 + 0) / 4
  }
  Handle j = Join();
  ASSERT_TRUE(Wait(j).ok());
  EXPECT_GE(j.last_joined_rank(), 0);
  EXPECT_NE(j.last_joined_rank(), 3);
}

}  // namespace
}  // namespace hvx
