#include "hvx/launch/subprocess.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

TEST(RunCaptureTest, ReturnsTheOutputOfACommand) {
  auto out = RunCapture({"/bin/sh", "-c", "echo hosts; echo noise >&2"}, 30);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hosts\n");
}

TEST(RunCaptureTest, AFailingCommandSaysWhatItPrinted) {
  auto out = RunCapture({"/bin/sh", "-c", "echo 'no such host' >&2; exit 3"}, 30);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(out.status().message(), "no such host")) << out.status();
}

// A discovery script or remote probe that prints without end: hvxrun kept all of it until the
// deadline. Past 1 MiB on a stream the rest is dropped and the command fails, saying so.
TEST(RunCaptureTest, ACommandPrintingMoreThanTheBoundFails) {
  auto out = RunCapture({"/bin/sh", "-c", "head -c 3000000 /dev/zero"}, 60);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "printed 1 MiB or more on one stream"))
      << out.status();
  auto just_under = RunCapture({"/bin/sh", "-c", "head -c 1048575 /dev/zero"}, 60);
  ASSERT_TRUE(just_under.ok()) << just_under.status();
  EXPECT_EQ(just_under->size(), 1048575u);
}

// Spawn's error paths close what they opened: with two descriptors left under the limit, the
// second pipe fails, and the first one's two ends leaked on every try (hvxrun runs discovery
// and probes again and again, so a long job at its limit only got worse).
TEST(SpawnTest, AFailedSpawnLeavesNoDescriptorOpen) {
  const auto open_fds = [] {
    std::set<int> fds;
    DIR* d = opendir("/proc/self/fd");
    while (dirent* e = readdir(d)) {
      int fd;
      if (absl::SimpleAtoi(e->d_name, &fd) && fd != dirfd(d)) fds.insert(fd);
    }
    closedir(d);
    return fds;
  };
  const std::set<int> before = open_fds();
  // The limit under which exactly three descriptor numbers are free.
  int limit = 0;
  for (int free_numbers = 0; free_numbers < 3; ++limit) {
    if (before.count(limit) == 0) ++free_numbers;
  }
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(limit);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  std::vector<absl::Status> tries;
  for (int i = 0; i < 3; ++i) tries.push_back(Spawn({"true"}).status());
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  for (const absl::Status& s : tries) {
    EXPECT_TRUE(absl::StrContains(s.message(), "pipe")) << s;
  }
  EXPECT_EQ(open_fds(), before);
}

// A command that closes its output and goes on running ends at the deadline too: hvxrun waited
// for its exit without one (a discovery script that daemonizes hung hvxrun for good).
TEST(RunCaptureTest, ACommandThatClosesItsOutputAndRunsOnTimesOut) {
  const Clock::time_point start = Clock::now();
  auto out = RunCapture({"/bin/sh", "-c", "exec >&- 2>&-; sleep 60"}, 0.5);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded) << out.status();
  EXPECT_LT(Seconds(Clock::now() - start), 30.0);
}

TEST(RunCaptureTest, ACommandStillWritingAtTheDeadlineTimesOut) {
  auto out = RunCapture({"/bin/sh", "-c", "while :; do echo x; sleep 0.1; done"}, 0.5);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded) << out.status();
}

