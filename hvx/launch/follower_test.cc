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

}  // namespace
}  // namespace launch
}  // namespace hvx
