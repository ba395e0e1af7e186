#include "hvx/launch/cluster_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

FileReader Files(std::map<std::string, std::string> files) {
  return [files](const std::string& path) -> absl::StatusOr<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return absl::NotFoundError(path);
    return it->second;
  };
}

// A FIFO planted under a path hvxrun reads (the follower's status file in /tmp) blocked the read
// forever; a huge file filled memory. Both are refused at once; procfs files still read.
TEST(ReadFileFromDiskTest, OnlyRegularFilesOfBoundedSize) {
  const std::string dir = ::testing::TempDir();
  const std::string fifo = dir + "/planted.fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> read = ReadFileFromDisk(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(read.status().message(), "cannot read " + fifo + ": not a regular file");
  unlink(fifo.c_str());

  const std::string big = dir + "/big.json";
  std::ofstream(big) << std::string(kMaxLauncherFileBytes + 1, 'x');
  EXPECT_EQ(ReadFileFromDisk(big).status().message(),
            absl::StrCat("cannot read ", big, ": larger than 1048576 bytes"));
  const std::string small = dir + "/small.json";
  std::ofstream(small) << "{\"hosts\": []}";
  EXPECT_EQ(*ReadFileFromDisk(small), "{\"hosts\": []}");
  absl::StatusOr<std::string> comm = ReadFileFromDisk("/proc/self/comm");
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_FALSE(comm->empty());
}

TEST(LauncherDetectionTest, EachLauncherIsNamed) {
  const std::vector<std::pair<MapEnvironment, std::string>> cases = {
      {{{"HVX_RANK", "0"}}, "hvxrun (HVX_RANK=0)"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}}, "PMI_RANK=1"},
      {{{"PMI_FD", "5"}}, "PMI_FD=5"},
      {{{"OMPI_COMM_WORLD_RANK", "2"}}, "Open MPI"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}}, "SLURM task"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, "torchrun"},
      {{{"HOROVOD_RANK", "1"}}, "horovodrun"},
  };
  for (const auto& [env, want] : cases) {
    std::optional<std::string> got = DetectEnclosingLauncher(env);
    ASSERT_TRUE(got.has_value()) << want;
    EXPECT_THAT(*got, HasSubstr(want));
    EXPECT_TRUE(IsUnderLauncher(env));
  }
}

TEST(LauncherDetectionTest, BatchShellAndPlainHostAreNotLaunchers) {
  // A SLURM batch script's shell has SLURM_PROCID but no step: hvxrun may launch from there.
  MapEnvironment batch{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "7"}};
  EXPECT_FALSE(IsUnderLauncher(batch));
  EXPECT_FALSE(IsUnderLauncher(MapEnvironment{{"RANK", "0"}}));
  EXPECT_FALSE(IsUnderLauncher(MapEnvironment{}));
}

TEST(SlurmTest, AllocationWithTasksPerNode) {
  MapEnvironment env{{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "3,1"}};
  auto c = DetectClusterHosts(env, Files({}), 0);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->has_value());
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"n1", 3}, HostSpec{"n2", 1}));
  EXPECT_EQ((*c)->launcher, ClusterHosts::Launcher::kSlurm);
  EXPECT_THAT((*c)->source, HasSubstr("SLURM_JOB_NODELIST=n[1-2]"));
}

TEST(SlurmTest, GpusPerNodeWinOverOneTaskPerNode) {
  MapEnvironment env{{"SLURM_NODELIST", "g[1-2]"},
                     {"SLURM_TASKS_PER_NODE", "1(x2)"},
                     {"SLURM_GPUS_PER_NODE", "a100:4"}};
  auto c = DetectClusterHosts(env, Files({}), 0);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"g1", 4}, HostSpec{"g2", 4}));
}

TEST(SlurmTest, GpuCountsThatAddUpPastTheLimitAreAnError) {
  // Two counts whose sum overflows an int (the fuzzer's find), and a sum just past the limit.
  for (const char* gpus : {"a100:2132230976,v100:21322243", "a100:4000,v100:97"}) {
    MapEnvironment env{{"SLURM_NODELIST", "g1"}, {"SLURM_GPUS_PER_NODE", gpus}};
    EXPECT_THAT(DetectClusterHosts(env, Files({}), 0).status().message(),
                HasSubstr(absl::StrCat("SLURM_GPUS_PER_NODE='", gpus,
                                       "': more than 4096 GPUs on one node")))
        << gpus;
  }
  MapEnvironment most{{"SLURM_NODELIST", "g1"}, {"SLURM_GPUS_PER_NODE", "a100:4000,v100:96"}};
  auto c = DetectClusterHosts(most, Files({}), 0);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"g1", 4096}));
}

