#include "hvx/launch/restarts.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

std::vector<Host> ThreeHosts() { return {{"h1", 2}, {"h2", 2}, {"h3", 2}}; }

std::string EnvOf(const LaunchOptions& o, const std::string& name) {
  for (const auto& [k, v] : o.env) {
    if (k == name) return v;
  }
  return "";
}

TEST(RestartsTest, TheFirstAttemptTakesEverySlotUpToTheCap) {
  LaunchOptions base;
  base.program = {"train"};
  auto a = PlanAttempt(base, ThreeHosts(), HostHealth(), 0, "abc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->hosts, "h1:2,h2:2,h3:2");
  EXPECT_EQ(a->np, 6);
  EXPECT_EQ(EnvOf(*a, "HVX_RESTART_COUNT"), "0");
  EXPECT_EQ(EnvOf(*a, "HVX_RUN_ID"), "abc");
  base.np = 4;  // asked for 4: never more
  EXPECT_EQ(PlanAttempt(base, ThreeHosts(), HostHealth(), 0, "abc")->np, 4);
  base.max_np = 5;  // --max-np wins over -np when hosts come and go
  EXPECT_EQ(PlanAttempt(base, ThreeHosts(), HostHealth(), 0, "abc")->np, 5);
}

TEST(RestartsTest, AFailedHostIsExcludedAtTheLimit) {
  LaunchOptions base;
  base.program = {"train"};
  HostHealth health;
  RecordHostFailure("h3", "rank 5 on host h3 was killed by signal 9", 2, &health);
  EXPECT_TRUE(health.excluded.empty());  // 1 of 2
  auto a = PlanAttempt(base, ThreeHosts(), health, 1, "abc");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->hosts, "h1:2,h2:2,h3:2");
  RecordHostFailure("h3", "rank 4 on host h3 exited with status 3", 2, &health);
  ASSERT_EQ(health.excluded.count("h3"), 1u);
  EXPECT_EQ(health.excluded["h3"],
            "rank 4 on host h3 exited with status 3 (failure 2 of this host)");
  a = PlanAttempt(base, ThreeHosts(), health, 2, "abc");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->hosts, "h1:2,h2:2");
  EXPECT_EQ(a->np, 4);
  EXPECT_EQ(EnvOf(*a, "HVX_RESTART_COUNT"), "2");
  EXPECT_EQ(RestartLine(2, 3, "rank 4 on host h3 exited with status 3", health, *a),
            "restart 2 of 3: rank 4 on host h3 exited with status 3; excluded h3 (2 failures); "
            "new plan: np 4 on h1:2,h2:2");
}

TEST(RestartsTest, TooFewSlotsEndTheJobNamingTheExcludedHosts) {
  LaunchOptions base;
  base.program = {"train"};
  base.min_np = 5;
  HostHealth health;
  RecordHostFailure("h3", "rank 5 on host h3 was killed by signal 9", 1, &health);
  auto a = PlanAttempt(base, ThreeHosts(), health, 1, "abc");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.status().message(),
            "only 4 usable slots on h1:2,h2:2, fewer than --min-np 5; excluded: h3 (rank 5 on "
            "host h3 was killed by signal 9)");
}

// A discovery script's output gets the checks -H gets: 1e8 slots would plan 1e8 ranks.
TEST(RestartsTest, DiscoveredHostsAreValidated) {
  EXPECT_TRUE(absl::StrContains(ParseDiscoveredHosts("h:100000000\n", "/d.sh").status().message(),
                                "has 100000000 slots; a host has at most 4096"));
  EXPECT_TRUE(absl::StrContains(ParseDiscoveredHosts("h:1\nh:2\n", "/d.sh").status().message(),
                                "duplicate host 'h' (entries 1 and 2) in --host-discovery-script"));
  EXPECT_TRUE(absl::StrContains(ParseDiscoveredHosts("-oX:1\n", "/d.sh").status().message(),
                                "malformed host entry '-oX:1'"));
}

TEST(RestartsTest, DiscoveredHostsNeedSlots) {
  auto hosts = ParseDiscoveredHosts("h1:2\n# spare\nh2 slots=4\n", "/d.sh");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts, (std::vector<Host>{{"h1", 2}, {"h2", 4}}));
  EXPECT_TRUE(absl::StrContains(ParseDiscoveredHosts("h1\n", "/d.sh").status().message(),
                                "host 'h1' has no slot count"));
  // The MPI Operator's discover_hosts.sh prints bare names: slots from the job's hostfile, else
  // --slots-per-host.
  const std::map<std::string, int> hostfile = {{"job-worker-0.job.ns.svc", 4}};
  hosts = ParseDiscoveredHosts("job-worker-0.job.ns.svc\njob-worker-1.job.ns.svc:2\n", "/d.sh",
                               hostfile);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts,
            (std::vector<Host>{{"job-worker-0.job.ns.svc", 4}, {"job-worker-1.job.ns.svc", 2}}));
  hosts = ParseDiscoveredHosts("a\njob-worker-0.job.ns.svc\n", "/d.sh", hostfile, 1);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts, (std::vector<Host>{{"a", 1}, {"job-worker-0.job.ns.svc", 4}}));
  EXPECT_TRUE(absl::StrContains(
      ParseDiscoveredHosts("a\n", "/d.sh", hostfile).status().message(),
      "host 'a' has no slot count (print a:SLOTS, list it in the job's hostfile, or give "
      "--slots-per-host)"));
  EXPECT_TRUE(
      absl::StrContains(ParseDiscoveredHosts("\n", "/d.sh").status().message(), "no hosts"));
}

TEST(RestartsTest, RunIdsDiffer) {
  const std::string a = NewRunId(), b = NewRunId();
  EXPECT_EQ(a.size(), 16u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace launch
}  // namespace hvx
