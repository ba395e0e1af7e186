#include "hvx/launch/elastic.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/launch/command.h"
#include "hvx/launch/gpu_probe.h"
#include "hvx/launch/hosts.h"
#include "hvx/launch/output.h"
#include "hvx/launch/subprocess.h"
#include "hvx/launch/supervisor.h"

namespace hvx {
namespace launch {
namespace {

// The hosts an elastic job may use now: the discovery script's, else those the options name
// (with every slot they have).
absl::StatusOr<std::vector<Host>> CandidateHosts(const LaunchOptions& options,
                                                 const Environment& env) {
  if (!options.host_discovery_script.empty()) {
    HVX_ASSIGN_OR_RETURN(std::string out,
                         RunCapture({options.host_discovery_script}, options.start_timeout_s));
    // Slots for bare names: the hostfile the job names (-hostfile, or the cluster's, such as the
    // MPI Operator's HYDRA_HOST_FILE), read again each time as the script is.
    std::map<std::string, int> known;
    std::string hostfile = options.hostfile;
    if (hostfile.empty()) hostfile = env.GetNonEmpty("HYDRA_HOST_FILE").value_or("");
    if (!hostfile.empty()) {
      absl::StatusOr<std::vector<HostSpec>> listed = ReadHostfile(hostfile);
      if (listed.ok()) {
        for (const HostSpec& h : *listed) {
          if (h.slots) known[h.name] = *h.slots;
        }
      }
    }
    return ParseDiscoveredHosts(out, options.host_discovery_script, known, options.slots_per_host);
  }
  LaunchOptions all = options;
  all.np.reset();
  HVX_ASSIGN_OR_RETURN(JobSetup setup,
                       ResolveJob(all, env, ReadFileFromDisk, SystemHostProbe(all, env)));
  return setup.plan.used_hosts;
}

// Those of `hosts` that do not answer a command through the remote shell within a few seconds;
// this host (the probe's is_local) always answers.
std::vector<std::string> UnreachableHosts(const LaunchOptions& options, const HostProbe& probe,
                                          const std::vector<std::string>& hosts) {
  std::vector<std::string> remote;
  std::vector<std::vector<std::string>> asks;
  for (const std::string& h : hosts) {
    if (probe.is_local(h)) continue;
    remote.push_back(h);
    asks.push_back(RemoteCommand(options, h, "true"));
  }
  const std::vector<absl::StatusOr<std::string>> answers =
      RunCaptureAll(asks, std::min(options.start_timeout_s, 10.0));
  std::vector<std::string> gone;
  for (size_t i = 0; i < remote.size(); ++i) {
    if (!answers[i].ok()) gone.push_back(remote[i]);
  }
  return gone;
}

}  // namespace

ElasticSteps SystemElasticSteps(const LaunchOptions& options, const Environment& env) {
  ElasticSteps steps;
  steps.candidate_hosts = [&options, &env] { return CandidateHosts(options, env); };
  steps.resolve = [&env](const LaunchOptions& next) {
    return ResolveJob(next, env, ReadFileFromDisk, SystemHostProbe(next, env));
  };
  steps.run_attempt = [](const LaunchOptions& next, const JobSetup& setup, AttemptOutcome* outcome,
                         std::function<std::string()> more_slots) {
    return RunAttempt(next, setup, outcome, std::move(more_slots));
  };
  steps.unreachable = [&options, &env](const std::vector<std::string>& hosts) {
    return UnreachableHosts(options, SystemHostProbe(options, env), hosts);
  };
  return steps;
}

absl::StatusOr<int> RunElastic(const LaunchOptions& options, const JobSetup& first,
                               const std::string& run_id, const ElasticSteps& steps) {
  HostHealth health;
  std::string cause;
  bool grew = false;
  int failed_restarts = 0;  // what --max-restarts counts; a restart to grow is not one
  int rc = 0;
  // Without a discovery script the hosts never change: resolve them (and probe their GPUs) once.
  std::vector<Host> hosts;
  if (options.host_discovery_script.empty()) {
    HVX_ASSIGN_OR_RETURN(hosts, steps.candidate_hosts());
  }
  for (int attempt = 0;; ++attempt) {
    if (!options.host_discovery_script.empty()) {
      HVX_ASSIGN_OR_RETURN(hosts, steps.candidate_hosts());
    }
    absl::StatusOr<LaunchOptions> next = PlanAttempt(options, hosts, health, attempt, run_id);
    if (!next.ok()) {
      WriteAll(options.err_fd,
               absl::StrCat("hvxrun: cannot restart: ", next.status().message(), "\n"));
      return attempt == 0 ? 2 : rc;
    }
    if (attempt > 0 && grew) {
      WriteAll(options.err_fd, absl::StrCat("hvxrun: restart to grow: ", cause, "; new plan: np ",
                                            next->np.value_or(0), " on ", next->hosts, "\n"));
    } else if (attempt > 0) {
      WriteAll(options.err_fd,
               absl::StrCat(
                   "hvxrun: ",
                   RestartLine(failed_restarts, options.max_restarts, cause, health, *next), "\n"));
    }
    HVX_ASSIGN_OR_RETURN(JobSetup setup, steps.resolve(*next));
    setup.launcher = first.launcher;  // inside SLURM, srun still starts the ranks
    setup.source = absl::StrCat(first.source, ", attempt ", attempt);
    // While it runs: does the discovery script list more than this plan has?
    std::function<std::string()> more_slots;
    if (options.discovery_interval_s > 0) {
      const int np = next->np.value_or(0);
      more_slots = [&options, &steps, &health, np, attempt, &run_id]() -> std::string {
        absl::StatusOr<std::vector<Host>> now = steps.candidate_hosts();
        if (!now.ok()) return "";
        absl::StatusOr<LaunchOptions> bigger = PlanAttempt(options, *now, health, attempt, run_id);
        if (!bigger.ok() || bigger->np.value_or(0) <= np) return "";
        return absl::StrCat("np ", bigger->np.value_or(0), " on ", bigger->hosts);
      };
    }
    AttemptOutcome outcome;
    HVX_ASSIGN_OR_RETURN(rc, steps.run_attempt(*next, setup, &outcome, std::move(more_slots)));
    grew = outcome.grow;
    cause = outcome.cause;
    if (grew) continue;
    if (rc == 0 || !outcome.restartable) return rc;
    if (failed_restarts >= options.max_restarts) {
      WriteAll(options.err_fd, absl::StrCat("hvxrun: giving up after ", failed_restarts, " restart",
                                            failed_restarts == 1 ? "" : "s", " (--max-restarts ",
                                            options.max_restarts, "): ", outcome.cause, "\n"));
      return rc;
    }
    ++failed_restarts;
    // The job ended without a failing rank to blame: a host that does not answer the remote shell
    // is the one that died.
    const std::vector<std::string> gone = steps.unreachable(outcome.lost_hosts);
    if (!gone.empty()) {
      outcome.fault_hosts = gone;
      cause =
          absl::StrCat(outcome.cause, "; host", gone.size() > 1 ? "s " : " ",
                       absl::StrJoin(gone, ", "), gone.size() > 1 ? " do" : " does", " not answer");
    }
    for (const std::string& h : outcome.fault_hosts) {
      RecordHostFailure(h, cause, options.host_failure_limit, &health);
    }
  }
}

}  // namespace launch
}  // namespace hvx