TEST(SlurmTest, MismatchedTaskCountIsAnError) {
  MapEnvironment env{{"SLURM_NODELIST", "g[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  EXPECT_THAT(DetectClusterHosts(env, Files({}), 0).status().message(),
              HasSubstr("gives 2 nodes but SLURM_NODELIST='g[1-3]' has 3"));
}

TEST(SageMakerTest, LeaderGetsOneProcessPerGpuOnEveryHost) {
  MapEnvironment env{{"SM_HOSTS", "[\"algo-1\", \"algo-2\"]"},
                     {"SM_CURRENT_HOST", "algo-1"},
                     {"SM_NUM_GPUS", "8"}};
  auto c = DetectClusterHosts(env, Files({}), 0);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"algo-1", 8}, HostSpec{"algo-2", 8}));
  EXPECT_TRUE((*c)->is_leader);
  EXPECT_EQ((*c)->host_wait_s, kHostsStartApartWaitS);  // instances start minutes apart
}

TEST(SageMakerTest, FollowerDoesNotLead) {
  MapEnvironment env{
      {"SM_HOSTS", "[\"algo-1\",\"algo-2\"]"}, {"SM_CURRENT_HOST", "algo-2"}, {"SM_NUM_GPUS", "0"}};
  auto c = DetectClusterHosts(env, Files({}), 0);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_FALSE((*c)->is_leader);
  EXPECT_EQ((*c)->hosts[0].slots, 1);  // no GPUs: one process per host
}

TEST(SageMakerTest, ResourceConfigFile) {
  const std::string json =
      R"({"current_host": "algo-2", "hosts": ["algo-1", "algo-2", "algo-3"],
          "network_interface_name": "eth0"})";
  auto c = DetectClusterHosts(MapEnvironment{},
                              Files({{"/opt/ml/input/config/resourceconfig.json", json}}), 4);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->hosts.size(), 3u);
  EXPECT_EQ((*c)->hosts[2], (HostSpec{"algo-3", 4}));  // this host's GPU count
  EXPECT_EQ((*c)->current_host, "algo-2");
  EXPECT_FALSE((*c)->is_leader);
}

// The file as SageMaker writes it: an instance group's "hosts" (in another order) may come first.
// The substring search this replaced took the first "hosts" it met, so the group's order picked
// the leader; and a name with an escaped quote was cut at the backslash.
TEST(SageMakerTest, ResourceConfigIsReadAsJson) {
  const std::string json = R"({
      "current_group_name": "homogeneousCluster",
      "instance_groups": [{"instance_group_name": "homogeneousCluster",
                           "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-2", "algo-1"]}],
      "current_instance_type": "ml.p4d.24xlarge",
      "hosts": ["algo-1", "algo-2"],
      "current_host": "algo-1",
      "network_interface_name": "eth0"})";
  auto c = DetectClusterHosts(MapEnvironment{},
                              Files({{"/opt/ml/input/config/resourceconfig.json", json}}), 8);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"algo-1", 8}, HostSpec{"algo-2", 8}));
  EXPECT_TRUE((*c)->is_leader);
  auto bad = DetectClusterHosts(MapEnvironment{{"SM_RESOURCE_CONFIG", R"({"hosts": ["algo-1",)"}},
                                Files({}), 0);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("SageMaker resource config (SM_RESOURCE_CONFIG) is not JSON"));
  bad = DetectClusterHosts(
      MapEnvironment{{"SM_RESOURCE_CONFIG", R"({"hosts": ["algo-1"], "current_host": "a\"b"})"}},
      Files({}), 0);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"current_host\" is not a host name"));
  bad = DetectClusterHosts(MapEnvironment{{"SM_RESOURCE_CONFIG", R"({"instance_groups": []})"}},
                           Files({}), 0);
  EXPECT_THAT(bad.status().message(), HasSubstr("has no \"hosts\" list"));
}