// One command per host, all at once: four that take 1 s each end within a 3 s bound (one after
// another they would not), and a host that hangs or fails spoils only its own place.
TEST(RunCaptureAllTest, RunsTheCommandsAtOnceEachResultInItsPlace) {
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < 4; ++i) {
    commands.push_back({"/bin/sh", "-c", "sleep 1; echo " + std::to_string(i)});
  }
  commands.push_back({"/bin/sh", "-c", "echo 'host down' >&2; exit 255"});
  commands.push_back({"/bin/sh", "-c", "exec >&- 2>&-; sleep 60"});
  commands.push_back({"/nonexistent/ssh", "host"});
  const Clock::time_point start = Clock::now();
  const std::vector<absl::StatusOr<std::string>> out = RunCaptureAll(commands, 3);
  const double took = Seconds(Clock::now() - start);
  ASSERT_EQ(out.size(), commands.size());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(out[i].ok()) << i << ": " << out[i].status();
    EXPECT_EQ(*out[i], std::to_string(i) + "\n");
  }
  EXPECT_EQ(out[4].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(out[4].status().message(), "host down")) << out[4].status();
  EXPECT_EQ(out[5].status().code(), absl::StatusCode::kDeadlineExceeded) << out[5].status();
  EXPECT_EQ(out[6].status().code(), absl::StatusCode::kUnavailable) << out[6].status();
  EXPECT_GE(took, 2.9);  // the hanging one held to the bound
  EXPECT_LT(took, 20.0);
  EXPECT_TRUE(RunCaptureAll({}, 1).empty());
}

}  // namespace
}  // namespace launch
}  // namespace hvx

namespace hvx {
namespace launch {
namespace {

// All of the child's stdout, once it closes; closes both pipes.
std::string ReadOutput(Child& c) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(c.out, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(c.out);
  close(c.err);
  return out;
}

// Whether pid is a live process (not gone, not a zombie).
bool Alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

TEST(SpawnTest, WhatAChildLeavesRunningComesToASubreaperThatEndsIt) {
  // The child starts a job in a session of its own (as hydra starts its ssh clients), prints its
  // pid and exits: a group or session kill of the child misses it; as a subreaper, this process
  // gets it and ends it.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  auto c = Spawn({"/bin/sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string out = ReadOutput(*c);
  int status = 0;
  ASSERT_EQ(waitpid(c->pid, &status, 0), c->pid);
  pid_t left = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &left)) << out;
  for (int i = 0; i < 200 && getsid(left) != left; ++i) usleep(10000);  // setsid has run
  ASSERT_TRUE(Alive(left));
  EXPECT_NE(getsid(left), c->pid);
  EXPECT_EQ(EndLeftoverChildren(/*grace_s=*/1), 1);
  EXPECT_FALSE(Alive(left));
  EXPECT_EQ(EndLeftoverChildren(1), 0);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

// What the process had before the job is not the job's to end: a container's entry point starts
// sshd and becomes hvxrun (PID 1), so the daemon is hvxrun's child, and it was ended after every
// attempt ("ended 1 process(es) the job left running") while the other hosts still needed it.
TEST(SpawnTest, ChildrenFromBeforeTheJobAreKept) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const auto orphan = [] {  // a daemon that comes to this process, as sshd does to PID 1
    auto c = Spawn({"/bin/sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"});
    EXPECT_TRUE(c.ok()) << c.status();
    const std::string out = ReadOutput(*c);
    waitpid(c->pid, nullptr, 0);
    pid_t pid = 0;
    EXPECT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &pid)) << out;
    for (int i = 0; i < 200 && getsid(pid) != pid; ++i) usleep(10000);
    return pid;
  };
  const pid_t daemon = orphan();
  std::set<pid_t> before;
  for (pid_t pid : LiveChildren()) before.insert(pid);
  EXPECT_EQ(before.count(daemon), 1u);
  const pid_t leftover = orphan();
  EXPECT_EQ(EndLeftoverChildren(/*grace_s=*/1, before), 1);
  EXPECT_FALSE(Alive(leftover));
  EXPECT_TRUE(Alive(daemon));
  EXPECT_EQ(EndLeftoverChildren(1), 1);  // without `keep`, it goes too
  EXPECT_FALSE(Alive(daemon));
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(SpawnTest, AChildLeadsASessionOfItsOwn) {
  // No controlling terminal: an ssh it runs fails instead of waiting at a password prompt.
  auto c = Spawn({"/bin/sh", "-c", "ps -o sid= -p $$"});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string out = ReadOutput(*c);
  waitpid(c->pid, nullptr, 0);
  EXPECT_EQ(absl::StripAsciiWhitespace(out), std::to_string(c->pid));
}

}  // namespace
}  // namespace launch
}  // namespace hvx
