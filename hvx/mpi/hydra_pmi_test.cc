// HydraPmi against a PMI-1 peer on a socketpair, and the choice of when to use it. The whole path
// under a real hydra over TCP is tests/multihost:tcp_test.
#include "hvx/mpi/hydra_pmi.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "hvx/common/clock.h"
#include "hvx/mpi/mpi_transport.h"

namespace hvx {
namespace {

TEST(HydraPmiTest, OnlyUnderHydrasPmi1) {
  EXPECT_TRUE(HydraPmi::FromEnvironment(MapEnvironment({{"PMI_FD", "7"}, {"MPI_LOCALRANKID", "0"}}))
                  .has_value());
  EXPECT_TRUE(HydraPmi::FromEnvironment(
                  MapEnvironment(
                      {{"PMI_FD", "7"}, {"MPI_LOCALRANKID", "1"}, {"MPIR_CVAR_PMI_VERSION", "1"}}))
                  .has_value());
  // srun's PMI-2 sets PMI_FD but not hydra's MPI_LOCALRANKID; PMI-2 speaks another wire format.
  EXPECT_FALSE(HydraPmi::FromEnvironment(MapEnvironment({{"PMI_FD", "7"}})).has_value());
  EXPECT_FALSE(HydraPmi::FromEnvironment(
                   MapEnvironment(
                       {{"PMI_FD", "7"}, {"MPI_LOCALRANKID", "0"}, {"MPIR_CVAR_PMI_VERSION", "2"}}))
                   .has_value());
  EXPECT_FALSE(
      HydraPmi::FromEnvironment(MapEnvironment({{"PMI_FD", "x"}, {"MPI_LOCALRANKID", "0"}}))
          .has_value());
  EXPECT_FALSE(HydraPmi::FromEnvironment(MapEnvironment({{"MPI_LOCALRANKID", "0"}})).has_value());
}

TEST(HydraPmiTest, MpichBefore42) {
  EXPECT_TRUE(MpichFinalizeMayDeadlock("MPICH Version:\t4.0.2\nMPICH Release date: ..."));
  EXPECT_TRUE(MpichFinalizeMayDeadlock("MPICH Version:    \t4.1.2\n"));
  EXPECT_TRUE(MpichFinalizeMayDeadlock("MPICH Version:\t3.4.3\n"));
  EXPECT_FALSE(MpichFinalizeMayDeadlock("MPICH Version:\t4.2.0\n"));
  EXPECT_FALSE(MpichFinalizeMayDeadlock("MPICH Version:\t4.2rc1\n"));
  EXPECT_FALSE(MpichFinalizeMayDeadlock("MPICH Version:\t5.0.0\n"));
  EXPECT_FALSE(MpichFinalizeMayDeadlock("Open MPI v4.1.4, package: Debian OpenMPI"));
}

class PeerTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    if (peer_.joinable()) peer_.join();
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  // The peer reads `lines` command lines (recording them) and answers each with the next reply.
  void Serve(std::vector<std::string> replies) {
    peer_ = std::thread([this, replies] {
      std::string in;
      for (const std::string& reply : replies) {
        char c;
        while (read(fds_[1], &c, 1) == 1 && c != '\n') in.push_back(c);
        received_ += in + "|";
        in.clear();
        absl::SleepFor(absl::Milliseconds(20));
        if (write(fds_[1], reply.data(), reply.size()) != static_cast<ssize_t>(reply.size()))
          return;
      }
    });
  }
  int fds_[2] = {-1, -1};
  std::thread peer_;
  std::string received_;
};

TEST_F(PeerTest, BarrierThenFinalizeWhileProgressing) {
  // Replies may arrive in pieces and together.
  Serve({"cmd=barrier_out\n", "cmd=finalize_ack\n"});
  HydraPmi pmi(fds_[0]);
  int progress_calls = 0;
  absl::Status s = pmi.Leave(MonotonicNow() + absl::Seconds(10), [&] { ++progress_calls; });
  ASSERT_TRUE(s.ok()) << s;
  peer_.join();
  EXPECT_EQ(received_, "cmd=barrier_in|cmd=finalize|");
  EXPECT_GT(progress_calls, 5);  // each reply came 20 ms later, polled every 1 ms
}

TEST_F(PeerTest, UnexpectedReply) {
  Serve({"cmd=barrier_out\n", "cmd=finalize_ack rc=-1\n"});
  HydraPmi pmi(fds_[0]);
  EXPECT_TRUE(
      pmi.Exchange("cmd=barrier_in", "cmd=barrier_out", MonotonicNow() + absl::Seconds(10), [] {})
          .ok());
  absl::Status s =
      pmi.Exchange("cmd=finalize", "cmd=finalize_nak", MonotonicNow() + absl::Seconds(10), [] {});
  EXPECT_EQ(
      s.message(),
      "PMI 'cmd=finalize': hydra answered 'cmd=finalize_ack rc=-1', expected 'cmd=finalize_nak'");
}

TEST_F(PeerTest, ClosedConnection) {
  close(fds_[1]);
  fds_[1] = -1;
  HydraPmi pmi(fds_[0]);
  absl::Status s = pmi.Leave(MonotonicNow() + absl::Seconds(10), [] {});
  EXPECT_FALSE(s.ok());
}

TEST_F(PeerTest, PeerThatNeverArrivesEndsAtTheDeadline) {
  HydraPmi pmi(fds_[0]);
  const absl::Time start = MonotonicNow();
  absl::Status s = pmi.Leave(start + absl::Milliseconds(200), [] {});
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "not every rank reached the end of the job in time"))
      << s;
  EXPECT_LT(MonotonicNow() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace hvx
