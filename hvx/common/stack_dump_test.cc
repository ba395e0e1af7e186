#include "hvx/common/stack_dump.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace hvx {
namespace {

std::atomic<bool> g_release{false};

// A frame the dump must name.
__attribute__((noinline)) void WaitsInAFunctionNamedForTheTest() {
  while (!g_release.load()) usleep(1000);  // a signal cuts a sleep short: the loop goes on
  asm volatile("");
}

// What the pipe holds within `seconds`, read until it has `threads` thread headers.
std::string ReadDump(int fd, int threads, double seconds) {
  std::string text;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto count = [&] {
    int n = 0;
    for (size_t at = text.find("thread "); at != std::string::npos;
         at = text.find("\nthread ", at + 1))
      ++n;
    return n;
  };
  while (std::chrono::steady_clock::now() < end && count() < threads) {
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
    } else {
      usleep(2000);
    }
  }
  usleep(50000);  // and anything late
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  return text;
}

TEST(StackDumpTest, EveryThreadWritesItsNamedStackOncePerRound) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
  const int not_a_pipe = open("/dev/null", O_WRONLY | O_CLOEXEC);
  EXPECT_NE(InstallStackDumper(not_a_pipe), "");
  close(not_a_pipe);
  ASSERT_EQ(InstallStackDumper(p[1]), "");
  EXPECT_EQ(InstallStackDumper(p[1]), "");  // once
  std::thread waiter([] {
    pthread_setname_np(pthread_self(), "hvx-test-wait");
    WaitsInAFunctionNamedForTheTest();
  });
  std::thread idle([] {
    pthread_setname_np(pthread_self(), "hvx-test-idle");
    while (!g_release.load()) usleep(1000);
  });
  usleep(100000);
  ASSERT_EQ(kill(getpid(), StackSignal()), 0);
  const std::string dump = ReadDump(p[0], 3, 5);
  // The helper says how many threads it asked: every one but itself.
  EXPECT_NE(dump.find("signalled 3 threads\n"), std::string::npos) << dump;
  EXPECT_EQ(StackDumpFd(), p[1]);
  EXPECT_NE(dump.find(" hvx-test-wait\n"), std::string::npos) << dump;
  EXPECT_NE(dump.find(" hvx-test-idle\n"), std::string::npos) << dump;
  const size_t wait_at = dump.find(" hvx-test-wait\n");
  const size_t next = dump.find("\nthread ", wait_at);
  const std::string wait_block =
      dump.substr(wait_at, next == std::string::npos ? next : next - wait_at);
  EXPECT_NE(wait_block.find("WaitsInAFunctionNamedForTheTest"), std::string::npos) << dump;
  EXPECT_NE(wait_block.find("  #0 0x"), std::string::npos) << dump;
  // The handler's own frames are not in it, nor the helper thread that signals the others.
  EXPECT_EQ(dump.find("DumpThisThread"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("hvx-stacks"), std::string::npos) << dump;
  // Within the round, another request adds nothing; after it, a new round dumps again.
  ASSERT_EQ(kill(getpid(), StackSignal()), 0);
  EXPECT_EQ(ReadDump(p[0], 1, 0.3), "");
  usleep(1100000);
  ASSERT_EQ(kill(getpid(), StackSignal()), 0);
  EXPECT_NE(ReadDump(p[0], 3, 5).find("WaitsInAFunctionNamedForTheTest"), std::string::npos);
  g_release = true;
  waiter.join();
  idle.join();
  close(p[0]);
}

TEST(StackDumpTest, TheVariableMustNameAPipe) {
  setenv(kStackFdVariable, "not a number", 1);
  EXPECT_EQ(StackFdFromEnvironment(), -1);
  const int file = open("/dev/null", O_WRONLY);
  setenv(kStackFdVariable, std::to_string(file).c_str(), 1);
  EXPECT_EQ(StackFdFromEnvironment(), -1);
  close(file);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  setenv(kStackFdVariable, std::to_string(p[1]).c_str(), 1);
  EXPECT_EQ(StackFdFromEnvironment(), p[1]);
  unsetenv(kStackFdVariable);
  EXPECT_EQ(StackFdFromEnvironment(), -1);
}

}  // namespace
}  // namespace hvx