TEST(SageMakerTest, MalformedHostList) {
  EXPECT_THAT(
      DetectClusterHosts(MapEnvironment{{"SM_HOSTS", "algo-1"}}, Files({}), 0).status().message(),
      HasSubstr("SM_HOSTS='algo-1': expected a JSON list"));
}

TEST(ClusterTest, PbsNodefileCountsRepeats) {
  auto c = DetectClusterHosts(MapEnvironment{{"PBS_NODEFILE", "/pbs"}},
                              Files({{"/pbs", "a\na\nb\n"}}), 0);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"a", 2}, HostSpec{"b", 1}));
}

TEST(ClusterTest, PbsNodefileLinesAreChecked) {
  auto c = DetectClusterHosts(MapEnvironment{{"PBS_NODEFILE", "/pbs"}},
                              Files({{"/pbs", "a\n\n-oProxyCommand=x\n"}}), 0);
  EXPECT_THAT(c.status().message(),
              HasSubstr("/pbs:3: bad host name '-oProxyCommand=x' in PBS_NODEFILE"));
  c = DetectClusterHosts(MapEnvironment{{"PBS_NODEFILE", "/pbs"}}, Files({{"/pbs", "a\nb\na\n"}}),
                         0);
  EXPECT_THAT(c.status().message(), HasSubstr("duplicate host 'a' (entries 1 and 3)"));
}

// Every cluster source goes through the -H checks: a SLURM allocation's task count, a
// hostfile variable's slots.
TEST(ClusterTest, ClusterHostsAreValidated) {
  auto c = DetectClusterHosts(MapEnvironment{{"HYDRA_HOST_FILE", "/hf"}},
                              Files({{"/hf", "w0:2\nw0:2\n"}}), 0);
  EXPECT_THAT(c.status().message(),
              HasSubstr("duplicate host 'w0' (entries 1 and 2) in HYDRA_HOST_FILE=/hf"));
  c = DetectClusterHosts(
      MapEnvironment{{"SLURM_JOB_NODELIST", "n[1-300]"}, {"SLURM_TASKS_PER_NODE", "4000(x300)"}},
      Files({}), 0);
  EXPECT_THAT(c.status().message(), HasSubstr("lists 1200000 slots on 300 hosts"));
}

TEST(ClusterTest, HydraHostfileVariable) {
  auto c = DetectClusterHosts(MapEnvironment{{"HYDRA_HOST_FILE", "/etc/mpi/hostfile"}},
                              Files({{"/etc/mpi/hostfile", "w0:2\nw1 slots=2\n"}}), 0);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"w0", 2}, HostSpec{"w1", 2}));
}

// The Kubeflow MPI Operator (mpiImplementation: MPICH): the launcher pod's hostfile names the
// worker pods by their DNS names; a worker pod only runs sshd.
TEST(ClusterTest, KubeflowMpiOperator) {
  const std::string hostfile =
      "train-worker-0.train.default.svc:2\ntrain-worker-1.train.default.svc:2\n";
  auto c = DetectClusterHosts(
      MapEnvironment{{"HYDRA_HOST_FILE", "/etc/mpi/hostfile"}, {"K_MPI_JOB_ROLE", "launcher"}},
      Files({{"/etc/mpi/hostfile", hostfile}}), 0);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->source, "Kubeflow MPI Operator launcher (HYDRA_HOST_FILE=/etc/mpi/hostfile)");
  EXPECT_THAT((*c)->hosts, ElementsAre(HostSpec{"train-worker-0.train.default.svc", 2},
                                       HostSpec{"train-worker-1.train.default.svc", 2}));
  EXPECT_EQ((*c)->host_wait_s, kHostsStartApartWaitS);  // worker pods may not be up yet
  EXPECT_TRUE((*c)->own_name_in_dns);                   // nor the launcher's own name in DNS
  auto worker = DetectClusterHosts(MapEnvironment{{"K_MPI_JOB_ROLE", "worker"}}, Files({}), 0);
  EXPECT_EQ(worker.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(worker.status().message(), "worker pod of a Kubeflow MPIJob"))
      << worker.status();
}

TEST(ClusterTest, NothingDetected) {
  auto c = DetectClusterHosts(MapEnvironment{{"HOME", "/root"}}, Files({}), 2);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
}

}  // namespace
}  // namespace launch
}  // namespace hvx
