#include "hvx/nccl/policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace nccl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(NcclOptionsTest, KnobsComeFromInitOptions) {
  MapEnvironment env;
  auto defaults = InitOptions::FromEnv(env);
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(NcclOptions::From(*defaults).hierarchical_allreduce);
  EXPECT_FALSE(NcclOptions::From(*defaults).half_in_float32);
  env.Set("HVX_HIERARCHICAL_ALLREDUCE", "1");
  env.Set("HVX_NCCL_HALF_IN_FLOAT32", "true");
  auto set = InitOptions::FromEnv(env);
  ASSERT_TRUE(set.ok());
  EXPECT_TRUE(NcclOptions::From(*set).hierarchical_allreduce);
  EXPECT_TRUE(NcclOptions::From(*set).half_in_float32);
  env.Set("HVX_HIERARCHICAL_ALLREDUCE", "maybe");
  auto bad = InitOptions::FromEnv(env);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("HVX_HIERARCHICAL_ALLREDUCE"));
}

TEST(SelectDeviceTest, LocalRankPicksItsGpu) {
  EXPECT_EQ(*SelectDevice(0, 4, 8, "h"), 0);
  EXPECT_EQ(*SelectDevice(3, 4, 4, "h"), 3);
  // One GPU visible to each of several ranks: per-rank CUDA_VISIBLE_DEVICES, ordinal 0.
  EXPECT_EQ(*SelectDevice(2, 4, 1, "h"), 0);
}

TEST(SelectDeviceTest, MoreRanksThanGpusFailsNamingHostAndCounts) {
  auto s = SelectDevice(2, 4, 2, "node7");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("host node7 runs 4 ranks but shows only 2 GPUs"));
  auto none = SelectDevice(0, 1, 0, "node7");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no CUDA device is visible on host node7"));
  EXPECT_FALSE(SelectDevice(4, 4, 8, "h").ok());
}

TEST(MemberInfoTest, RoundTripsAndRejectsGarbage) {
  MemberInfo in{"node1", "0000:3b:00.0", 2, "bad things"};
  auto out = DecodeMemberInfo(EncodeMemberInfo(in));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->host, "node1");
  EXPECT_EQ(out->gpu, "0000:3b:00.0");
  EXPECT_EQ(out->device, 2);
  EXPECT_EQ(out->error, "bad things");
  EXPECT_FALSE(DecodeMemberInfo("node1\tx").ok());
  EXPECT_FALSE(DecodeMemberInfo("node1\tx\tnotanumber\t").ok());
}

TEST(CheckMembersTest, SharedGpuOnOneHostFails) {
  std::vector<MemberInfo> m = {{"a", "0000:01:00.0", 0, ""},
                               {"a", "0000:02:00.0", 1, ""},
                               {"b", "0000:01:00.0", 0, ""},
                               {"a", "0000:01:00.0", 0, ""}};
  absl::Status s = CheckMembers(m, {4, 5, 6, 7});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("ranks 4 and 7 on host a would share the GPU at PCI 0000:01:00.0"));
  m.pop_back();
  EXPECT_TRUE(CheckMembers(m, {4, 5, 6}).ok());  // same bus id on another host is another GPU
}

TEST(CheckMembersTest, MembersWithoutGpuAreSkipped) {
  // At Init, ranks on hosts that show no GPU report neither a GPU nor an error.
  std::vector<MemberInfo> m = {
      {"cpu", "", -1, ""}, {"cpu", "", -1, ""}, {"a", "0000:01:00.0", 0, ""}};
  EXPECT_TRUE(CheckMembers(m, {0, 1, 2}).ok());
  m.push_back({"a", "0000:01:00.0", 0, ""});
  EXPECT_THAT(std::string(CheckMembers(m, {0, 1, 2, 3}).message()),
              HasSubstr("ranks 2 and 3 on host a"));
}

TEST(CheckMembersTest, MemberErrorIsReportedWithItsRank) {
  std::vector<MemberInfo> m = {{"a", "x", 0, ""}, {"b", "", -1, "host b runs 3 ranks"}};
  absl::Status s = CheckMembers(m, {0, 9});
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 9: host b runs 3 ranks"));
}

TEST(PlanAllreduceTest, HierarchicalOnlyForSeveralHomogeneousHosts) {
  const HostLayout two_by_two = LayoutOf({"a", "a", "b", "b"});
  AllreducePlan p = PlanAllreduce(true, two_by_two);
  EXPECT_EQ(p.algorithm, AllreduceAlgorithm::kHierarchical);
  EXPECT_EQ(p.reason, "hierarchical: 2 hosts x 2 ranks");

  EXPECT_EQ(PlanAllreduce(false, two_by_two).algorithm, AllreduceAlgorithm::kFlat);

  AllreducePlan one_host = PlanAllreduce(true, LayoutOf({"a", "a", "a"}));
  EXPECT_EQ(one_host.algorithm, AllreduceAlgorithm::kFlat);
  EXPECT_THAT(one_host.reason, HasSubstr("needs several hosts"));

  AllreducePlan uneven = PlanAllreduce(true, LayoutOf({"a", "a", "b"}));
  EXPECT_EQ(uneven.algorithm, AllreduceAlgorithm::kFlat);
  EXPECT_THAT(uneven.reason, HasSubstr("the set has 2/1 over 2 hosts"));

  // One rank per host still splits across hosts (the host step is then a copy).
  EXPECT_EQ(PlanAllreduce(true, LayoutOf({"a", "b", "c"})).algorithm,
            AllreduceAlgorithm::kHierarchical);
}

