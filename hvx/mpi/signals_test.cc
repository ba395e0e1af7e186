// hvx::Init, initializing MPI itself, leaves the program's SIGUSR1 as it found it. MPICH's
// MPI_Init catches the signal, so a program that never asked for it stopped ending on it, and
// hvxrun's preemption notice (SIGUSR1) to a Python job left it running until --preempt-grace ran
// out (hvx/python/tests/deadline_test.sh checks that end to end).
#include <signal.h>

#include "gtest/gtest.h"
#include "hvx/core/api.h"

namespace hvx {
namespace {

TEST(SignalsTest, InitLeavesSigusr1ToTheProgram) {
  struct sigaction before = {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &before), 0);
  ASSERT_EQ(before.sa_handler, SIG_DFL) << "the test expects SIGUSR1 at its default action";
  ASSERT_TRUE(Init().ok());
  struct sigaction after = {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, SIG_DFL) << "SIGUSR1 no longer ends the program after hvx::Init";
  EXPECT_TRUE(Shutdown().ok());
}

}  // namespace
}  // namespace hvx
