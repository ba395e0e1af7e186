// A program that initialized MPI itself at a thread level below MPI_THREAD_SERIALIZED (here
// FUNNELED, by raw_mpi_test_environment) cannot host hvx, whose background thread makes every MPI
// call: hvx::Init says so and how to fix it instead of calling MPI from the wrong thread.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hvx/core/api.h"

namespace hvx {
namespace {

TEST(ThreadLevelTest, InitRefusesAProgramsFunneledMpi) {
  absl::Status s = Init();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), "the program initialized MPI with thread level MPI_THREAD_FUNNELED"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided)"))
      << s;
  EXPECT_FALSE(IsInitialized());
}

}  // namespace
}  // namespace hvx
