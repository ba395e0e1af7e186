#include "hvx/launch/follower.h"

#include <unistd.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "hvx/common/files.h"
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

// The hydra proxies running on this host: in this network namespace, so that hosts sharing one
// kernel's process table (containers, the tests' namespace hosts) see only their own. A proxy's
// child between its fork and its exec still has the proxy's name; it is not counted.
std::set<int> HydraProxies() {
  std::set<int> found;
  const std::string own_net = NetNamespace("self");
  for (int pid : ProcessIds()) {
    absl::StatusOr<std::string> comm = ReadFileFromDisk(absl::StrCat("/proc/", pid, "/comm"));
    if (comm.ok() && absl::StripAsciiWhitespace(*comm) == "hydra_pmi_proxy" &&
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

}  // namespace

// With --max-restarts (the leader has the same command line) it also waits --start-timeout after
// its ranks end for a restart that brings them back. Each attempt starts its own proxy on this
// host, so a proxy not seen before is a restart even while the last attempt's is still exiting.
absl::StatusOr<int> FollowLeader(const LaunchOptions& options, const JobSetup& setup) {
  WriteAll(options.err_fd,
           absl::StrCat("hvxrun: this host is not the leader of the ", setup.source, "; ",
                        setup.leader, " starts the ranks here. Waiting for them to finish.\n"));
  // Short jobs' proxies live well under a second: a coarser poll could miss them all.
  constexpr std::chrono::milliseconds kPoll = std::chrono::milliseconds(20);
  // The leader may come up later than this host and then wait for the others (--host-wait).
  const double first_wait_s = setup.host_wait_s + options.start_timeout_s;
  const Clock::time_point deadline = Clock::now() + FromSeconds(first_wait_s);
  std::set<int> now;
  while ((now = HydraProxies()).empty()) {
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no ranks were started on this host by the leader ", setup.leader,
                       " within ", first_wait_s, " s (--host-wait ", setup.host_wait_s,
                       " + --start-timeout ", options.start_timeout_s, ")"));
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
      // While ranks run, a coarser poll: a restart's proxy lives as long as its ranks.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      now = HydraProxies();
    }
    // The leader runs the same command: with --max-restarts it may start the job again here.
    if (options.max_restarts == 0) return 0;
    const Clock::time_point again_by = Clock::now() + FromSeconds(options.start_timeout_s);
    while (now.empty() && Clock::now() < again_by) {
      std::this_thread::sleep_for(kPoll);
      now = HydraProxies();
    }
    if (now.empty()) return 0;
  }
}

}  // namespace launch
}  // namespace hvx
