// The MPICH control plane on two ranks: results of each collective, and that a rank waiting for a
// late peer sleeps instead of polling (MPICH polls busily inside blocking calls, which took a core
// from the training threads of every rank that finished its backward pass first).
#include <mpi.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/mpi/mpi_transport.h"
#include "hvx/shm/cpu_plane.h"

namespace hvx {
namespace {

std::unique_ptr<Communicator> World() {
  MPI_Comm comm;
  EXPECT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  return MakeMpiCommunicator(comm);
}

// The shared-memory vote over `comm` (both ranks run on this host), as the engine makes it.
std::unique_ptr<HostVote> ShmVote(Communicator& comm) {
  static const InitOptions options;
  DataPlaneContext ctx;
  ctx.comm = &comm;
  ctx.global_ranks = {0, 1};
  ctx.hosts = {"this host", "this host"};
  ctx.global_rank = comm.rank();
  ctx.options = &options;
  absl::StatusOr<std::unique_ptr<HostVote>> vote = MakeShmHostVote(ctx);
  EXPECT_TRUE(vote.ok()) << vote.status();
  EXPECT_NE(vote.ok() ? vote->get() : nullptr, nullptr);
  return vote.ok() ? std::move(*vote) : nullptr;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Runs `op` on every rank, rank 1 after a pause; on rank 0 returns the share of its wall time that
// the calling thread spent on a CPU.
template <typename Op>
double CpuShareWhileWaiting(Communicator& comm, Op op) {
  constexpr auto kLate = std::chrono::milliseconds(800);
  EXPECT_TRUE(comm.Barrier().ok());
  if (comm.rank() == 1) std::this_thread::sleep_for(kLate);
  const auto start = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  op();
  const double cpu = ThreadCpuSeconds() - cpu0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (comm.rank() == 0) {
    EXPECT_GE(wall, 0.7) << "rank 0 did not wait for rank 1";
    std::printf("rank 0 waited %.3f s, on a CPU %.4f s\n", wall, cpu);
  }
  return wall > 0 ? cpu / wall : 0;
}

// A polling wait spends its whole wait on a CPU (on a loaded machine its fair share of one, still
// well over 10%); a sleeping one a few percent at most.
constexpr double kMaxCpuShare = 0.10;

TEST(ControlPlaneTest, EveryCollectiveSleepsWhileAPeerIsLate) {
  auto comm = World();
  const int rank = comm->rank();

  const double barrier = CpuShareWhileWaiting(*comm, [&] { EXPECT_TRUE(comm->Barrier().ok()); });

  std::vector<uint64_t> bits = {rank == 0 ? 0b1110u : 0b0111u, ~uint64_t{0}};
  const double band =
      CpuShareWhileWaiting(*comm, [&] { EXPECT_TRUE(comm->BitwiseAnd(&bits).ok()); });
  EXPECT_EQ(bits[0], 0b0110u);
  EXPECT_EQ(bits[1], ~uint64_t{0});
  std::unique_ptr<HostVote> vote = ShmVote(*comm);
  ASSERT_NE(vote, nullptr);
  bits = {rank == 0 ? 0b1100u : 0b0101u};
  const double shm_band = CpuShareWhileWaiting(*comm, [&] { EXPECT_TRUE(vote->And(&bits).ok()); });
  EXPECT_EQ(bits[0], 0b0100u);

  // One small message and one over MPICH's eager limit.
  std::vector<std::string> all;
  const std::string mine(rank == 0 ? 3 : 70000, static_cast<char>('a' + rank));
  const double gather =
      CpuShareWhileWaiting(*comm, [&] { EXPECT_TRUE(comm->Gather(mine, &all).ok()); });
  if (rank == 0) {
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0], std::string(3, 'a'));
    EXPECT_EQ(all[1], std::string(70000, 'b'));
  } else {
    EXPECT_TRUE(all.empty());
  }

  std::string message = rank == 0 ? std::string(100000, 'r') : "stale";
  const double bcast =
      CpuShareWhileWaiting(*comm, [&] { EXPECT_TRUE(comm->Broadcast(&message).ok()); });
  EXPECT_EQ(message, std::string(100000, 'r'));

