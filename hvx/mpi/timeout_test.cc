// Waits for peers end at the communicator's collective timeout with an error naming who did not
// answer, instead of hanging; a rank-local failure before a collective fails every rank.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "hvx/mpi/mpi_collectives.h"

namespace hvx {
namespace {

TEST(TimeoutTest, AWaitForAPeerThatNeverSendsEndsAtTheTimeout) {
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  SetCollectiveTimeout(comm, absl::Milliseconds(500));
  EXPECT_EQ(CollectiveTimeout(comm), absl::Milliseconds(500));
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    int x = 0;
    MPI_Request q;
    MPI_Irecv(&x, 1, MPI_INT, 1, 99, comm, &q);
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = WaitPolitely(comm, 1, &q, "test receive", kDataWait, {1});
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_EQ(s.message(),
              "test receive did not complete within 500ms (HVX_COLLECTIVE_TIMEOUT_S): global rank "
              "1 did not answer; "
              "a rank failed, froze or is waiting in another collective");
    EXPECT_GE(waited, 0.5);
    EXPECT_LT(waited, 3.0);
    // Let the receive complete so the communicator can be freed.
    int one = 1;
    MPI_Send(&one, 1, MPI_INT, 1, 100, comm);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
  } else {
    int go = 0;
    MPI_Recv(&go, 1, MPI_INT, 0, 100, comm, MPI_STATUS_IGNORE);
    MPI_Send(&go, 1, MPI_INT, 0, 99, comm);
  }
  // A split communicator has no timeout until given one; a dup inherits it.
  MPI_Comm dup;
  MPI_Comm_dup(comm, &dup);
  EXPECT_EQ(CollectiveTimeout(dup), absl::Milliseconds(500));
  MPI_Comm_free(&dup);
  MPI_Comm_free(&comm);
}

TEST(TimeoutTest, ACollectiveWithoutTheOtherRankNamesTheSet) {
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  SetCollectiveTimeout(comm, absl::Milliseconds(300));
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    MPI_Request q;
    MPI_Ibarrier(comm, &q);
    absl::Status s = WaitPolitely(comm, 1, &q, "MPI_Ibarrier", kControlWait);
    EXPECT_TRUE(absl::StrContains(s.message(), "not every one of global ranks 0-1 took part")) << s;
    int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, 101, MPI_COMM_WORLD);  // now rank 1 joins the barrier
    MPI_Wait(&q, MPI_STATUS_IGNORE);
  } else {
    int go = 0;
    MPI_Recv(&go, 1, MPI_INT, 0, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Request q;  // blocking and nonblocking collectives do not match each other
    MPI_Ibarrier(comm, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm);
}

TEST(TimeoutTest, ALocalFailureFailsEveryRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_TRUE(AgreeOnEveryRank(MPI_COMM_WORLD, absl::OkStatus()).ok());
  const absl::Status local =
      rank == 1 ? absl::ResourceExhaustedError("mmap of 64 MiB failed") : absl::OkStatus();
  absl::Status s = AgreeOnEveryRank(MPI_COMM_WORLD, local);
  if (rank == 1) {
    EXPECT_EQ(s, local);
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(), "global rank 1 failed: mmap of 64 MiB failed");
  }
}

// A peer's lengths are checked before anything is sized by them: a broken or hostile peer (here
// rank 1, speaking the protocol by hand) that announces a negative length for its part of a
// control allgather, or for its error message, made rank 0 allocate from the wrapped number (a
// std::length_error out of the engine thread); it gets DataLoss naming that peer now.
TEST(TimeoutTest, APeersNegativeLengthIsRefused) {
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  SetCollectiveTimeout(comm, absl::Seconds(30));
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    std::vector<std::string> all;
    absl::Status s = AllgatherStrings(comm, "rank 0's part", &all);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(s.message(), "control allgather: global rank 1 announced a negative length (-5)");
    s = AgreeOnEveryRank(comm, absl::OkStatus());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(s.message(),
              "agreeing on a local step: global rank 1 failed and announced a -1-byte message");
  } else {
    // Nonblocking, as hvx's own calls: MPI matches no blocking collective with them.
    MPI_Request q;
    int lens[2], len = -5;
    MPI_Iallgather(&len, 1, MPI_INT, lens, 1, MPI_INT, comm, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    int failing = 1;
    MPI_Iallreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, comm, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    int64_t message_len = -1;
    MPI_Ibcast(&message_len, 1, MPI_INT64_T, 1, comm, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace hvx
