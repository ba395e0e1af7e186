// For MPI tests that call the backend's building blocks without hvx's engine: linking this
// library initializes MPI (FUNNELED, the test's main thread makes every call) and the backend's
// reduction ops before the first test, and finalizes both after the last.
#include <mpi.h>

#include "gtest/gtest.h"
#include "hvx/mpi/mpi_collectives.h"

namespace hvx {
namespace {

class RawMpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int provided = 0;
    ASSERT_EQ(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), MPI_SUCCESS);
    ASSERT_TRUE(MpiOps::Get().Init().ok());
  }
  void TearDown() override {
    MpiOps::Get().Free();
    MPI_Finalize();
  }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new RawMpiEnvironment);

}  // namespace
}  // namespace hvx
