#include "hvx/common/cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(VisibleGpusTest, CudaVisibleDevicesCountsLikeCuda) {
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", "0,1,3"}}, "/nonexistent"), 3);
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", " 2 "}}, "/nonexistent"), 1);
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", ""}}, "/nonexistent"), 0);
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", "-1"}}, "/nonexistent"), 0);
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}, "/x"), 0);
  // CUDA enumerates up to the first invalid entry only.
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", "0,-1,2"}}, "/x"), 1);
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", "0,,2"}}, "/x"), 1);
}

TEST(VisibleGpusTest, DriverDirectoryWhenUnset) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/gpus");
  ASSERT_TRUE(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST);
  for (const char* bus : {"0000:01:00.0", "0000:02:00.0"}) {
    ASSERT_TRUE(mkdir(absl::StrCat(dir, "/", bus).c_str(), 0755) == 0 || errno == EEXIST);
  }
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{}, dir), 2);
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{}, "/nonexistent"), 0);
  // The variable wins over the directory, even when it hides every GPU.
  EXPECT_EQ(CountVisibleGpus(MapEnvironment{{"CUDA_VISIBLE_DEVICES", "-1"}}, dir), 0);
}

// What a host shows of GPUs, read as a container sees it: the driver's list (the host's procfs),
// device files, SageMaker's count; nothing on a host without them, or with the GPUs hidden.
TEST(GpuEvidenceTest, TheDriversListDeviceFilesAndSageMakersCount) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string root = absl::StrCat(t != nullptr ? t : "/tmp", "/gpuhost");
  ASSERT_EQ(system(("rm -rf " + root + " && mkdir -p " + root + "/dev " + root +
                    "/proc/driver/nvidia/gpus/0000:01:00.0 " + root +
                    "/proc/driver/nvidia/gpus/0000:02:00.0")
                       .c_str()),
            0);
  EXPECT_EQ(GpuEvidence(MapEnvironment{}, root), "/proc/driver/nvidia/gpus lists 2 GPUs");
  for (const char* dev : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}) {
    FILE* f = fopen((root + "/dev/" + dev).c_str(), "w");
    ASSERT_NE(f, nullptr);
    fclose(f);
  }
  EXPECT_EQ(GpuEvidence(MapEnvironment{{"SM_NUM_GPUS", "8"}}, root),
            "/proc/driver/nvidia/gpus lists 2 GPUs, 2 /dev/nvidia<N> devices exist, SM_NUM_GPUS=8");
  // Hidden on purpose: none.
  for (const char* hidden : {"", "-1", "NoDevFiles"}) {
    EXPECT_EQ(GpuEvidence(MapEnvironment{{"CUDA_VISIBLE_DEVICES", hidden}}, root), "") << hidden;
  }
  EXPECT_EQ(GpuEvidence(MapEnvironment{{"CUDA_VISIBLE_DEVICES", "0"}, {"SM_NUM_GPUS", "0"}},
                        root + "/nonexistent"),
            "");
}

// SageMaker's instance type: GPU families (ml.p<N>, ml.g<N>) from the toolkit's variable or the
// resource config of a bring-your-own container; CPU families are no evidence.
TEST(GpuEvidenceTest, SageMakersGpuInstanceTypes) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string root = absl::StrCat(t != nullptr ? t : "/tmp", "/sagemaker");
  const std::string empty = root + "/nonexistent";
  for (const char* gpu :
       {"ml.p3.16xlarge", "ml.p4d.24xlarge", "ml.g4dn.xlarge", "ml.g5.48xlarge"}) {
    EXPECT_EQ(GpuEvidence(MapEnvironment{{"SM_CURRENT_INSTANCE_TYPE", gpu}}, empty),
              absl::StrCat("the SageMaker instance type ", gpu, " has GPUs"));
  }
  for (const char* cpu : {"ml.c5.xlarge", "ml.m5.large", "ml.trn1.32xlarge", "ml.geospatial"}) {
    EXPECT_EQ(GpuEvidence(MapEnvironment{{"SM_CURRENT_INSTANCE_TYPE", cpu}}, empty), "") << cpu;
  }
  ASSERT_EQ(system(("mkdir -p " + root + "/opt/ml/input/config").c_str()), 0);
  FILE* f = fopen((root + "/opt/ml/input/config/resourceconfig.json").c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs(R"({"current_host": "algo-1", "current_instance_type": "ml.p3.16xlarge",
            "hosts": ["algo-1"]})",
        f);
  fclose(f);
  EXPECT_EQ(GpuEvidence(MapEnvironment{}, root),
            "the SageMaker instance type ml.p3.16xlarge has GPUs");
}

// Two hostNetwork pods of one node share the host name but not /dev/shm: they are two hosts (their
// ranks cannot map each other's regions, and each has its own GPUs).
TEST(HostIdentityTest, NameBootAndSharedMemoryMakeAHost) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string root = absl::StrCat(t != nullptr ? t : "/tmp", "/pod");
  ASSERT_EQ(system(("mkdir -p " + root + "/proc/sys/kernel/random " + root + "/dev/shm").c_str()),
            0);
  {
    FILE* f = fopen((root + "/proc/sys/kernel/random/boot_id").c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("2b1c8f3e-0000-4000-8000-000000000001\n", f);
    fclose(f);
  }
  struct stat st;
  ASSERT_EQ(stat((root + "/dev/shm").c_str(), &st), 0);
  EXPECT_EQ(HostIdentity("node7", root),
            absl::StrCat("node7\n2b1c8f3e-0000-4000-8000-000000000001\n", st.st_dev));
  // This process's real identity starts with the name and has a boot id.
  const std::vector<std::string> mine = absl::StrSplit(HostIdentity("node7"), '\n');
  ASSERT_EQ(mine.size(), 3u);
  EXPECT_EQ(mine[0], "node7");
  EXPECT_EQ(mine[1].size(), 36u) << mine[1];
  EXPECT_FALSE(mine[2].empty());
}

