// Four ranks (more than this machine's cores: kept short): averages, float sums that do not depend
// on fusion, uneven gathers and scatters, even/odd process sets, Adasum's recursive doubling, join
// and a mismatch that must reach all four ranks.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/common/half.h"
#include "hvx/core/api.h"

namespace hvx {
namespace {

class HvxEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    InitOptions o = *InitOptions::FromEnv(hvx::Environment::Process());  // HVX_CPU_PLANE from BUILD
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
  Handle a = Allreduce("avg", TensorRef(DataType::kFloat32, {33}, x.data()),
                       TensorRef(DataType::kFloat32, {33}, x.data()));
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
  std::vector<TensorRef> refs = {TensorRef(DataType::kFloat16, {n}, x.data()),
                                 TensorRef(DataType::kFloat16, {7}, y.data())};
  ASSERT_TRUE(Wait(GroupedAllreduce("ring16", refs, refs, o)).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(HalfToFloat(x[i]), 4.0f * (i % 5) + 6.0f) << i;
}

// Rank r's values for tensor t: signs and magnitudes (1e-3 to 1e3) mixed so that a float sum of
// four rounds differently in different orders.
std::vector<float> Values(int rank, size_t t, int64_t n) {
  std::vector<float> v(n);
  uint64_t state = 0x9E3779B97F4A7C15ull * (rank + 1) + 7919 * (t + 1);
  const float scale[7] = {1e-3f, 1e-2f, 0.1f, 1.0f, 10.0f, 100.0f, 1000.0f};
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u =
        static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) / (1 << 23);
    v[i] = u * scale[(i * 3 + t + rank) % 7];
  }
  return v;
}

