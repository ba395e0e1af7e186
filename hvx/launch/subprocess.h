// Child processes for hvxrun: started in a session of their own with stdout and stderr on pipes,
// or run to completion with their output captured.
//
//   HVX_ASSIGN_OR_RETURN(Child c, Spawn({"mpiexec", "-n", "2", "true"}));  // read c.out, c.err
//   HVX_ASSIGN_OR_RETURN(std::string out, RunCapture({"ssh", host, "true"}, /*timeout_s=*/10));
#ifndef HVX_LAUNCH_SUBPROCESS_H_
#define HVX_LAUNCH_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace hvx {
namespace launch {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d);
Clock::duration FromSeconds(double s);

struct Child {
  pid_t pid = -1;
  int out = -1;  // read ends; -1 once closed
  int err = -1;
};

// Starts argv in a session of its own (its pid is the session's and the process group's id; no
// controlling terminal, so an ssh it runs cannot stop at a password prompt) with stdout/stderr on
// pipes. Variables that would make hydra pick other hosts or another launcher behind our back are
// removed from its environment, and `env` is set in it. The child gets SIGTERM when this process
// dies, however it dies.
absl::StatusOr<Child> Spawn(std::vector<std::string> argv,
                            const std::vector<std::pair<std::string, std::string>>& env = {});

// This process's live children (zombies among them are reaped first: call it when it waits for
// none of its own).
std::vector<pid_t> LiveChildren();

// Ends every child this process has but those in `keep` (and none it is still waiting for
// elsewhere: call it when it has none of its own): SIGTERM, then SIGKILL to what is left after
// `grace_s`, reaping each, until none is left, including those that come to it as their parents
// die. Returns how many it ended. `keep`: what was there before the job (the sshd a container's
// entry point started, which came to hvxrun as the container's PID 1).
// hvxrun is a child subreaper (PR_SET_CHILD_SUBREAPER): what mpiexec started and left running
// when it ended comes to hvxrun, whatever session it made (hydra puts every proxy and ssh client in
// its own). With a host's link cut, the ssh client of that host's proxy waited on a dead
// connection long after the job had ended.
int EndLeftoverChildren(double grace_s, const std::set<pid_t>& keep = {});

// A process as /proc/PID/stat states it.
struct ProcessStat {
  char state = '?';  // 'R', 'S', 'Z' (ended, not yet reaped), ...
  int ppid = -1;
};
// nullopt when the process has gone or /proc does not say.
std::optional<ProcessStat> ReadProcessStat(int pid);
// Every pid /proc lists.
std::vector<int> ProcessIds();

// The most RunCapture keeps of a command's stdout or stderr (a discovery script, a remote probe).
inline constexpr size_t kMaxCapturedBytes = size_t{1} << 20;

// Runs argv, returns its stdout; fails on a non-zero exit, after timeout_s (the child is killed),
// or when it printed kMaxCapturedBytes or more on either stream (ResourceExhausted).
absl::StatusOr<std::string> RunCapture(std::vector<std::string> argv, double timeout_s);
// RunCapture of every command at once (one per host: a host that does not answer costs the
// others nothing), each result in its command's place, all within the one timeout_s.
std::vector<absl::StatusOr<std::string>> RunCaptureAll(
    const std::vector<std::vector<std::string>>& commands, double timeout_s);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_SUBPROCESS_H_