TEST(ShardForHierarchicalTest, PadsToEqualAlignedShards) {
  HierarchicalShards s = ShardForHierarchical(1000, 4, 64);
  EXPECT_EQ(s.padded_elements, 1024);
  EXPECT_EQ(s.shard_elements, 256);
  s = ShardForHierarchical(1024, 4, 64);
  EXPECT_EQ(s.padded_elements, 1024);
  s = ShardForHierarchical(1, 3, 64);
  EXPECT_EQ(s.padded_elements, 192);
  EXPECT_EQ(s.shard_elements, 64);
  s = ShardForHierarchical(0, 2, 64);
  EXPECT_EQ(s.padded_elements, 0);
  EXPECT_EQ(s.shard_elements, 0);
}

TEST(ChooseReductionTest, AverageBecomesNcclAvgWhereAvailable) {
  // The engine's form of Average: Sum with postscale exactly 1/size.
  auto c = ChooseReduction(ReduceOp::kSum, DataType::kFloat32, 1.0, 1.0 / 3, 3, 22809, false, true);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->op, NcclOp::kAvg);
  EXPECT_EQ(c->postscale, 1.0);
  // Before NCCL 2.10: Sum, then the backend scales.
  c = ChooseReduction(ReduceOp::kSum, DataType::kFloat32, 1.0, 1.0 / 3, 3, 2708, false, true);
  EXPECT_EQ(c->op, NcclOp::kSum);
  EXPECT_DOUBLE_EQ(c->postscale, 1.0 / 3);
  // A prescale, another postscale, or a split reduction keeps Sum + scaling.
  c = ChooseReduction(ReduceOp::kSum, DataType::kFloat32, 2.0, 1.0 / 3, 3, 22809, false, true);
  EXPECT_EQ(c->op, NcclOp::kSum);
  EXPECT_EQ(c->prescale, 2.0);
  c = ChooseReduction(ReduceOp::kSum, DataType::kFloat32, 1.0, 0.5, 3, 22809, false, true);
  EXPECT_EQ(c->op, NcclOp::kSum);
  c = ChooseReduction(ReduceOp::kSum, DataType::kFloat32, 1.0, 1.0 / 3, 3, 22809, false, false);
  EXPECT_EQ(c->op, NcclOp::kSum);
  // The public Average op folds 1/size in the same way.
  c = ChooseReduction(ReduceOp::kAverage, DataType::kInt32, 1.0, 1.0, 4, 22809, false, true);
  EXPECT_EQ(c->op, NcclOp::kAvg);
}

TEST(ChooseReductionTest, OpsBoolsHalvesAndAdasum) {
  EXPECT_EQ(ChooseReduction(ReduceOp::kMin, DataType::kInt64, 1, 1, 2, 22809, false, true)->op,
            NcclOp::kMin);
  EXPECT_EQ(ChooseReduction(ReduceOp::kMax, DataType::kInt64, 1, 1, 2, 22809, false, true)->op,
            NcclOp::kMax);
  EXPECT_EQ(
      ChooseReduction(ReduceOp::kProduct, DataType::kFloat64, 1, 1, 2, 22809, false, true)->op,
      NcclOp::kProd);
  auto b = ChooseReduction(ReduceOp::kSum, DataType::kBool, 2.0, 0.5, 2, 22809, false, true);
  EXPECT_EQ(b->op, NcclOp::kMax);
  EXPECT_EQ(b->prescale, 1.0);
  EXPECT_EQ(b->postscale, 1.0);
  EXPECT_EQ(ChooseReduction(ReduceOp::kProduct, DataType::kBool, 1, 1, 2, 22809, false, true)->op,
            NcclOp::kMin);

  EXPECT_FALSE(ChooseReduction(ReduceOp::kSum, DataType::kFloat16, 1, 1, 2, 22809, false, true)
                   ->widen_to_float32);
  EXPECT_TRUE(ChooseReduction(ReduceOp::kSum, DataType::kFloat16, 1, 1, 2, 22809, true, true)
                  ->widen_to_float32);
  EXPECT_TRUE(ChooseReduction(ReduceOp::kSum, DataType::kBfloat16, 1, 1, 2, 2708, false, true)
                  ->widen_to_float32);
  EXPECT_FALSE(ChooseReduction(ReduceOp::kSum, DataType::kFloat32, 1, 1, 2, 22809, true, true)
                   ->widen_to_float32);

  auto adasum = ChooseReduction(ReduceOp::kAdasum, DataType::kFloat32, 1, 1, 2, 22809, false, true);
  ASSERT_FALSE(adasum.ok());
  EXPECT_THAT(std::string(adasum.status().message()),
              HasSubstr("Adasum is not available for GPU tensors"));
}

}  // namespace
}  // namespace nccl
}  // namespace hvx
