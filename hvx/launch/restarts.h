// Elastic jobs: hvxrun --max-restarts N starts the job again after a failure, on the hosts still
// usable, so a job survives losing a host (and grows when --host-discovery-script lists more).
//
//   HostHealth health;
//   HVX_ASSIGN_OR_RETURN(LaunchOptions attempt, PlanAttempt(options, hosts, health, 1, run_id));
//   ...the attempt fails on host h...
//   RecordHostFailure("h", "rank 5 was killed by signal 9", options.host_failure_limit, &health);
//
// Pure functions of their inputs: every decision and message is unit-tested without processes.
#ifndef HVX_LAUNCH_RESTARTS_H_
#define HVX_LAUNCH_RESTARTS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/launch/hosts.h"
#include "hvx/launch/options.h"

namespace hvx {
namespace launch {

// How one attempt of an elastic job ended (after Run): whether a restart may help (a rank failed,
// or ranks never started; not a signal to hvxrun or --timeout), why it ended, and the hosts at
// fault.
struct AttemptOutcome {
  bool restartable = false;
  bool grow = false;  // every rank ended cleanly after a growth request
  std::string cause;
  std::vector<std::string> fault_hosts;
  // mpiexec ended before these hosts' ranks reported an exit: a host that died takes its
  // proxy with it, and hydra then ends the whole job. Which host is not known here.
  std::vector<std::string> lost_hosts;
};

// What the attempts so far say about each host.
struct HostHealth {
  std::map<std::string, int> failures;          // attempts that failed on the host
  std::map<std::string, std::string> excluded;  // host -> why, for the rest of the job
};

// Counts a failure of `host` (`why`: "rank 5 exited with status 3"); at `limit` failures the host
// is excluded for the rest of the job.
void RecordHostFailure(const std::string& host, const std::string& why, int limit,
                       HostHealth* health);

// The options of attempt `attempt` (0 = the first start): `hosts` (with their slots) minus the
// excluded ones as -H, -np the smaller of their slots and the cap (--max-np, else the -np asked,
// else every slot), and HVX_RESTART_COUNT / HVX_RUN_ID exported to every rank. FailedPrecondition
// when fewer than --min-np slots remain, listing each excluded host and why.
absl::StatusOr<LaunchOptions> PlanAttempt(const LaunchOptions& base, const std::vector<Host>& hosts,
                                          const HostHealth& health, int attempt,
                                          const std::string& run_id);

// The hosts a --host-discovery-script printed: "host:slots" (or "host slots=N") lines, or bare
// names (the Kubeflow MPI Operator's discover_hosts.sh prints no slots), which take their slots
// from `known_slots` (the job's own host list: its hostfile) and else from `default_slots`
// (--slots-per-host). A bare name with neither is an error naming the ways to give it slots.
absl::StatusOr<std::vector<Host>> ParseDiscoveredHosts(
    const std::string& output, const std::string& script,
    const std::map<std::string, int>& known_slots = {},
    std::optional<int> default_slots = std::nullopt);

// "restart 1 of 2: rank 5 on host h3 was killed by signal 9; excluded h3 (1 failure); new plan:
// np 4 on h1:2,h2:2"
std::string RestartLine(int attempt, int max_restarts, const std::string& cause,
                        const HostHealth& health, const LaunchOptions& next);

// A run id for HVX_RUN_ID, the same in every attempt of one hvxrun: 16 hex digits.
std::string NewRunId();

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_RESTARTS_H_
