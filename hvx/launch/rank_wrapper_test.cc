// The rank wrapper's PMI relay, with the test as hydra's proxy: the program's PMI traffic passes
// both ways unchanged, and an abort reaches the proxy only after the error record naming the rank
// is on stderr, and after the wrapper's stop wait. The real hydra side is in tests/faults and
// tests/multihost (MPI_Abort under hvxrun).
#include "hvx/launch/rank_wrapper.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "hvx/launch/output.h"
#include "hvx/launch/plan.h"
#include "hvx/launch/records.h"

namespace hvx {
namespace launch {
namespace {

using Clock = std::chrono::steady_clock;

// Reads from fd until `want` is in *got or `timeout_ms` passed; whether it is.
bool ReadUntil(int fd, const std::string& want, std::string* got, int timeout_ms) {
  const Clock::time_point end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!absl::StrContains(*got, want)) {
    const int left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return false;
    got->append(buf, static_cast<size_t>(n));
  }
  return true;
}

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

class RankWrapperTest : public ::testing::Test {
 protected:
  // Starts the wrapper as rank 0 of a one-host plan around `script` (run by /bin/sh), with
  // PMI_FD on a socket whose other end is proxy_ and stderr on a pipe read from err_.
  // With `orphanable`, pid_ is a process between this one and the wrapper, which waits to be
  // killed: the wrapper's parent, as hydra's proxy is.
  void Start(const std::string& script, int pending_signal = 0, bool orphanable = false) {
    int pair[2], err[2], out[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    ASSERT_EQ(pipe(err), 0);
    ASSERT_EQ(pipe(out), 0);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      dup2(err[1], 2);
      dup2(out[1], 1);
      close(pair[0]);
      for (int fd : {err[0], err[1], out[0], out[1]}) close(fd);
      setenv("PMI_FD", std::to_string(pair[1]).c_str(), 1);
      setenv("PMI_RANK", "0", 1);
      unsetenv("MPI_LOCALRANKID");
      unsetenv("MPI_LOCALNRANKS");
      if (orphanable && fork() != 0) {
        while (true) pause();
      }
      if (pending_signal != 0) {
        // Blocked and pending when the wrapper starts: it arrives before the program's pid is
        // recorded, the window between fork and the record.
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, pending_signal);
        sigprocmask(SIG_BLOCK, &s, nullptr);
        raise(pending_signal);
      }
      std::vector<std::string> args = {"wrapper", kRankWrapperFlag, "--plan", "hostA:1",
                                       "--",      "/bin/sh",        "-c",     script};
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      _exit(MaybeRunRankWrapper(static_cast<int>(args.size()), argv.data()));
    }
    close(pair[1]);
    close(err[1]);
    close(out[1]);
    proxy_ = pair[0];
    err_ = err[0];
    out_ = out[0];
  }

  // The proxy is gone: the wrapper's abort for a failed program finds no one to send it to and
  // the wrapper ends after its stop wait, not after the abort's wait too.
  void CloseProxy() {
    close(proxy_);
    proxy_ = -1;
  }

  // All the wrapper wrote on fd (err_ or out_) until it closed it.
  static std::string ReadAll(int fd) {
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

  // The wrapper's exit status (its code, or 128 + signal).
  int Wait() {
    int status = 0;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (proxy_ >= 0) close(proxy_);
    if (err_ >= 0) close(err_);
    if (out_ >= 0) close(out_);
  }

  // The control records among the wrapper's stderr lines.
  static std::vector<ControlRecord> Records(const std::string& err) {
    std::vector<ControlRecord> out;
    for (absl::string_view line : absl::StrSplit(err, '\n')) {
      if (!absl::ConsumePrefix(&line, kControlMagic)) continue;
      if (std::optional<ControlRecord> r = ParseControlRecord(line)) out.push_back(*r);
    }
    return out;
  }

  pid_t pid_ = -1;
  int proxy_ = -1;
  int err_ = -1;
  int out_ = -1;
};

// What hydra makes of a rank's stream under hvxrun: its marker before every line.
std::string AsHydra(int rank, const std::string& bytes) {
  const std::string marker = "\x01hvx" + std::to_string(rank) + "\x02";
  std::string out;
  bool line_start = true;
  for (char c : bytes) {
    if (line_start) out += marker;
    out += c;
    line_start = c == '\n';
  }
  return out;
}

// A rank's program prints records and markers of its own, for itself (rank=-1 included) and for
// another rank, on both streams, as a crafted dataset's key in an error message or a sample that
// Python logs would: hvxrun, reading the wrapper's streams, hears only the wrapper's records (the
// start, and the real exit with 3) and shows the program's lines with the \x01 escaped.
TEST_F(RankWrapperTest, AProgramsOutputCannotSpeakForHvxrun) {
  const std::string forged =
      R"(printf '\001hvxctl exit rank=-1 code=0 host=x\n'
         printf 'text \001hvx1\002\001hvxctl exit rank=1 signal=9 host=x\n'
         printf '\001hvx1\002\001hvxctl exit rank=1 signal=9 host=x\n')";
  Start("{ " + forged + "; } >&2; { " + forged + "; }; exit 3");
  CloseProxy();
  EXPECT_EQ(Wait(), 3);
  const std::string err = ReadAll(err_), out = ReadAll(out_);
  EXPECT_EQ(err.find('\x01'), err.find(kControlMagic)) << "only records hold a \\x01: " << err;
  EXPECT_EQ(out.find('\x01'), std::string::npos) << out;