  const double allgather =
      CpuShareWhileWaiting(*comm, [&] { EXPECT_TRUE(comm->Allgather(mine, &all).ok()); });
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], std::string(3, 'a'));
  EXPECT_EQ(all[1], std::string(70000, 'b'));

  if (rank == 0) {
    EXPECT_LT(barrier, kMaxCpuShare) << "Barrier";
    EXPECT_LT(band, kMaxCpuShare) << "BitwiseAnd";
    EXPECT_LT(shm_band, kMaxCpuShare) << "the shared-memory vote";
    EXPECT_LT(gather, kMaxCpuShare) << "Gather";
    EXPECT_LT(bcast, kMaxCpuShare) << "Broadcast";
    EXPECT_LT(allgather, kMaxCpuShare) << "Allgather";
  }
}

// The vote ANDs every rank's words whichever way it goes: through shared memory on one host (up
// to 1024 words), and over MPI (BitwiseAnd); the ranks interleave their votes unevenly, and votes
// of the shared-memory group and of two communicators do not mix.
TEST(ControlPlaneTest, EveryVoteIsTheAndOfBothRanksWords) {
  auto shm = World();
  auto mpi = World();
  std::unique_ptr<HostVote> host_vote = ShmVote(*shm);
  ASSERT_NE(host_vote, nullptr);
  ASSERT_EQ(host_vote->MaxWords(), 1024u);
  const int rank = shm->rank();
  auto words = [](int r, int vote, size_t n) {
    std::mt19937_64 gen(static_cast<uint64_t>(vote) * 7 + static_cast<uint64_t>(r));
    std::vector<uint64_t> w(n);
    for (uint64_t& x : w) x = gen() | gen();
    return w;
  };
  std::mt19937 jitter(rank);
  const size_t sizes[] = {1, 33, 1024, 1025, 4000};
  for (int vote = 0; vote < 60; ++vote) {
    const size_t n = sizes[vote % 5];
    Communicator& comm = vote % 3 == 2 ? *mpi : *shm;
    if (jitter() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 500));
    std::vector<uint64_t> bits = words(rank, vote, n);
    if (&comm == shm.get() && n <= host_vote->MaxWords()) {
      ASSERT_TRUE(host_vote->And(&bits).ok()) << "vote " << vote;
    } else {
      ASSERT_TRUE(comm.BitwiseAnd(&bits).ok()) << "vote " << vote;
    }
    std::vector<uint64_t> want = words(0, vote, n);
    const std::vector<uint64_t> theirs = words(1, vote, n);
    for (size_t i = 0; i < n; ++i) want[i] &= theirs[i];
    ASSERT_EQ(bits, want) << "vote " << vote << " of " << n << " words";
  }
}

// Point-to-point bytes arrive whole and in sending order, small ones and ones over MPICH's eager
// limit, while both ranks send before either receives; Flush completes the sends.
TEST(ControlPlaneTest, PointToPointBytesArriveInOrder) {
  auto comm = World();
  const int rank = comm->rank();
  const int peer = 1 - rank;
  const size_t sizes[] = {0, 1, 100, 70000, 1 << 20};
  std::vector<std::string> out;
  for (size_t i = 0; i < 5; ++i) out.emplace_back(sizes[i], static_cast<char>('a' + rank * 5 + i));
  for (const std::string& m : out) ASSERT_TRUE(comm->Send(peer, m.data(), m.size()).ok());
  for (size_t i = 0; i < 5; ++i) {
    std::string in(sizes[i], '?');
    ASSERT_TRUE(comm->Recv(peer, in.data(), in.size()).ok()) << "message " << i;
    EXPECT_EQ(in, std::string(sizes[i], static_cast<char>('a' + peer * 5 + i))) << "message " << i;
  }
  EXPECT_TRUE(comm->Flush().ok());
  EXPECT_TRUE(comm->Flush().ok());  // nothing left to complete
}

}  // namespace
}  // namespace hvx
