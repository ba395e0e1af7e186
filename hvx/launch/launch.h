// Launching a job: the library behind tools/hvxrun, also used by programs that re-launch
// themselves (the trainer asked for several processes while not under a launcher).
//
//   if (!hvx::launch::IsUnderLauncher(hvx::Environment::Process())) {
//     HVX_ASSIGN_OR_RETURN(int exit_code, hvx::launch::RunJob(options));  // waits for the job
//
// RunJob resolves the plan (options.h), then follows the leader (follower.h), runs the restart
// loop (elastic.h) or runs one attempt (supervisor.h): mpiexec (command.h) with every rank's lines
// tagged (output.h), supervised: every rank must report its start within start_timeout_s; the
// first rank that exits non-zero or by a signal stops the job (SIGINT to mpiexec at once, SIGKILL
// to what is left after stop_timeout_s) and a summary names that rank, its host, its status and
// its last stderr lines. The exit code is the first failing rank's status (128+N for signal N), 1
// when ranks did not start, 124 when timeout_s ran out, 128+N when hvxrun itself got signal N.
#ifndef HVX_LAUNCH_LAUNCH_H_
#define HVX_LAUNCH_LAUNCH_H_

#include "absl/status/statusor.h"
#include "hvx/common/env.h"
#include "hvx/launch/cluster_env.h"
#include "hvx/launch/gpu_probe.h"
#include "hvx/launch/options.h"

namespace hvx {
namespace launch {

// What hvxrun exits with when the job could not be set up (RunJob returned an error).
inline constexpr int kSetupFailureExitCode = 2;

// Runs the job and returns its exit code. Errors (a bad host list, too few slots, running under
// another launcher, mpiexec not startable) come back as a Status before anything starts. The
// leader of a SageMaker-style job sends every follower the job's exit code (kSetupFailureExitCode
// for an error, which it then prints on err_fd and returns as that code).
absl::StatusOr<int> RunJob(const LaunchOptions& options);
absl::StatusOr<int> RunJob(const LaunchOptions& options, const Environment& env);

// The whole hvxrun program: wrapper dispatch, argument parsing, RunJob, errors on stderr.
int HvxrunMain(int argc, char** argv);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_LAUNCH_H_
