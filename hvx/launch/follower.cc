#include "hvx/launch/follower.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "hvx/common/files.h"
#include "hvx/launch/command.h"
#include "hvx/launch/output.h"
#include "hvx/launch/subprocess.h"

namespace hvx {
namespace launch {
namespace {

// The network namespace of a process ("net:[4026531840]"), "" when it cannot be read.
std::string NetNamespace(const std::string& pid) {
  char buf[64];
  const ssize_t n = readlink(absl::StrCat("/proc/", pid, "/ns/net").c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, n) : std::string();
}

// Whether /proc/PID belongs to this process's user.
bool OwnProcess(int pid) {
  struct stat st;
  return stat(absl::StrCat("/proc/", pid).c_str(), &st) == 0 && st.st_uid == geteuid();
}

}  // namespace

std::set<int> HydraProxies() {
  std::set<int> found;
  const std::string own_net = NetNamespace("self");
  for (int pid : ProcessIds()) {
    absl::StatusOr<std::string> comm = ReadFileFromDisk(absl::StrCat("/proc/", pid, "/comm"));
    if (comm.ok() && absl::StripAsciiWhitespace(*comm) == "hydra_pmi_proxy" && OwnProcess(pid) &&
        NetNamespace(std::to_string(pid)) == own_net) {
      found.insert(pid);
    }
  }
  std::set<int> proxies;
  for (int pid : found) {
    const std::optional<ProcessStat> p = ReadProcessStat(pid);
    if (found.count(p ? p->ppid : -1) == 0) proxies.insert(pid);
  }
  return proxies;
}

namespace {

// Only [A-Za-z0-9._-]: the name goes into a file name and a remote shell command unquoted.
std::string FileNamePart(const std::string& s) {
  std::string out;
  for (char c : s) out.push_back(absl::ascii_isalnum(c) || c == '.' || c == '-' ? c : '_');
  return out.empty() ? "_" : out;
}

// The job's status once the leader has left it in `path` (the file is removed), else nullopt.
std::optional<int> ReadLeaderStatus(const std::string& path, const LaunchOptions& options,
                                    const std::string& leader) {
  // The leader writes it as this user (the same account runs the job on every host); one left in
  // /tmp by anyone else is no word of the leader's.
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || st.st_uid != geteuid()) return std::nullopt;
  absl::StatusOr<std::string> text = ReadFileFromDisk(path);
  if (!text.ok()) return std::nullopt;
  unlink(path.c_str());
  int status = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &status) || status < 0 || status > 255) {
    WriteAll(options.err_fd,
             absl::StrCat("hvxrun: ", path, " from the leader ", leader, " holds no exit status (",
                          absl::CEscape(*text), "); this host exits 1\n"));
    return 1;
  }
  WriteAll(options.err_fd, absl::StrCat("hvxrun: the leader ", leader,
                                        " reports that the job ended with status ", status, "\n"));
  return status;
}

}  // namespace

std::string LeaderStatusPath(const Environment& env, const std::string& follower) {
  return absl::StrCat("/tmp/hvx-job-status.",
                      FileNamePart(env.GetNonEmpty("TRAINING_JOB_NAME").value_or("job")), ".",
                      FileNamePart(follower));
}

void ReportToFollowers(const LaunchOptions& options, const JobSetup& setup, const Environment& env,
                       int status) {
  std::vector<std::vector<std::string>> writes;
  for (const std::string& host : setup.followers) {
    const std::string path = LeaderStatusPath(env, host);
    // Written whole, then renamed: the follower never reads half of it.
    writes.push_back(RemoteCommand(
        options, host,
        absl::StrCat("printf '%s\\n' ", status, " >", path, ".$$ && mv -f ", path, ".$$ ", path)));
  }
  // At once: a follower that does not answer (a lost instance) does not hold up the others.
  const std::vector<absl::StatusOr<std::string>> done = RunCaptureAll(writes, 20);
  for (size_t i = 0; i < done.size(); ++i) {
    if (done[i].ok()) continue;
    WriteAll(options.err_fd,
             absl::StrCat("hvxrun: could not send the job's status (", status, ") to host ",
                          setup.followers[i], ", which waits for it: ", done[i].status().message(),
                          "\n"));
  }
}

