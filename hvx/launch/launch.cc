#include "hvx/launch/launch.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/cluster.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/launch/command.h"
#include "hvx/launch/elastic.h"
#include "hvx/launch/follower.h"
#include "hvx/launch/gpu_probe.h"
#include "hvx/launch/host_wait.h"
#include "hvx/launch/mpiexec.h"
#include "hvx/launch/output.h"
#include "hvx/launch/rank_wrapper.h"
#include "hvx/launch/records.h"
#include "hvx/launch/restarts.h"
#include "hvx/launch/subprocess.h"
#include "hvx/launch/supervisor.h"

namespace hvx {
namespace launch {

absl::StatusOr<int> RunJob(const LaunchOptions& options) {
  return RunJob(options, Environment::Process());
}

namespace {

absl::StatusOr<int> LeadJob(const LaunchOptions& options, const Environment& env,
                            const JobSetup& setup, const HostProbe& probe) {
  // One bound for both waits: the launcher's own name in DNS, then the other hosts' remote shell.
  double wait_s = setup.host_wait_s;
  if (wait_s > 0 && !options.dry_run && setup.own_name_in_dns) {
    const auto start = std::chrono::steady_clock::now();
    HVX_RETURN_IF_ERROR(WaitForHosts({HostName()}, wait_s, InDns, options.err_fd, kResolveInDns));
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    wait_s = std::max(0.0, std::ceil(wait_s - waited));
  }
  if (setup.host_wait_s > 0 && !options.dry_run) {
    std::vector<std::string> remote;
    for (const Host& h : setup.plan.used_hosts) {
      if (!probe.is_local(h.name) && h.name != setup.this_host) remote.push_back(h.name);
    }
    // ssh's own bound (ConnectTimeout, a name that does not resolve) decides most asks; this one
    // stops a shell that hangs after connecting.
    HVX_RETURN_IF_ERROR(WaitForHosts(
        remote, wait_s,
        [&options](const std::string& host) {
          return RunCapture(RemoteCommand(options, host, "true"), 10).status();
        },
        options.err_fd));
  }
  if (options.max_restarts > 0 || !options.host_discovery_script.empty()) {
    if (options.dry_run) {
      return absl::InvalidArgumentError("--dry-run prints one plan: give it without elastic flags");
    }
    const std::string run_id = env.GetNonEmpty("HVX_RUN_ID").value_or(NewRunId());
    return RunElastic(options, setup, run_id, SystemElasticSteps(options, env));
  }
  return RunAttempt(options, setup, nullptr);
}

}  // namespace

absl::StatusOr<int> RunJob(const LaunchOptions& options, const Environment& env) {
  const HostProbe probe = SystemHostProbe(options, env);
  HVX_ASSIGN_OR_RETURN(JobSetup setup, ResolveJob(options, env, ReadFileFromDisk, probe));
  if (setup.follower) return FollowLeader(options, setup, env);
  // MPICH's mpiexec, found before anything starts; a failure still reaches the followers.
  absl::StatusOr<int> rc;
  std::string note;
  if (absl::StatusOr<std::string> mpiexec = ResolveMpiexec(options.mpiexec, env, &note);
      mpiexec.ok()) {
    if (!note.empty()) WriteAll(options.err_fd, note + "\n");
    LaunchOptions leader = options;
    leader.mpiexec = *mpiexec;
    rc = LeadJob(leader, env, setup, probe);
  } else {
    rc = mpiexec.status();
  }
  // The other hosts of a SageMaker-style job wait for its status, and exit with it.
  if (!setup.followers.empty() && !options.dry_run) {
    if (!rc.ok()) WriteAll(options.err_fd, absl::StrCat("hvxrun: ", rc.status().message(), "\n"));
    ReportToFollowers(options, setup, env, rc.ok() ? *rc : kSetupFailureExitCode);
    if (!rc.ok()) return kSetupFailureExitCode;
  }
  return rc;
}

int HvxrunMain(int argc, char** argv) {
  if (int rc = MaybeRunRankWrapper(argc, argv); rc >= 0) return rc;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(args, Environment::Process());
  if (!options.ok()) {
    if (absl::IsNotFound(options.status())) {
      WriteAll(1, options.status().message());
      return 0;
    }
    WriteAll(2, absl::StrCat("hvxrun: ", options.status().message(), "\n"));
    return 2;
  }
  // What the job's processes leave running when their parents end comes to hvxrun, which ends it
  // after each attempt (LaunchOptions::end_leftovers).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  options->end_leftovers = true;
  absl::StatusOr<int> rc = RunJob(*options);
  if (!rc.ok()) WriteAll(2, absl::StrCat("hvxrun: ", rc.status().message(), "\n"));
  const int status = rc.ok() ? *rc : kSetupFailureExitCode;
  if (!options->failure_file.empty() && status != 0 && status != kPreemptedExitCode) {
    const std::vector<std::string> summary = LastFailureSummary();
    std::string why = !rc.ok()           ? std::string(rc.status().message())
                      : !summary.empty() ? absl::StrJoin(summary, "\n")
                                         : absl::StrCat("the job ended with status ", status);
    if (why.size() > kMaxFailureFileBytes) why.resize(kMaxFailureFileBytes);
    const absl::Status written =
        WriteFileAtomically(options->failure_file, why + "\n", "failure file", /*durable=*/true);
    if (!written.ok())
      WriteAll(2, absl::StrCat("hvxrun: --failure-file: ", written.message(), "\n"));
  }
  return status;
}

}  // namespace launch
}  // namespace hvx
