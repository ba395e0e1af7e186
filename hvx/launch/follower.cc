#include "hvx/launch/follower.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
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

// Whether a hydra proxy runs on this host: in this network namespace, so that hosts sharing one
// kernel's process table (containers, the tests' namespace hosts) see only their own.
bool HydraProxyRunning() {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return false;
  const std::string own_net = NetNamespace("self");
  bool found = false;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    absl::StatusOr<std::string> comm = ReadFileFromDisk(absl::StrCat("/proc/", pid, "/comm"));
    if (comm.ok() && absl::StripAsciiWhitespace(*comm) == "hydra_pmi_proxy" &&
        NetNamespace(e->d_name) == own_net) {
      found = true;
      break;
    }
  }
  closedir(proc);
  return found;
}

}  // namespace

// With --max-restarts (the leader has the same command line) it also waits --start-timeout after
// its ranks end for a restart that brings them back.
absl::StatusOr<int> FollowLeader(const LaunchOptions& options, const JobSetup& setup) {
  WriteAll(options.err_fd,
           absl::StrCat("hvxrun: this host is not the leader of the ", setup.source, "; ",
                        setup.leader, " starts the ranks here. Waiting for them to finish.\n"));
  const Clock::time_point deadline = Clock::now() + FromSeconds(options.start_timeout_s);
  while (!HydraProxyRunning()) {
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no ranks were started on this host by the leader ", setup.leader,
                       " within ", options.start_timeout_s, " s"));
    }
    // Short jobs' proxies live well under a second: a coarser poll could miss them all.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  while (true) {
    while (HydraProxyRunning()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // The leader runs the same command: with --max-restarts it may start the job again here.
    if (options.max_restarts == 0) return 0;
    const Clock::time_point again_by = Clock::now() + FromSeconds(options.start_timeout_s);
    bool again = false;
    while (!again && Clock::now() < again_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      again = HydraProxyRunning();
    }
    if (!again) return 0;
    WriteAll(options.err_fd, absl::StrCat("hvxrun: ", setup.leader,
                                          " restarted the job; this host runs ranks again\n"));
  }
}

}  // namespace launch
}  // namespace hvx
