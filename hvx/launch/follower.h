// The follower host of a SageMaker-style cluster, where every host runs the same entry point
// and the leader starts the ranks of all of them through the remote shell.
#ifndef HVX_LAUNCH_FOLLOWER_H_
#define HVX_LAUNCH_FOLLOWER_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "hvx/common/env.h"
#include "hvx/launch/options.h"

namespace hvx {
namespace launch {

// Stays alive while the leader runs ranks on this host (and, with --max-restarts, through a
// restart that brings them back), so that the platform does not release the host while ranks
// still run here, until the leader sends the job's status (ReportToFollowers). Returns that
// status: every host of the job exits with it. Without a status from the leader within
// --start-timeout after this host's ranks ended (or, before any ran, --host-wait +
// --start-timeout) it fails, naming the leader.
absl::StatusOr<int> FollowLeader(const LaunchOptions& options, const JobSetup& setup,
                                 const Environment& env);

// The leader's side, once the job has ended: writes `status` into each of setup.followers'
// LeaderStatusPath through the remote shell. A follower it cannot reach is named on err_fd.
void ReportToFollowers(const LaunchOptions& options, const JobSetup& setup, const Environment& env,
                       int status);

// The hydra proxies running on this host for this user: in this network namespace (hosts sharing
// one kernel's process table, containers and the tests' namespace hosts, see only their own) and
// owned by this process's user (another user's job on the host does not hold this one). A proxy's
// child between its fork and its exec still has the proxy's name; it is not counted.
std::set<int> HydraProxies();

// Where a follower finds the job's status: a file in its /tmp named after the job
// (TRAINING_JOB_NAME, unique per SageMaker job, "job" without it) and the follower's name in the
// cluster. The follower removes it once read.
std::string LeaderStatusPath(const Environment& env, const std::string& follower);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_FOLLOWER_H_
