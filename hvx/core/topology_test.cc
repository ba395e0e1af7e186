// Where each rank sits, computed from host names; the launcher's view checked against it; and a
// process started alone where the environment shows a multi-process job was intended.
#include "hvx/core/topology.h"

#include <tuple>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

TEST(TopologyTest, LocalAndCrossFromHostNames) {
  // worker-0 has one process, worker-1 two.
  const std::vector<std::string> hosts = {"w0", "w1", "w1"};
  Topology t0 = ComputeTopology(0, hosts), t1 = ComputeTopology(1, hosts),
           t2 = ComputeTopology(2, hosts);
  EXPECT_EQ(std::make_tuple(t0.local_rank, t0.local_size, t0.cross_rank, t0.cross_size),
            std::make_tuple(0, 1, 0, 2));
  EXPECT_EQ(std::make_tuple(t1.local_rank, t1.local_size, t1.cross_rank, t1.cross_size),
            std::make_tuple(0, 2, 1, 2));
  EXPECT_EQ(std::make_tuple(t2.local_rank, t2.local_size, t2.cross_rank, t2.cross_size),
            std::make_tuple(1, 2, 0, 1));
  EXPECT_FALSE(t0.homogeneous);
  EXPECT_TRUE(ComputeTopology(3, {"a", "a", "b", "b"}).homogeneous);
}

// The interleaved placement's cross groups: local rank 1 exists on hosts b and a only (the layout
// itself: hvx/common/layout_test.cc).
TEST(TopologyTest, CrossGroupOfALocalRankOnlySomeHostsHave) {
  const Topology t4 = ComputeTopology(4, {"b", "a", "b", "c", "a", "b"});
  EXPECT_EQ(std::make_tuple(t4.local_rank, t4.local_size, t4.cross_rank, t4.cross_size),
            std::make_tuple(1, 2, 1, 2));
  EXPECT_FALSE(t4.homogeneous);
  EXPECT_EQ(t4.host, "a");
}

TEST(TopologyTest, LauncherVariablesMustAgree) {
  Topology t = ComputeTopology(1, {"a", "a"});
  EXPECT_TRUE(
      CheckLauncherEnvironment(t, MapEnvironment{{"HVX_RANK", "1"}, {"HVX_SIZE", "2"}}).ok());
  absl::Status s = CheckLauncherEnvironment(t, MapEnvironment{{"HVX_LOCAL_SIZE", "4"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "HVX_LOCAL_SIZE=4 but the transport reports 2")) << s;
}

TEST(TopologyTest, SingletonDetection) {
  EXPECT_TRUE(CheckSingleton(MapEnvironment{}, 0, "train").ok());
  EXPECT_TRUE(CheckSingleton(MapEnvironment{}, 1, "train").ok());
  absl::Status s = CheckSingleton(MapEnvironment{}, 4, "train --config=x");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "hvxrun -np 4 -H localhost:4 -- train --config=x"))
      << s;
  s = CheckSingleton(MapEnvironment{{"SM_HOSTS", "[\"algo-1\",\"algo-2\"]"}, {"SM_NUM_GPUS", "8"}},
                     8, "t");
  EXPECT_TRUE(absl::StrContains(s.message(), "hvxrun -np 16 -H algo-1:8,algo-2:8 -- t")) << s;
  s = CheckSingleton(MapEnvironment{{"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n[1-2]"}}, 0,
                     "t");
  EXPECT_TRUE(absl::StrContains(s.message(), "hvxrun -np 4 -H n1:2,n2:2 -- t")) << s;
  s = CheckSingleton(MapEnvironment{{"OMPI_COMM_WORLD_SIZE", "2"}}, 0, "t");
  EXPECT_TRUE(absl::StrContains(s.message(), "different MPI")) << s;
  // A malformed cluster variable still yields the advice, without its hosts.
  s = CheckSingleton(MapEnvironment{{"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[2-1]"}}, 0,
                     "t");
  EXPECT_TRUE(absl::StrContains(s.message(), "hvxrun -np 2 -H localhost:2 -- t")) << s;
}

// torchrun's processes and a Kubeflow PyTorchJob's pods each start the program alone.
TEST(TopologyTest, SingletonUnderTorchrunOrAPyTorchJob) {
  absl::Status s = CheckSingleton(
      MapEnvironment{{"WORLD_SIZE", "4"}, {"RANK", "0"}, {"LOCAL_RANK", "0"}}, 0, "t");
  EXPECT_TRUE(absl::StrContains(s.message(), "WORLD_SIZE=4 (torchrun started")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "hvxrun -np 4 -H localhost:4 -- t")) << s;
  s = CheckSingleton(
      MapEnvironment{{"WORLD_SIZE", "3"}, {"RANK", "2"}, {"MASTER_ADDR", "job-master-0"}}, 1, "t");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(
      s.message(),
      "in one of WORLD_SIZE=3 pods that a per-pod launcher (a Kubeflow PyTorchJob) "
      "started (RANK=2)"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "examples/deploy/kubernetes/mpijob.yaml")) << s;
  EXPECT_TRUE(CheckSingleton(MapEnvironment{{"WORLD_SIZE", "1"}, {"RANK", "0"}}, 1, "t").ok());
}

// A Kubeflow Trainer v2 pod has PET_* and no WORLD_SIZE: refused, naming the MPIJob recipe.
TEST(TopologyTest, SingletonInATrainerV2Pod) {
  absl::Status s = CheckSingleton(MapEnvironment{{"PET_NNODES", "2"},
                                                 {"PET_NPROC_PER_NODE", "1"},
                                                 {"PET_NODE_RANK", "1"},
                                                 {"PET_MASTER_ADDR", "job-node-0-0.job"},
                                                 {"PET_MASTER_PORT", "29400"}},
                                  0, "t");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(
      s.message(),
      "in a Kubeflow TrainJob pod (Trainer v2: PET_NNODES=2, PET_NPROC_PER_NODE=1, "
      "PET_NODE_RANK=1)"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "examples/deploy/kubernetes/mpijob.yaml")) << s;
  // One node with several processes per node is a cluster too; one of one is not.
  EXPECT_FALSE(
      CheckSingleton(MapEnvironment{{"PET_NNODES", "1"}, {"PET_NPROC_PER_NODE", "4"}}, 0, "t")
          .ok());
  EXPECT_TRUE(
      CheckSingleton(MapEnvironment{{"PET_NNODES", "1"}, {"PET_NPROC_PER_NODE", "1"}}, 0, "t")
          .ok());
}

}  // namespace
}  // namespace hvx
