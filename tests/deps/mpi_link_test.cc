// Proves that @hvx_mpi links and that two ranks really talk: an allreduce and a rank check.
#include <mpi.h>

#include "gtest/gtest.h"

namespace {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { ASSERT_EQ(MPI_Init(nullptr, nullptr), MPI_SUCCESS); }
  void TearDown() override { MPI_Finalize(); }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

TEST(MpiLinkTest, TwoRanksAllreduce) {
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 2);
  int value = rank + 1, sum = 0;
  ASSERT_EQ(MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(sum, 3);
}

}  // namespace
