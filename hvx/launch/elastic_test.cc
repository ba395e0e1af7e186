#include "hvx/launch/elastic.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

std::string EnvOf(const LaunchOptions& o, const std::string& name) {
  for (const auto& [k, v] : o.env) {
    if (k == name) return v;
  }
  return "";
}

// The restart loop over scripted attempts: each entry says how attempt k ends. What hvxrun
// printed is read back from its err_fd.
class ElasticLoop {
 public:
  struct Attempt {
    int rc = 0;
    AttemptOutcome outcome;
  };

  explicit ElasticLoop(std::vector<Attempt> script) : script_(std::move(script)) {
    err_ = std::tmpfile();
    options_.program = {"train"};
    options_.err_fd = fileno(err_);
    steps_.candidate_hosts = [this]() -> absl::StatusOr<std::vector<Host>> { return hosts_; };
    steps_.resolve = [](const LaunchOptions& next) -> absl::StatusOr<JobSetup> {
      JobSetup setup;
      setup.source = "-H " + next.hosts;
      return setup;
    };
    steps_.run_attempt = [this](const LaunchOptions& next, const JobSetup&, AttemptOutcome* out,
                                std::function<std::string()>) -> absl::StatusOr<int> {
      ran_.push_back(next);
      if (ran_.size() > script_.size()) return absl::InternalError("more attempts than scripted");
      *out = script_[ran_.size() - 1].outcome;
      return script_[ran_.size() - 1].rc;
    };
    steps_.unreachable = [this](const std::vector<std::string>& hosts) {
      asked_unreachable_.push_back(hosts);
      std::vector<std::string> gone;
      for (const std::string& h : hosts) {
        if (h == dead_host_) gone.push_back(h);
      }
      return gone;
    };
  }
  ~ElasticLoop() { std::fclose(err_); }

  absl::StatusOr<int> Run() { return RunElastic(options_, JobSetup(), "run-1", steps_); }

  std::string Printed() {
    std::fflush(err_);
    std::string text;
    char buf[4096];
    std::rewind(err_);
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), err_)) > 0) text.append(buf, n);
    return text;
  }

  LaunchOptions options_;
  std::vector<Host> hosts_ = {{"h1", 2}, {"h2", 2}, {"h3", 2}};
  std::string dead_host_;
  std::vector<LaunchOptions> ran_;
  std::vector<std::vector<std::string>> asked_unreachable_;

 private:
  std::vector<Attempt> script_;
  ElasticSteps steps_;
  std::FILE* err_;
};

AttemptOutcome RankFailedOn(const std::string& host) {
  AttemptOutcome o;
  o.restartable = true;
  o.cause = "rank 4 on host " + host + " exited with status 3";
  o.fault_hosts = {host};
  return o;
}

TEST(ElasticTest, ARestartRunsOnTheHostsLeftAndSucceeds) {
  ElasticLoop loop({{3, RankFailedOn("h3")}, {0, {}}});
  loop.options_.max_restarts = 2;
  auto rc = loop.Run();
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, 0);
  ASSERT_EQ(loop.ran_.size(), 2u);
  EXPECT_EQ(loop.ran_[0].hosts, "h1:2,h2:2,h3:2");
  EXPECT_EQ(EnvOf(loop.ran_[0], "HVX_RESTART_COUNT"), "0");
  // --host-failure-limit 1: h3 is out of the second attempt.
  EXPECT_EQ(loop.ran_[1].hosts, "h1:2,h2:2");
  EXPECT_EQ(loop.ran_[1].np, 4);
  EXPECT_EQ(EnvOf(loop.ran_[1], "HVX_RESTART_COUNT"), "1");
  EXPECT_EQ(EnvOf(loop.ran_[1], "HVX_RUN_ID"), "run-1");
  EXPECT_TRUE(absl::StrContains(
      loop.Printed(),
      "hvxrun: restart 1 of 2: rank 4 on host h3 exited with status 3; excluded h3"))
      << loop.Printed();
}

TEST(ElasticTest, GivesUpAfterMaxRestartsWithTheLastStatus) {
  ElasticLoop loop({{3, RankFailedOn("h1")}, {5, RankFailedOn("h2")}});
  loop.options_.max_restarts = 1;
  loop.options_.host_failure_limit = 5;
  auto rc = loop.Run();
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, 5);
  EXPECT_EQ(loop.ran_.size(), 2u);
  EXPECT_TRUE(absl::StrContains(loop.Printed(),
                                "hvxrun: giving up after 1 restart (--max-restarts 1): rank 4 on "
                                "host h2 exited with status 3"))
      << loop.Printed();
}

TEST(ElasticTest, AnEndThatARestartCannotHelpEndsTheJob) {
  AttemptOutcome signalled;  // a signal to hvxrun, --timeout: not restartable
  ElasticLoop loop({{143, signalled}});
  loop.options_.max_restarts = 3;
  auto rc = loop.Run();
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, 143);
  EXPECT_EQ(loop.ran_.size(), 1u);
}

TEST(ElasticTest, ARestartToGrowIsNotCountedAgainstMaxRestarts) {
  AttemptOutcome grow;
  grow.restartable = true;
  grow.grow = true;
  grow.cause = "the discovery script listed more slots (np 6 on h1:2,h2:2,h3:2)";
  ElasticLoop loop({{0, grow}, {3, RankFailedOn("h2")}, {0, {}}});
  loop.options_.max_restarts = 1;
  loop.options_.host_failure_limit = 2;
  auto rc = loop.Run();
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, 0);
  ASSERT_EQ(loop.ran_.size(), 3u);
  const std::string printed = loop.Printed();
  EXPECT_TRUE(absl::StrContains(printed, "hvxrun: restart to grow: the discovery script listed"))
      << printed;
  EXPECT_TRUE(absl::StrContains(printed, "hvxrun: restart 1 of 1: rank 4 on host h2")) << printed;
}

TEST(ElasticTest, AHostThatDoesNotAnswerAfterALostJobIsTheOneToBlame) {
  AttemptOutcome lost;
  lost.restartable = true;
  lost.cause = "mpiexec ended before the ranks reported their exit";
  lost.lost_hosts = {"h2", "h3"};
  ElasticLoop loop({{1, lost}, {0, {}}});
  loop.options_.max_restarts = 1;
  loop.dead_host_ = "h3";
  auto rc = loop.Run();
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_EQ(loop.asked_unreachable_.size(), 1u);
  EXPECT_EQ(loop.asked_unreachable_[0], (std::vector<std::string>{"h2", "h3"}));
  ASSERT_EQ(loop.ran_.size(), 2u);
  EXPECT_EQ(loop.ran_[1].hosts, "h1:2,h2:2");
  EXPECT_TRUE(absl::StrContains(loop.Printed(),
                                "mpiexec ended before the ranks reported their exit; host h3 "
                                "does not answer"))
      << loop.Printed();
}

TEST(ElasticTest, TooFewSlotsLeftEndsTheJobWithTheLastStatus) {
  ElasticLoop loop({{3, RankFailedOn("h1")}});
  loop.options_.max_restarts = 2;
  loop.options_.min_np = 6;  // without h1, 4 slots are left
  auto rc = loop.Run();
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, 3);
  EXPECT_EQ(loop.ran_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(loop.Printed(), "hvxrun: cannot restart: ")) << loop.Printed();
}

}  // namespace
}  // namespace launch
}  // namespace hvx
