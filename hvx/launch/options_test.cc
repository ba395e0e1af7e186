#include "hvx/launch/options.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hvx/launch/cluster_env.h"
#include "hvx/launch/command.h"

namespace hvx {
namespace launch {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

absl::StatusOr<LaunchOptions> Parse(std::vector<std::string> args,
                                    const Environment& env = MapEnvironment{}) {
  return ParseLaunchArgs(args, env);
}

FileReader NoFiles() {
  return [](const std::string& p) -> absl::StatusOr<std::string> {
    return absl::NotFoundError(absl::StrCat("cannot read ", p));
  };
}

HostProbe Probe(int local_gpus, std::map<std::string, int> remote = {}) {
  HostProbe p;
  p.local_gpus = local_gpus;
  p.is_local = [](const std::string& h) { return h == "localhost"; };
  p.remote_gpus = [remote](const std::string& h) -> absl::StatusOr<int> {
    auto it = remote.find(h);
    if (it == remote.end()) return absl::UnavailableError(absl::StrCat("ssh ", h, ": no route"));
    return it->second;
  };
  return p;
}

TEST(ParseTest, AllFlags) {
  MapEnvironment env{{"CUDA_HOME", "/usr/cuda"}};
  auto o = Parse({"-np",
                  "4",
                  "-H",
                  "h1:2,h2:2",
                  "-x",
                  "CUDA_HOME",
                  "-x",
                  "A=b=c",
                  "--tag-output=full",
                  "--bind-to",
                  "none",
                  "--output-dir",
                  "/tmp/o",
                  "--launcher-exec",
                  "/bin/fakessh",
                  "--start-timeout",
                  "7",
                  "--stop-timeout=3",
                  "--timeout",
                  "60",
                  "--dry-run",
                  "--verbose",
                  "--slots-per-host",
                  "2",
                  "--",
                  "prog",
                  "-x",
                  "--flag"},
                 env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o->np, 4);
  EXPECT_EQ(o->hosts, "h1:2,h2:2");
  EXPECT_THAT(o->env, ElementsAre(Pair("CUDA_HOME", "/usr/cuda"), Pair("A", "b=c"),
                                  Pair("HVX_BIND_TO", "none")));
  EXPECT_EQ(o->tag_output, TagMode::kFull);
  EXPECT_EQ(o->output_dir, "/tmp/o");
  EXPECT_EQ(o->launcher_exec, "/bin/fakessh");
  EXPECT_EQ(o->start_timeout_s, 7);
  EXPECT_EQ(o->stop_timeout_s, 3);
  EXPECT_EQ(o->timeout_s, 60);
  EXPECT_TRUE(o->dry_run && o->verbose);
  EXPECT_EQ(*o->slots_per_host, 2);
  EXPECT_THAT(o->program, ElementsAre("prog", "-x", "--flag"));
}

TEST(ParseTest, ProgramStartsAtFirstNonFlag) {
  auto o = Parse({"-n", "2", "python3", "-u", "x.py"});
  ASSERT_TRUE(o.ok());
  EXPECT_THAT(o->program, ElementsAre("python3", "-u", "x.py"));
}

TEST(ParseTest, Errors) {
  EXPECT_EQ(Parse({"--frobnicate", "--", "p"}).status().message(),
            "unknown flag '--frobnicate' (hvxrun --help lists the flags)");
  EXPECT_THAT(Parse({"-np", "zero", "p"}).status().message(), HasSubstr("-np 'zero'"));
  EXPECT_THAT(Parse({"-np", "0", "p"}).status().message(), HasSubstr("positive integer"));
  EXPECT_THAT(Parse({"-np"}).status().message(), HasSubstr("-np needs a value"));
  EXPECT_THAT(Parse({"-np", "2"}).status().message(), HasSubstr("no program to run"));
  EXPECT_THAT(Parse({"-x", "NOPE", "p"}).status().message(),
              HasSubstr("-x NOPE: not set in hvxrun's environment"));
  EXPECT_THAT(Parse({"--tag-output", "json", "p"}).status().message(),
              HasSubstr("rank, full or none"));
  EXPECT_THAT(Parse({"--bind-to", "socket", "p"}).status().message(), HasSubstr("core or none"));
  EXPECT_THAT(Parse({"--slots-per-host", "0", "p"}).status().message(),
              HasSubstr("auto or a positive integer"));
  EXPECT_THAT(Parse({"-H", "a", "--hostfile", "f", "p"}).status().message(),
              HasSubstr("either -H or --hostfile"));
  EXPECT_TRUE(absl::IsNotFound(Parse({"--help"}).status()));
}

TEST(ResolveTest, RefusesUnderAnotherLauncher) {
  auto o = Parse({"-np", "2", "p"});
  ASSERT_TRUE(o.ok());
  auto s = ResolveJob(*o, MapEnvironment{{"OMPI_COMM_WORLD_RANK", "1"}}, NoFiles(), Probe(0));
  EXPECT_THAT(s.status().message(),
              HasSubstr("already running under Open MPI mpirun (OMPI_COMM_WORLD_RANK=1)"));
}

TEST(ResolveTest, HostListErrorsReachTheUser) {
  auto run = [](std::vector<std::string> args) {
    auto o = Parse(args);
    EXPECT_TRUE(o.ok()) << o.status();
    return ResolveJob(*o, MapEnvironment{}, NoFiles(), Probe(0)).status();
  };
  EXPECT_EQ(run({"-np", "5", "-H", "h1:2,h2:2", "p"}).message(),
            "-np 5 is more than the 4 slots of h1:2,h2:2");
  EXPECT_THAT(run({"-H", "h1:2,h1:2", "p"}).message(), HasSubstr("duplicate host 'h1'"));
  EXPECT_THAT(run({"-H", "h1:zero", "p"}).message(), HasSubstr("'h1:zero'"));
  EXPECT_THAT(run({"-H", "h1:0", "p"}).message(), HasSubstr("zero slots"));
  EXPECT_THAT(run({"--hostfile", "/no/hf", "p"}).message(), HasSubstr("/no/hf"));
  // This host alone with -np N has N slots, bounded like any host's.
  EXPECT_THAT(run({"-np", "100000", "p"}).message(), HasSubstr("has 100000 slots; give 1 to 4096"));
}

// A duration past kMaxSeconds overflowed the clock's conversions (--timeout 1e10 stopped the job at
// once with 124), and nan or inf were taken.
TEST(ParseTest, DurationsAreFiniteAndBounded) {
  for (const char* bad : {"nan", "inf", "-1", "1e10"}) {
    for (const char* flag : {"--timeout", "--start-timeout", "--stop-timeout", "--host-wait"}) {
      EXPECT_EQ(Parse({flag, bad, "p"}).status().message(),
                absl::StrCat(flag, " '", bad, "': expected seconds, from 0 to 1e+08"));
    }
  }
  auto o = Parse({"--timeout", "1e8", "p"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->timeout_s, 1e8);
}

TEST(ParseTest, CountsAreBounded) {
  EXPECT_THAT(Parse({"-np", "100000000", "p"}).status().message(),
              HasSubstr("a positive integer up to 1048576"));
  EXPECT_THAT(Parse({"--slots-per-host", "5000", "p"}).status().message(),
              HasSubstr("auto or a positive integer up to 4096"));
}

TEST(ResolveTest, AutoSlotsAreGpuCounts) {
  auto o = Parse({"-H", "localhost,gpubox,cpubox", "p"});
  ASSERT_TRUE(o.ok());
  auto s = ResolveJob(*o, MapEnvironment{}, NoFiles(), Probe(2, {{"gpubox", 8}, {"cpubox", 0}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(FormatHostList(s->plan.used_hosts), "localhost:2,gpubox:8,cpubox:1");
  EXPECT_EQ(s->plan.size, 11);  // no -np: every slot
}

TEST(ResolveTest, UnreachableHostForAutoSlotsIsNamed) {
  auto o = Parse({"-H", "far", "p"});
  ASSERT_TRUE(o.ok());
  EXPECT_THAT(ResolveJob(*o, MapEnvironment{}, NoFiles(), Probe(0)).status().message(),
              HasSubstr("cannot count the GPUs of host 'far'"));
}

TEST(ResolveTest, FixedSlotsPerHost) {
  auto o = Parse({"--slots-per-host", "3", "-np", "4", "-H", "a,b:1,c", "p"});
  ASSERT_TRUE(o.ok());
  auto s = ResolveJob(*o, MapEnvironment{}, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(FormatHostList(s->plan.used_hosts), "a:3,b:1");
}

TEST(ResolveTest, ThisHostAlone) {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  auto o = Parse({"-np", "3", "p"});
  ASSERT_TRUE(o.ok());
  auto s = ResolveJob(*o, MapEnvironment{}, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(FormatHostList(s->plan.used_hosts), absl::StrCat(name, ":3"));
  // Without -np a GPU host gets one process per GPU.
  o = Parse({"p"});
  s = ResolveJob(*o, MapEnvironment{}, NoFiles(), Probe(4));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->plan.size, 4);
}

TEST(ResolveTest, SlurmAllocationUsesSrunLauncher) {
  auto o = Parse({"p"});
  MapEnvironment env{{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  auto s = ResolveJob(*o, env, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(FormatHostList(s->plan.used_hosts), "n1:2,n2:2");
  std::vector<std::string> argv = MpiexecCommand(*o, *s, "/w");
  EXPECT_THAT(ShellJoin(argv), HasSubstr("-rmk user -launcher slurm -hosts n1:2,n2:2 -n 4"));
}

TEST(ResolveTest, SageMakerFollowerStartsNothing) {
  auto o = Parse({"p"});
  MapEnvironment env{{"SM_HOSTS", "[\"algo-1\",\"algo-2\"]"}, {"SM_CURRENT_HOST", "algo-2"}};
  auto s = ResolveJob(*o, env, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->follower);
  EXPECT_EQ(s->leader, "algo-1");
  EXPECT_EQ(s->host_wait_s, kHostsStartApartWaitS);  // the leader may come up much later
}

// A SageMaker container's hostname is not its name in the job (and need not resolve): the other
// hosts' proxies connect back to the name the job gives it.
TEST(ResolveTest, SageMakerLeaderGivesMpiexecItsNameInTheJob) {
  MapEnvironment sm{{"SM_HOSTS", "[\"algo-1\",\"algo-2\"]"}, {"SM_CURRENT_HOST", "algo-1"}};
  auto o = Parse({"p"});
  auto s = ResolveJob(*o, sm, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->this_host, "algo-1");
  EXPECT_THAT(s->followers, ElementsAre("algo-2"));  // told the job's status at the end
  EXPECT_THAT(ShellJoin(MpiexecCommand(*o, *s, "/w")),
              HasSubstr("-localhost algo-1 -hosts algo-1:1,algo-2:1 -n 2"));
  auto given = ResolveJob(*Parse({"-H", "a:1,b:1", "p"}), MapEnvironment{}, NoFiles(), Probe(0));
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->this_host, "");
  EXPECT_THAT(given->followers, IsEmpty());
  EXPECT_THAT(ShellJoin(MpiexecCommand(*o, *given, "/w")), Not(HasSubstr("-localhost")));
}

// SageMaker names the interface between its instances; NCCL left alone may take another (a docker
// bridge). Every rank gets NCCL_SOCKET_IFNAME from the toolkit's variable or the resource config,
// on a restart's -H too; the job's own setting and -x win.
TEST(ResolveTest, SageMakersNetworkInterfaceIsNcclsSocketInterface) {
  const std::string config =
      R"({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"})";
  MapEnvironment sm{{"SM_RESOURCE_CONFIG", config}};
  auto o = Parse({"p"});
  auto s = ResolveJob(*o, sm, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(JobEnvironment(*o, *s), Contains(Pair("NCCL_SOCKET_IFNAME", "eth0")));
  auto restart = ResolveJob(*Parse({"-H", "algo-1:1,algo-2:1", "p"}), sm, NoFiles(), Probe(0));
  ASSERT_TRUE(restart.ok()) << restart.status();
  EXPECT_THAT(restart->env, ElementsAre(Pair("NCCL_SOCKET_IFNAME", "eth0")));

  MapEnvironment toolkit{{"SM_HOSTS", "[\"algo-1\",\"algo-2\"]"},
                         {"SM_CURRENT_HOST", "algo-1"},
                         {"SM_NETWORK_INTERFACE_NAME", "ens5"}};
  s = ResolveJob(*o, toolkit, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->env, ElementsAre(Pair("NCCL_SOCKET_IFNAME", "ens5")));

  MapEnvironment own = sm;
  own.Set("NCCL_SOCKET_IFNAME", "=ib0");
  s = ResolveJob(*o, own, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->env, IsEmpty());
  auto x = Parse({"-x", "NCCL_SOCKET_IFNAME=bond0", "p"});
  s = ResolveJob(*x, sm, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  const auto env = JobEnvironment(*x, *s);
  EXPECT_THAT(env, Contains(Pair("NCCL_SOCKET_IFNAME", "bond0")));
  EXPECT_THAT(env, Not(Contains(Pair("NCCL_SOCKET_IFNAME", "eth0"))));

  // A name that is no interface's is refused where the config is read.
  auto bad = ResolveJob(*o,
                        MapEnvironment{{"SM_RESOURCE_CONFIG",
                                        R"({"hosts": ["a"], "network_interface_name": "e th0;"})"}},
                        NoFiles(), Probe(0));
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("\"network_interface_name\" is not an interface"));
}

// --host-wait: SageMaker's and an MPIJob's hosts start apart, so their leader waits for the
// others by default; given hosts are taken to be up; the flag overrides either.
TEST(ResolveTest, HostWait) {
  MapEnvironment sm{{"SM_HOSTS", "[\"algo-1\",\"algo-2\"]"}, {"SM_CURRENT_HOST", "algo-1"}};
  auto s = ResolveJob(*Parse({"p"}), sm, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host_wait_s, kHostsStartApartWaitS);
  s = ResolveJob(*Parse({"--host-wait", "90", "p"}), sm, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host_wait_s, 90);
  s = ResolveJob(*Parse({"--host-wait", "0", "p"}), sm, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host_wait_s, 0);
  s = ResolveJob(*Parse({"-H", "a:1,b:1", "p"}), MapEnvironment{}, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host_wait_s, 0);
  s = ResolveJob(*Parse({"--host-wait", "30", "-H", "a:1,b:1", "p"}), MapEnvironment{}, NoFiles(),
                 Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host_wait_s, 30);
  EXPECT_THAT(Parse({"--host-wait", "soon", "p"}).status().message(), HasSubstr("--host-wait"));
  EXPECT_FALSE(s->own_name_in_dns);
  // An MPIJob's launcher also waits for its own name in DNS, which its workers' proxies use.
  s = ResolveJob(
      *Parse({"p"}),
      MapEnvironment{{"HYDRA_HOST_FILE", "/etc/mpi/hostfile"}, {"K_MPI_JOB_ROLE", "launcher"}},
      [](const std::string& path) -> absl::StatusOr<std::string> {
        if (path == "/etc/mpi/hostfile") return "w0:1\nw1:1\n";
        return absl::NotFoundError(path);
      },
      Probe(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->own_name_in_dns);
  EXPECT_EQ(s->host_wait_s, kHostsStartApartWaitS);
}

TEST(CommandTest, ExactMpiexecCommand) {
  auto o = Parse({"-np", "3", "-H", "h1:2,h2:2", "--launcher-exec", "/x/fakessh", "-x", "A=1", "--",
                  "prog", "it's"});
  ASSERT_TRUE(o.ok());
  o->mpiexec = "/usr/bin/mpiexec";
  auto s = ResolveJob(*o, MapEnvironment{}, NoFiles(), Probe(0));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(ShellJoin(MpiexecCommand(*o, *s, "/bin/hvxrun")),
            "/usr/bin/mpiexec -rmk user -launcher ssh -launcher-exec /x/fakessh -hosts h1:2,h2:1 "
            "-n 3 -prepend-pattern $'\\001hvx%r\\002' /bin/hvxrun --hvx-rank-wrapper --plan "
            "h1:2,h2:1 -- prog 'it'\\''s'");
  // The variables go in mpiexec's environment, never on its command line.
  EXPECT_THAT(JobEnvironment(*o, *s),
              ElementsAre(Pair("HVX_SIZE", "3"), Pair("HVX_TAGGED_OUTPUT", "1"), Pair("A", "1")));
}

// hvxrun's own probes never wait at a password prompt: ssh runs in batch mode; a --launcher-exec
// program is run as given.
TEST(CommandTest, RemoteCommandsRunInBatchMode) {
  LaunchOptions o;
  EXPECT_EQ(RemoteCommand(o, "h2", "true"),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "h2", "true"}));
  o.launcher_exec = "/usr/bin/rsh";
  EXPECT_EQ(RemoteCommand(o, "h2", "true"),
            (std::vector<std::string>{"/usr/bin/rsh", "h2", "true"}));
}

}  // namespace
}  // namespace launch
}  // namespace hvx