// Each attempt of the leader's (--max-restarts) starts its own proxy on this host, so a proxy not
// seen before is a restart even while the last attempt's is still exiting.
namespace {

volatile sig_atomic_t g_follower_signal = 0;
void OnFollowerSignal(int sig) { g_follower_signal = sig; }

// A stop request (SIGTERM, SIGINT) to a follower: the platform stops every host at once (SageMaker
// sends SIGTERM to each container's PID 1, which drops a signal it has no handler for, and kills
// the container 120 s later). The leader asks the ranks to checkpoint and sends the job's status;
// the follower waits for it for the leader's grace and stop timeout, then ends with 128 + the
// signal. Checked between polls.
class StopRequest {
 public:
  explicit StopRequest(const LaunchOptions& options) : options_(options) {
    struct sigaction on {};
    on.sa_handler = OnFollowerSignal;
    sigemptyset(&on.sa_mask);
    for (int k = 0; k < 2; ++k) sigaction(kSignals[k], &on, &old_[k]);
  }
  ~StopRequest() {
    for (int k = 0; k < 2; ++k) sigaction(kSignals[k], &old_[k], nullptr);
  }
  // Past the wait after a stop request: the status to end with, saying so.
  std::optional<int> Overdue() {
    const int sig = g_follower_signal;
    if (sig == 0) return std::nullopt;
    const double wait_s = options_.preempt_grace_s + options_.stop_timeout_s + 5;
    if (!since_) {
      since_ = Clock::now();
      WriteAll(options_.err_fd,
               absl::StrCat("hvxrun: signal ", sig, " (", strsignal(sig), "): waiting up to ",
                            wait_s, " s for the leader to end the job\n"));
    }
    if (Clock::now() - *since_ < FromSeconds(wait_s)) return std::nullopt;
    WriteAll(options_.err_fd,
             absl::StrCat("hvxrun: the leader sent no status within ", wait_s, " s of signal ", sig,
                          "; ending with ", 128 + sig, "\n"));
    return 128 + sig;
  }

 private:
  static constexpr int kSignals[2] = {SIGTERM, SIGINT};
  const LaunchOptions& options_;
  struct sigaction old_[2];
  std::optional<Clock::time_point> since_;
};

}  // namespace

absl::StatusOr<int> FollowLeader(const LaunchOptions& options, const JobSetup& setup,
                                 const Environment& env) {
  WriteAll(options.err_fd,
           absl::StrCat("hvxrun: this host is not the leader of the ", setup.source, "; ",
                        setup.leader, " starts the ranks here. Waiting for them to finish.\n"));
  g_follower_signal = 0;
  StopRequest stop(options);
  const std::string status_path = LeaderStatusPath(env, setup.this_host);
  // Short jobs' proxies live well under a second: a coarser poll could miss them all.
  constexpr std::chrono::milliseconds kPoll = std::chrono::milliseconds(20);
  // The leader may come up later than this host and then wait for the others (--host-wait). It
  // may also fail before it starts any rank here; it says so then.
  const double first_wait_s = setup.host_wait_s + options.start_timeout_s;
  const Clock::time_point deadline = Clock::now() + FromSeconds(first_wait_s);
  std::set<int> now;
  while ((now = HydraProxies()).empty()) {
    if (std::optional<int> status = ReadLeaderStatus(status_path, options, setup.leader)) {
      return *status;
    }
    if (std::optional<int> stopped = stop.Overdue()) return *stopped;
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no ranks were started on this host by the leader ", setup.leader, " within ",
          first_wait_s, " s (--host-wait ", setup.host_wait_s, " + --start-timeout ",
          options.start_timeout_s, "), and it sent no status of the job (", status_path, ")"));
    }
    std::this_thread::sleep_for(kPoll);
  }
  std::set<int> seen = now;
  while (true) {
    while (!now.empty()) {
      for (int pid : now) {
        if (seen.insert(pid).second) {
          WriteAll(options.err_fd,
                   absl::StrCat("hvxrun: ", setup.leader,
                                " restarted the job; this host runs ranks again\n"));
        }
      }
      if (std::optional<int> stopped = stop.Overdue()) return *stopped;
      // While ranks run, a coarser poll: a restart's proxy lives as long as its ranks.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      now = HydraProxies();
    }
    // The ranks here have ended: the leader sends the job's status once its side has, or (with
    // --max-restarts, the same command line as here) starts the job again.
    const Clock::time_point again_by = Clock::now() + FromSeconds(options.start_timeout_s);
    while (now.empty()) {
      if (std::optional<int> status = ReadLeaderStatus(status_path, options, setup.leader)) {
        return *status;
      }
      if (std::optional<int> stopped = stop.Overdue()) return *stopped;
      if (Clock::now() > again_by) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the leader ", setup.leader, " sent no status of the job (", status_path, ") within ",
            options.start_timeout_s,
            " s (--start-timeout) after the ranks on this host ended; it may have been lost"));
      }
      std::this_thread::sleep_for(kPoll);
      now = HydraProxies();
    }
  }
}

}  // namespace launch
}  // namespace hvx
