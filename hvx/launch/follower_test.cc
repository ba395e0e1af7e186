// The SageMaker follower's view of this host (follower.h): which hydra proxies hold it.
#include "hvx/launch/follower.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/common/env.h"

namespace hvx {
namespace launch {
namespace {

// Runs a copy of sleep named hydra_pmi_proxy (its comm), as `uid` when not -1; returns its pid.
pid_t StartFakeProxy(const std::string& dir, uid_t uid) {
  const std::string proxy = dir + "/hydra_pmi_proxy";
  if (access(proxy.c_str(), X_OK) != 0) {
    EXPECT_EQ(std::system(("cp /bin/sleep " + proxy + " && chmod 755 " + proxy).c_str()), 0);
  }
  const pid_t pid = fork();
  if (pid == 0) {
    if (uid != static_cast<uid_t>(-1) && (setgid(uid) != 0 || setuid(uid) != 0)) _exit(126);
    execl(proxy.c_str(), "hydra_pmi_proxy", "30", nullptr);
    _exit(127);
  }
  return pid;
}

// Whether `pid` runs under the name hydra_pmi_proxy (its exec done), within 5 s.
bool Running(pid_t pid) {
  for (int k = 0; k < 500; ++k) {
    char comm[64] = {};
    FILE* f = fopen(absl::StrCat("/proc/", pid, "/comm").c_str(), "r");
    if (f != nullptr) {
      const bool named =
          fgets(comm, sizeof(comm), f) != nullptr && std::string(comm) == "hydra_pmi_proxy\n";
      fclose(f);
      if (named) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void Stop(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// Waits until HydraProxies() holds `pid` as `want` says, for up to 5 s (the exec must be done).
bool Seen(pid_t pid, bool want) {
  for (int k = 0; k < 500; ++k) {
    if ((HydraProxies().count(pid) != 0) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(FollowerTest, ThisUsersProxiesHoldTheHostAndAnotherUsersDoNot) {
  // In /tmp: another user must be able to run the copy (the test's own directory is private).
  char dir_template[] = "/tmp/hvx-follower-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  const pid_t mine = StartFakeProxy(dir, static_cast<uid_t>(-1));
  EXPECT_TRUE(Seen(mine, true)) << "this user's proxy " << mine << " was not seen";
  Stop(mine);
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a process as another user";
  // Before, any user's hydra_pmi_proxy kept a SageMaker follower waiting, without bound.
  const pid_t theirs = StartFakeProxy(dir, 65534);
  ASSERT_TRUE(Running(theirs)) << "the other user's proxy did not start";
  EXPECT_EQ(HydraProxies().count(theirs), 0u)
      << "another user's proxy " << theirs << " was counted";
  Stop(theirs);
  std::system(("rm -rf " + dir).c_str());
}

// SageMaker stops a job with SIGTERM to every container's PID 1, which drops a signal it has no
// handler for, and kills the container 120 s later. A follower (here, one whose leader never
// sends a status, signal ignored as PID 1 ignores it) now waits the leader's grace and stop
// timeout for the job's status, then ends with 128 + the signal, saying so.
TEST(FollowerTest, AStopRequestEndsTheWaitAfterTheLeadersGrace) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGTERM, SIG_IGN);  // as PID 1 of a container: no handler, no effect
    LaunchOptions options;
    options.preempt_grace_s = 1;
    options.stop_timeout_s = 1;
    options.start_timeout_s = 60;
    JobSetup setup;
    setup.follower = true;
    setup.leader = "algo-1";
    setup.this_host = "algo-2";
    setup.source = "SageMaker resource config (test)";
    setup.host_wait_s = 60;
    const MapEnvironment env{{"TRAINING_JOB_NAME", absl::StrCat("follower-test-", getpid())}};
    absl::StatusOr<int> rc = FollowLeader(options, setup, env);
    _exit(rc.ok() ? *rc : 100);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(child, SIGTERM), 0);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - signalled < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) {
    Stop(child);
    FAIL() << "the follower was still waiting 30 s after SIGTERM";
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
  EXPECT_GE(waited, 6.5);  // the leader's grace (1) + stop timeout (1) + 5 s to send the status
  EXPECT_LT(waited, 20);
}

}  // namespace
}  // namespace launch
}  // namespace hvx