TEST(HostIdentityTest, RanksGroupByIdentityUnderReadableNames) {
  EXPECT_THAT(HostNamesOf({"node7\nb\n5", "node7\nb\n5", "node7\nb\n6", "node8\nc\n5",
                           "node7\nb\n6", "node7\nd\n5"}),
              ElementsAre("node7", "node7", "node7#2", "node8", "node7#2", "node7#3"));
  // Plain names (in-process tests simulating hosts) stay as they are.
  EXPECT_THAT(HostNamesOf({"a", "b", "a"}), ElementsAre("a", "b", "a"));
}

TEST(SlurmTest, ExpandsCompressedNodeLists) {
  auto hosts = ExpandSlurmNodeList("gn[01-03,7],login,r[9-10]x");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("gn01", "gn02", "gn03", "gn7", "login", "r9x", "r10x"));
  hosts = ExpandSlurmNodeList("node[01-03,7],gpu5");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("node01", "node02", "node03", "node7", "gpu5"));
}

TEST(SlurmTest, MalformedNodeListsNameTheBadPart) {
  EXPECT_THAT(ExpandSlurmNodeList("gn[3-1]").status().message(), HasSubstr("bad range '3-1'"));
  EXPECT_THAT(ExpandSlurmNodeList("gn[1-2").status().message(), HasSubstr("unbalanced"));
  EXPECT_THAT(ExpandSlurmNodeList("gn[a-b]").status().message(), HasSubstr("bad range 'a-b'"));
  EXPECT_THAT(ExpandSlurmNodeList("bad host").status().message(), HasSubstr("bad host 'bad host'"));
  EXPECT_THAT(ExpandSlurmNodeList(",").status().message(), HasSubstr("no hosts"));
  EXPECT_THAT(ExpandSlurmNodeList("-o[1-2]").status().message(), HasSubstr("bad host '-o1'"));
}

// Counts a typo or an overflow made are refused before anything is allocated for them.
TEST(SlurmTest, HugeListsAreRefused) {
  EXPECT_THAT(ExpandSlurmNodeList("n[0-100000000]").status().message(),
              HasSubstr("range '0-100000000' makes more than 1048576 hosts"));
  EXPECT_THAT(ExpandSlurmNodeList("n[0-2147483647]").status().message(), HasSubstr("more than"));
  EXPECT_TRUE(ExpandSlurmNodeList("n[1-4096]").ok());
  EXPECT_THAT(ExpandSlurmTasksPerNode("2(x100000000)").status().message(),
              HasSubstr("at '2(x100000000)'"));
  EXPECT_THAT(ExpandSlurmTasksPerNode("100000").status().message(), HasSubstr("at '100000'"));
  auto tasks = ExpandSlurmTasksPerNode("4096(x2)");
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  EXPECT_EQ(tasks->size(), 2u);
}

TEST(SlurmTest, ExpandsTasksPerNode) {
  auto tasks = ExpandSlurmTasksPerNode("2(x3),1");
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  EXPECT_THAT(*tasks, ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(ExpandSlurmTasksPerNode("2(x)").status().message(), HasSubstr("'2(x)'"));
  EXPECT_THAT(ExpandSlurmTasksPerNode("0").status().message(), HasSubstr("at '0'"));
}

TEST(SageMakerTest, ParsesHostList) {
  auto hosts = ParseSageMakerHosts("[\"algo-1\", \"algo-2\"]");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("algo-1", "algo-2"));
  hosts = ParseSageMakerHosts("[]");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_TRUE(hosts->empty());
  EXPECT_THAT(ParseSageMakerHosts("algo-1").status().message(),
              HasSubstr("SM_HOSTS='algo-1': expected a JSON list"));
  EXPECT_THAT(ParseSageMakerHosts("[algo-1]", "resource config").status().message(),
              HasSubstr("resource config='[algo-1]': expected a JSON list of host names"));
  EXPECT_THAT(
      ParseSageMakerHosts("[\"algo-1\", 2]").status().message(),
      HasSubstr("SM_HOSTS: a list of host names: expected a JSON list of strings, got item 2"));
  EXPECT_THAT(ParseSageMakerHosts("[\"a b\"]").status().message(),
              HasSubstr("malformed host name 'a b'"));
}

TEST(HostNameTest, AcceptsNamesAndAddresses) {
  EXPECT_TRUE(IsValidHostName("gn01.cluster"));
  EXPECT_TRUE(IsValidHostName("10.0.0.1"));
  EXPECT_FALSE(IsValidHostName(""));
  EXPECT_FALSE(IsValidHostName("a:b"));
  // ssh would take these as options or they are not names at all.
  EXPECT_FALSE(IsValidHostName("-oProxyCommand=touch$IFS/tmp/x"));
  EXPECT_FALSE(IsValidHostName("-v"));
  EXPECT_FALSE(IsValidHostName(".hidden"));
  EXPECT_FALSE(IsValidHostName(std::string(254, 'a')));
  EXPECT_TRUE(IsValidHostName(std::string(253, 'a')));
}

TEST(ClusterTest, HostNameIsGethostname) {
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_EQ(HostName(), name);
  EXPECT_EQ(HostName("fallback"), name);  // the fallback is for a host name that cannot be read
}

}  // namespace
}  // namespace hvx
