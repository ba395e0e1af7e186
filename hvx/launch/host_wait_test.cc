#include "hvx/launch/host_wait.h"

#include <unistd.h>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

using std::chrono::milliseconds;

// What WaitForHosts wrote to its err_fd, through a pipe.
class Err {
 public:
  Err() { EXPECT_EQ(pipe(fds_), 0); }
  ~Err() {
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  int fd() const { return fds_[1]; }
  std::string Text() {
    close(fds_[1]);
    fds_[1] = -1;
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(fds_[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
    return text;
  }

 private:
  int fds_[2] = {-1, -1};
};

// Hosts that come up after some number of refused asks each.
HostAnswers UpAfter(std::map<std::string, int>* refusals, std::map<std::string, int>* asked) {
  return [refusals, asked](const std::string& host) {
    const int n = (*asked)[host]++;
    if (n < (*refusals)[host]) {
      return absl::UnavailableError(
          absl::StrCat("ssh: connect to host ", host, " port 22: Connection refused"));
    }
    return absl::OkStatus();
  };
}

TEST(HostWaitTest, HostsUpAtOnceAreAskedOnceAndNothingIsSaid) {
  std::map<std::string, int> refusals, asked;
  Err err;
  EXPECT_TRUE(WaitForHosts({"a", "b"}, 10, UpAfter(&refusals, &asked), err.fd(), kAnswerRemoteShell,
                           milliseconds(1))
                  .ok());
  EXPECT_EQ(asked["a"], 1);
  EXPECT_EQ(asked["b"], 1);
  EXPECT_EQ(err.Text(), "");
}

TEST(HostWaitTest, WaitsForTheLateHostSayingSoOnceThenWhenItAnswered) {
  std::map<std::string, int> refusals = {{"late", 3}}, asked;
  Err err;
  EXPECT_TRUE(WaitForHosts({"early", "late"}, 10, UpAfter(&refusals, &asked), err.fd(),
                           kAnswerRemoteShell, milliseconds(1))
                  .ok());
  EXPECT_EQ(asked["early"], 1);  // an answer is not asked for again
  EXPECT_EQ(asked["late"], 4);
  const std::string text = err.Text();
  EXPECT_TRUE(absl::StrContains(
      text,
      "hvxrun: waiting up to 10 s (--host-wait) for hosts to answer the remote shell: late (ssh: "
      "connect to host late port 22: Connection refused)\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "hvxrun: host late answered after 0 s\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "early")) << text;
}

TEST(HostWaitTest, AHostThatNeverAnswersFailsTheWaitNamingItAndWhy) {
  std::map<std::string, int> refusals = {{"gone", 1000000}}, asked;
  Err err;
  const absl::Status s = WaitForHosts({"up", "gone"}, 0.05, UpAfter(&refusals, &asked), err.fd(),
                                      kAnswerRemoteShell, milliseconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "1 of 2 hosts did not answer the remote shell within 0.05 s (--host-wait): gone (ssh: "
            "connect to host gone port 22: Connection refused)");
  EXPECT_GT(asked["gone"], 2);
  EXPECT_LT(asked["gone"], 20);
}

// A round interval longer than the bound still asks once more at the deadline.
TEST(HostWaitTest, TheLastAskIsAtTheDeadline) {
  std::map<std::string, int> refusals = {{"b", 1000000}}, asked;
  Err err;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(WaitForHosts({"b"}, 0.2, UpAfter(&refusals, &asked), err.fd(), kAnswerRemoteShell,
                            milliseconds(150))
                   .ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
  EXPECT_EQ(asked["b"], 3);  // at 0, 150 and 200 ms
}

TEST(HostWaitTest, NoWaitAsksOnceAndFailsAtOnce) {
  std::map<std::string, int> refusals = {{"b", 1}}, asked;
  Err err;
  EXPECT_FALSE(WaitForHosts({"b"}, 0, UpAfter(&refusals, &asked), err.fd(), kAnswerRemoteShell,
                            milliseconds(1000))
                   .ok());
  EXPECT_EQ(asked["b"], 1);
}

// The launcher of an MPIJob waits for its own name in DNS: the messages say what it waits for.
TEST(HostWaitTest, SaysWhatItWaitsFor) {
  std::map<std::string, int> refusals = {{"job-launcher", 1000000}}, asked;
  Err err;
  const absl::Status s = WaitForHosts({"job-launcher"}, 0.01, UpAfter(&refusals, &asked), err.fd(),
                                      kResolveInDns, milliseconds(5));
  EXPECT_TRUE(absl::StrContains(s.message(), "1 of 1 hosts did not resolve in DNS within 0.01 s"))
      << s;
  const std::string text = err.Text();
  EXPECT_TRUE(absl::StrContains(
      text, "hvxrun: waiting up to 0.01 s (--host-wait) for hosts to resolve in DNS: job-launcher"))
      << text;
}

// A name no DNS server has: an error naming the resolver's answer, whatever this machine's
// resolver is (none answering, or NXDOMAIN). RFC 6761 keeps .invalid out of every DNS; the final
// dot keeps the resolver from trying it under this machine's search domains.
TEST(HostWaitTest, InDnsRefusesANameNoServerHas) {
  const absl::Status s = InDns("hvx-host-wait-test.invalid.");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(s.message(), "not in DNS: ")) << s;
}

}  // namespace
}  // namespace launch
}  // namespace hvx
