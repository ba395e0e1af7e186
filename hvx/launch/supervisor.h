// One attempt of a job: mpiexec started on the plan and supervised to its end. Every rank must
// report its start within start_timeout_s; the first rank that exits non-zero or by a signal
// stops the job (SIGINT to mpiexec at once, SIGKILL to what is left after stop_timeout_s) and a
// summary names that rank, its host, its status and its last stderr lines. Signals to hvxrun stop
// the job (or, with --preempt-grace, ask the ranks to checkpoint first).
#ifndef HVX_LAUNCH_SUPERVISOR_H_
#define HVX_LAUNCH_SUPERVISOR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/launch/options.h"
#include "hvx/launch/restarts.h"

namespace hvx {
namespace launch {

// Runs the job once on `setup`'s plan and returns its exit code; *outcome (when given) says
// whether a restart may help. more_slots, when given, is polled every --discovery-interval while
// the job runs: a non-empty answer (what appeared) asks the ranks to checkpoint and ends the
// attempt for a restart with more ranks.
absl::StatusOr<int> RunAttempt(const LaunchOptions& options, const JobSetup& setup,
                               AttemptOutcome* outcome,
                               std::function<std::string()> more_slots = nullptr);

// The summary of this process's last attempt that ended non-zero, as hvxrun printed it (each line
// without "hvxrun: "); empty when none did. hvxrun writes it to --failure-file.
std::vector<std::string> LastFailureSummary();

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_SUPERVISOR_H_