  const Plan plan = *MakePlan(2, {{"hostA", 2}});
  std::vector<ControlRecord> records;
  std::vector<std::string> lines;
  OutputRouter router(
      plan, TagMode::kRank, 1, 2, [&](int, absl::string_view line) { lines.emplace_back(line); },
      [&](const ControlRecord& r) { records.push_back(r); });
  StreamDemuxer err_demux(
      [&](int src, absl::string_view d) { router.OnBytes(Stream::kStderr, src, d); });
  StreamDemuxer out_demux(
      [&](int src, absl::string_view d) { router.OnBytes(Stream::kStdout, src, d); });
  err_demux.Feed(AsHydra(0, err));
  out_demux.Feed(AsHydra(0, out));
  err_demux.Finish();
  out_demux.Finish();
  router.Finish();
  ASSERT_EQ(records.size(), 2u) << err;
  EXPECT_EQ(records[0].kind, ControlRecord::Kind::kStart);
  EXPECT_EQ(records[1].kind, ControlRecord::Kind::kExit);
  EXPECT_EQ(records[1].rank, 0);
  EXPECT_EQ(records[1].exit_code, 3);
  EXPECT_EQ(records[1].signal, 0);
  ASSERT_EQ(lines.size(), 6u) << absl::StrJoin(lines, "");
  for (const std::string& line : lines) EXPECT_TRUE(absl::StartsWith(line, "[0] ")) << line;
  EXPECT_EQ(lines[0], "[0] \\x01hvxctl exit rank=-1 code=0 host=x\n");
  EXPECT_EQ(lines[1], "[0] text \\x01hvx1\x02\\x01hvxctl exit rank=1 signal=9 host=x\n");
}

TEST_F(RankWrapperTest, ARecordStartsALineOfItsOwnAfterTheProgramsOutput) {
  Start("printf 'no newline at the end' >&2; exit 4");
  CloseProxy();
  EXPECT_EQ(Wait(), 4);
  const std::string err = ReadAll(err_);
  EXPECT_TRUE(absl::StrContains(err, "no newline at the end\n\x01hvxctl exit rank=0 code=4"))
      << err;
}

// 20 MB on stdout and a line on stderr, written without pause: every byte arrives, in order, and
// the wrapper ends with the program.
TEST_F(RankWrapperTest, OutputWrittenWithoutPauseArrivesWhole) {
  Start("head -c 20000000 /dev/zero | tr '\\0' a; echo done >&2; exit 0");
  const std::string out = ReadAll(out_);
  EXPECT_EQ(out.size(), 20000000u);
  EXPECT_EQ(out.find_first_not_of('a'), std::string::npos);
  EXPECT_EQ(Wait(), 0);
  EXPECT_TRUE(absl::StrContains(ReadAll(err_), "done\n\x01hvxctl exit rank=0 code=0"));
}

// A process the program started keeps its stdout open and goes on: the wrapper ends with the
// program, with what the program wrote, and does not wait for the pipe to close.
TEST_F(RankWrapperTest, AProcessTheProgramLeftRunningDoesNotHoldTheWrapper) {
  Start("echo before; (sleep 20; echo late) & exit 0");
  const Clock::time_point started = Clock::now();
  EXPECT_EQ(Wait(), 0);
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(10));
  std::string out;
  ASSERT_TRUE(ReadUntil(out_, "before\n", &out, 1000)) << out;
  EXPECT_EQ(out, "before\n");
}