// With more than two ranks a float sum's bits depend on the order of the additions. The engine
// keeps one order per element, so the result does not depend on what a cycle fused with the
// tensor: alone, grouped, grouped in another order and submitted together all agree bit for bit,
// on every rank (small tensors, packed ones and ring-sized ones; float32 and bfloat16).
TEST(FourRanksTest, FloatSumsAreTheSameBitsHoweverTheTensorsAreFused) {
  const std::vector<int64_t> sizes = {3, 1000, 20000, 70001, 5, 30000, 90000};  // 845 KB in all
  const size_t n = sizes.size();
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  auto inputs = [&] {
    std::vector<std::vector<float>> x;
    for (size_t t = 0; t < n; ++t) x.push_back(Values(Rank(), t, sizes[t]));
    return x;
  };
  auto refs = [](std::vector<std::vector<float>>& x, const std::vector<size_t>& order) {
    std::vector<TensorRef> r;
    for (size_t t : order)
      r.emplace_back(DataType::kFloat32, TensorShape({static_cast<int64_t>(x[t].size())}),
                     x[t].data());
    return r;
  };
  std::vector<size_t> forward(n), backward(n);
  for (size_t t = 0; t < n; ++t) forward[t] = t, backward[t] = n - 1 - t;

  std::vector<std::vector<float>> alone = inputs();
  for (size_t t = 0; t < n; ++t) {
    TensorRef r = refs(alone, {t})[0];
    ASSERT_TRUE(Wait(Allreduce(absl::StrCat("alone.", t), r, r, sum)).ok());
  }
  std::vector<std::vector<float>> grouped = inputs(), reversed = inputs(), together = inputs();
  ASSERT_TRUE(
      Wait(GroupedAllreduce("grouped", refs(grouped, forward), refs(grouped, forward), sum)).ok());
  ASSERT_TRUE(
      Wait(GroupedAllreduce("reversed", refs(reversed, backward), refs(reversed, backward), sum))
          .ok());
  std::vector<Handle> handles;
  for (size_t t : backward) {
    TensorRef r = refs(together, {t})[0];
    handles.push_back(Allreduce(absl::StrCat("together.", t), r, r, sum));
  }
  ASSERT_TRUE(WaitAll(handles).ok());
  for (size_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < sizes[t]; ++i) {
      ASSERT_EQ(absl::bit_cast<uint32_t>(grouped[t][i]), absl::bit_cast<uint32_t>(alone[t][i]))
          << t << " " << i;
      ASSERT_EQ(absl::bit_cast<uint32_t>(reversed[t][i]), absl::bit_cast<uint32_t>(alone[t][i]))
          << t << " " << i;
      ASSERT_EQ(absl::bit_cast<uint32_t>(together[t][i]), absl::bit_cast<uint32_t>(alone[t][i]))
          << t << " " << i;
    }
  }
  // The same bits on every rank, and the sum itself is right.
  for (size_t t = 0; t < n; ++t) {
    std::vector<float> root = alone[t];
    TensorRef r(DataType::kFloat32, {sizes[t]}, root.data());
    ASSERT_TRUE(Wait(Broadcast(absl::StrCat("check.", t), r, 0)).ok());
    EXPECT_EQ(std::memcmp(root.data(), alone[t].data(), root.size() * 4), 0) << "tensor " << t;
    std::vector<double> exact(sizes[t], 0.0), magnitude(sizes[t], 0.0);
    for (int rank = 0; rank < 4; ++rank) {
      const std::vector<float> v = Values(rank, t, sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) exact[i] += v[i], magnitude[i] += std::abs(v[i]);
    }
    for (int64_t i = 0; i < sizes[t]; ++i)
      ASSERT_NEAR(alone[t][i], exact[i], 1e-6 * magnitude[i]) << t << " " << i;
  }

  // bfloat16 rounds after every addition: the order shows in most elements.
  std::vector<uint16_t> b_alone(50000), b_grouped(50000), small(10);
  const std::vector<float> b_values = Values(Rank(), 99, 50000);
  for (int64_t i = 0; i < 50000; ++i) b_alone[i] = b_grouped[i] = FloatToBfloat16(b_values[i]);
  TensorRef ba(DataType::kBfloat16, {50000}, b_alone.data());
  ASSERT_TRUE(Wait(Allreduce("bf16.alone", ba, ba, sum)).ok());
  std::vector<TensorRef> bg = {TensorRef(DataType::kBfloat16, {10}, small.data()),
                               TensorRef(DataType::kBfloat16, {50000}, b_grouped.data())};
  ASSERT_TRUE(Wait(GroupedAllreduce("bf16.grouped", bg, bg, sum)).ok());
  EXPECT_EQ(b_grouped, b_alone);
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

// Through shared memory a reduce-scatter folds each element as the allreduce does, so its slice
// has the allreduce's bits (what makes a sharded optimizer step exactly the replicated one); over
// MPI the order is MPICH's, equal within rounding.
TEST(FourRanksTest, ReduceScatterIsTheAllreducesSlice) {
  const int64_t n = 300007;  // several rounds, uneven slices
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.001f * i * (Rank() + 1)) * (Rank() + 0.3f);
  std::vector<float> summed = x;
  TensorRef t(DataType::kFloat32, {n}, summed.data());
  ASSERT_TRUE(Wait(Allreduce("rs.reference", t, t)).ok());
  Handle r = ReduceScatter("rs.slice", TensorRef(DataType::kFloat32, {n}, x.data()));
  ASSERT_TRUE(Wait(r).ok());
  const int64_t begin = Rank() * (n / 4) + std::min<int64_t>(Rank(), n % 4);
  ASSERT_EQ(r.output().num_elements(), ReduceScatterRows(n, 4, Rank()));
  const float* got = r.output().data_as<float>();
  const bool shm = std::string(getenv("HVX_CPU_PLANE")) == "shm";
  int64_t differ = 0;
  for (int64_t i = 0; i < r.output().num_elements(); ++i) {
    if (got[i] != summed[begin + i]) ++differ;
    ASSERT_NEAR(got[i], summed[begin + i], 1e-5) << "element " << begin + i;
  }
  if (shm) EXPECT_EQ(differ, 0) << "elements whose bits differ from the allreduce's";
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
