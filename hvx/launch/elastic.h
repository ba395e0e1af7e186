// Elastic jobs (--max-restarts, --host-discovery-script): attempts until one succeeds, the
// restarts run out or too few slots are left. Each restart excludes hosts that failed too often
// (restarts.h), re-reads the discovery script and re-plans; a growth seen while a job runs ends
// that attempt for a bigger one. The steps that touch the system (discovery, planning, running an
// attempt, probing hosts) are injected, so the loop is tested without processes.
#ifndef HVX_LAUNCH_ELASTIC_H_
#define HVX_LAUNCH_ELASTIC_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/common/env.h"
#include "hvx/launch/options.h"
#include "hvx/launch/restarts.h"

namespace hvx {
namespace launch {

struct ElasticSteps {
  // The hosts the job may use now, with their slots.
  std::function<absl::StatusOr<std::vector<Host>>()> candidate_hosts;
  // The plan of an attempt's options.
  std::function<absl::StatusOr<JobSetup>(const LaunchOptions&)> resolve;
  // Runs one attempt to its end (RunAttempt).
  std::function<absl::StatusOr<int>(const LaunchOptions&, const JobSetup&, AttemptOutcome*,
                                    std::function<std::string()>)>
      run_attempt;
  // Those of the hosts that do not answer the remote shell.
  std::function<std::vector<std::string>(const std::vector<std::string>&)> unreachable;
};

// The real steps: the discovery script (or the options' hosts), ResolveJob with the GPU probe,
// RunAttempt, and `ssh host true` within a few seconds.
ElasticSteps SystemElasticSteps(const LaunchOptions& options, const Environment& env);

// The restart loop over `steps`; `first` is the first attempt's resolved setup (its launcher and
// source are kept), `run_id` the HVX_RUN_ID every attempt exports. Returns the exit code.
absl::StatusOr<int> RunElastic(const LaunchOptions& options, const JobSetup& first,
                               const std::string& run_id, const ElasticSteps& steps);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_ELASTIC_H_