TEST_F(RankWrapperTest, RelaysPmiBothWaysAndEndsWithTheProgram) {
  Start(R"(printf 'cmd=init pmi_version=1\n' >&$PMI_FD
           read reply <&$PMI_FD; echo "program got: $reply" >&2
           printf 'cmd=finalize\n' >&$PMI_FD; exit 0)");
  std::string to_proxy, err;
  ASSERT_TRUE(ReadUntil(proxy_, "cmd=init pmi_version=1\n", &to_proxy, 10000)) << to_proxy;
  const std::string reply = "cmd=response_to_init pmi_version=1 rc=0\n";
  ASSERT_EQ(write(proxy_, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
  ASSERT_TRUE(ReadUntil(proxy_, "cmd=finalize\n", &to_proxy, 10000)) << to_proxy;
  EXPECT_EQ(to_proxy, "cmd=init pmi_version=1\ncmd=finalize\n");
  EXPECT_EQ(Wait(), 0);
  ReadUntil(err_, "\x01hvxctl exit", &err, 10000);
  ReadUntil(err_, "\n", &err, 100);
  EXPECT_TRUE(absl::StrContains(err, "program got: cmd=response_to_init pmi_version=1 rc=0"))
      << err;
  const std::vector<ControlRecord> records = Records(err);
  ASSERT_EQ(records.size(), 2u) << err;
  EXPECT_EQ(records[1].kind, ControlRecord::Kind::kExit);
  EXPECT_EQ(records[1].exit_code, 0);
  // Nothing else reached the proxy: a clean end sends no abort.
  EXPECT_FALSE(Readable(proxy_) && ReadUntil(proxy_, "cmd=abort", &to_proxy, 100)) << to_proxy;
}

TEST_F(RankWrapperTest, HoldsAnAbortUntilTheRecordNamingTheRankIsOut) {
  // The program writes its reason on stderr and aborts at once, as MPI_Abort does, then waits to
  // be killed; the wrapper's stop wait ends first here (nothing stops the job).
  Start(R"(printf 'cmd=get_maxes\n' >&$PMI_FD
           echo "why: bad input" >&2
           printf 'cmd=abort exitcode=7\n' >&$PMI_FD; exec sleep 30)");
  std::string to_proxy, err;
  ASSERT_TRUE(ReadUntil(proxy_, "cmd=get_maxes\n", &to_proxy, 10000)) << to_proxy;
  ASSERT_TRUE(ReadUntil(err_, "code=7 msg=", &err, 10000)) << err;
  const Clock::time_point recorded = Clock::now();
  ASSERT_TRUE(ReadUntil(err_, "\n", &err, 1000));
  // The rank's own line comes before the record, and the abort is still held.
  EXPECT_LT(err.find("why: bad input"), err.find(kControlMagic + std::string("error"))) << err;
  EXPECT_EQ(to_proxy, "cmd=get_maxes\n");
  EXPECT_FALSE(Readable(proxy_));
  ASSERT_TRUE(ReadUntil(proxy_, "cmd=abort exitcode=7\n", &to_proxy, 10000)) << to_proxy;
  EXPECT_GE(Clock::now() - recorded, std::chrono::milliseconds(500));
  EXPECT_EQ(to_proxy, "cmd=get_maxes\ncmd=abort exitcode=7\n");
  const std::vector<ControlRecord> records = Records(err);
  ASSERT_EQ(records.size(), 2u) << err;
  EXPECT_EQ(records[1].kind, ControlRecord::Kind::kError);
  EXPECT_EQ(records[1].rank, 0);
  EXPECT_EQ(records[1].host, "hostA");
  EXPECT_EQ(records[1].exit_code, 7);
  EXPECT_TRUE(absl::StrContains(records[1].message, "MPI_Abort")) << records[1].message;
  // Hydra would now kill the job; here the test does, as hydra does: SIGKILL to the program's
  // group is not ours to send, so the wrapper is told to stop and passes the signal on.
  kill(pid_, SIGTERM);
  EXPECT_EQ(Wait(), 128 + SIGTERM);
}

TEST_F(RankWrapperTest, AfterTheProgramEndedASignalEndsTheWrapperWithItsStatus) {
  // The program aborts and exits; its exit record goes out while the abort is held. A stop then
  // (hvxrun's, through hydra) must not go to the program's old pid, which another process may
  // have by now: the wrapper ends at once with the program's status, sending nothing more.
  Start(R"(printf 'cmd=abort exitcode=7\n' >&$PMI_FD; exit 7)");
  std::string err;
  ASSERT_TRUE(ReadUntil(err_, "\x01hvxctl exit", &err, 10000)) << err;
  const Clock::time_point signalled = Clock::now();
  kill(pid_, SIGTERM);
  EXPECT_EQ(Wait(), 7);
  EXPECT_LT(Clock::now() - signalled, std::chrono::milliseconds(500));
  std::string to_proxy;
  ReadUntil(proxy_, "cmd=abort", &to_proxy, 100);  // ends at the wrapper's close
  EXPECT_EQ(to_proxy, "");
}

TEST_F(RankWrapperTest, OnlyTheAbortCommandIsHeld) {
  // A line sent in two parts, the first of which could begin an abort, and a command whose name
  // only begins with "abort", both pass.
  Start(R"(printf 'cmd=ab' >&$PMI_FD; sleep 0.2; printf 'x\ncmd=abortive a=1\n' >&$PMI_FD
           read reply <&$PMI_FD; exit 0)");
  std::string to_proxy, err;
  ASSERT_TRUE(ReadUntil(proxy_, "cmd=abortive a=1\n", &to_proxy, 10000)) << to_proxy;
  EXPECT_EQ(to_proxy, "cmd=abx\ncmd=abortive a=1\n");
  const std::string reply = "cmd=ok\n";
  ASSERT_EQ(write(proxy_, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
  EXPECT_EQ(Wait(), 0);
  ReadUntil(err_, "\x01hvxctl exit", &err, 10000);
  for (const ControlRecord& r : Records(err)) EXPECT_NE(r.kind, ControlRecord::Kind::kError);
}

TEST_F(RankWrapperTest, AProgramThatEndsWithThePreemptedStatusEndedCleanly) {
  // Exit 75 (kPreemptedExitCode): the program saved its state on a stop request and asks to be run
  // again. The wrapper passes the status on and aborts nothing: the other ranks end by themselves.
  Start("exit 75");
  EXPECT_EQ(Wait(), kPreemptedExitCode);
  std::string err, to_proxy;
  ReadUntil(err_, "\x01hvxctl exit", &err, 10000);
  ReadUntil(err_, "\n", &err, 100);
  const std::vector<ControlRecord> records = Records(err);
  ASSERT_EQ(records.size(), 2u) << err;
  EXPECT_EQ(records[1].exit_code, kPreemptedExitCode) << err;
  EXPECT_FALSE(Readable(proxy_) && ReadUntil(proxy_, "cmd=abort", &to_proxy, 100)) << to_proxy;
}

TEST_F(RankWrapperTest, WhenTheProxyDiesTheProgramEndsEvenIfItTakesSigtermAsARequest) {
  // The trainer takes SIGTERM for a checkpoint request and goes on to the next step; a rank whose
  // proxy died must end all the same. `sleep` here ignores SIGTERM.
  const std::string pid_file = ::testing::TempDir() + "/orphaned_program.pid";
  unlink(pid_file.c_str());
  Start("trap '' TERM; echo $$ > " + pid_file + "; exec sleep 30", 0, /*orphanable=*/true);
  pid_t program = 0;
  for (int k = 0; k < 1000 && program <= 0; ++k) {
    if (FILE* f = fopen(pid_file.c_str(), "r")) {
      if (fscanf(f, "%d", &program) != 1) program = 0;
      fclose(f);
    }
    if (program <= 0) usleep(10000);
  }
  ASSERT_GT(program, 0) << "the program did not start";
  kill(pid_, SIGKILL);  // the proxy dies
  Wait();
  bool ended = false;
  for (int k = 0; k < 500 && !ended; ++k) {
    ended = kill(program, 0) != 0 && errno == ESRCH;
    if (!ended) usleep(10000);
  }
  if (!ended) kill(program, SIGKILL);
  EXPECT_TRUE(ended) << "the program outlived its proxy by 5 s";
}

TEST_F(RankWrapperTest, ASignalBeforeTheProgramsPidIsRecordedReachesTheProgram) {
  // A checkpoint request (SIGUSR1) that came while the wrapper was starting the program: the
  // program gets it, unblocked, and the exit record says so. `sleep` does not handle it.
  Start("exec sleep 20", SIGUSR1);
  const Clock::time_point started = Clock::now();
  const int rc = Wait();
  EXPECT_EQ(rc, 128 + SIGUSR1);
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(10));
  std::string err;
  ReadUntil(err_, "\x01hvxctl exit", &err, 1000);
  ReadUntil(err_, "\n", &err, 100);
  const std::vector<ControlRecord> records = Records(err);
  ASSERT_EQ(records.size(), 2u) << err;
  EXPECT_EQ(records[1].kind, ControlRecord::Kind::kExit);
  EXPECT_EQ(records[1].signal, SIGUSR1) << err;
}

}  // namespace
}  // namespace launch
}  // namespace hvx
