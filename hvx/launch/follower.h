// The follower host of a SageMaker-style cluster, where every host runs the same entry point
// and the leader starts the ranks of all of them through the remote shell.
#ifndef HVX_LAUNCH_FOLLOWER_H_
#define HVX_LAUNCH_FOLLOWER_H_

#include "absl/status/statusor.h"
#include "hvx/launch/options.h"

namespace hvx {
namespace launch {

// Stays alive while the leader runs ranks on this host: until they have run (and, with
// --max-restarts, through a restart that brings them back), so that the platform does not
// release the host while ranks still run here. Returns the exit code for this host.
absl::StatusOr<int> FollowLeader(const LaunchOptions& options, const JobSetup& setup);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_FOLLOWER_H_
