// hvxrun's options: parsed from the command line, then resolved into a plan.
//
//   HVX_ASSIGN_OR_RETURN(LaunchOptions opts, ParseLaunchArgs(args, Environment::Process()));
//   HVX_ASSIGN_OR_RETURN(JobSetup setup, ResolveJob(opts, env, SystemHostProbe(opts, env)));
//
// Parsing and resolution are pure functions of their inputs (arguments, an Environment, a probe
// for GPU counts), so every error message is unit-tested without starting processes.
#ifndef HVX_LAUNCH_OPTIONS_H_
#define HVX_LAUNCH_OPTIONS_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/common/env.h"
#include "hvx/launch/cluster_env.h"
#include "hvx/launch/plan.h"
#include "hvx/launch/records.h"

namespace hvx {
namespace launch {

enum class TagMode { kRank, kFull, kNone };

// The most of hvxrun's summary --failure-file holds (SageMaker's FailureReason holds 1024).
inline constexpr size_t kMaxFailureFileBytes = 1024;

struct LaunchOptions {
  std::optional<int> np;  // unset: every slot
  std::string hosts;      // -H, as written
  std::string hostfile;
  std::optional<int> slots_per_host;  // unset: auto (GPUs of the host, 1 without)
  std::vector<std::pair<std::string, std::string>> env;  // -x, values resolved
  TagMode tag_output = TagMode::kRank;
  std::string output_dir;
  // --failure-file: when the job fails, why (hvxrun's summary, at most kMaxFailureFileBytes) is
  // written there; SageMaker shows /opt/ml/output/failure as the job's reason.
  std::string failure_file;
  std::string launcher_exec;  // remote shell replacing ssh
  double start_timeout_s = 60;
  // --host-wait: before starting, wait up to this long for every other host to answer the remote
  // shell (WaitForHosts); unset: the cluster's ClusterHosts::host_wait_s, 0 without a cluster.
  std::optional<double> host_wait_s;
  double stop_timeout_s = 10;  // after the first failure: terminate, then kill at this bound
  double timeout_s = 0;        // whole-job wall clock limit; 0 = none
  bool dry_run = false;
  bool verbose = false;
  // After each attempt, end every child this process still has (EndLeftoverChildren). hvxrun sets
  // it and makes itself a child subreaper, so that what mpiexec leaves running comes to it; a
  // program that calls RunJob and has children of its own leaves it unset.
  bool end_leftovers = false;
  std::string mpiexec = "mpiexec";
  // An executable that runs MaybeRunRankWrapper when its first argument is kRankWrapperFlag
  // (rank_wrapper.h); empty: hvxrun_rank in this program's directory, else this program.
  std::string wrapper;
  std::vector<std::string> program;
  // Elastic jobs (restarts.h). After a failure, start again up to max_restarts times on the hosts
  // still usable: a host is excluded after host_failure_limit failed attempts on it; fewer than
  // min_np usable slots end the job; max_np caps -np as hosts come and go. The discovery script
  // prints "host:slots" lines and is read at the start and at every restart.
  int max_restarts = 0;
  int host_failure_limit = 1;
  int min_np = 1;
  std::optional<int> max_np;
  std::string host_discovery_script;
  // > 0: also run the discovery script every this many seconds while the job runs; when it lists
  // more usable slots than the job has (and --max-np allows more), the ranks are asked to
  // checkpoint (SIGUSR1) and the job restarts larger.
  double discovery_interval_s = 0;
  // A first SIGTERM or SIGINT to hvxrun is a preemption notice: it is forwarded to the ranks as
  // SIGUSR1, a checkpoint request (the trainer saves and ends cleanly; a program that does not
  // handle it ends), and hvxrun then exits kPreemptedExitCode. A second signal, or this many
  // seconds, stops the job as before. 0: stop at once.
  double preempt_grace_s = 30;
  int out_fd = 1;  // where tagged stdout/stderr lines and the summary go
  int err_fd = 2;
};

// The usage text for --help.
std::string LaunchUsage();

// Parses hvxrun's arguments (without argv[0]). Options end at "--" or at the first argument
// that is not an option. `-x VAR` takes VAR's value from `env`. Errors are one line, e.g.
// "unknown flag '--foo'" or "-x CUDA_HOME: not set in hvxrun's environment".
// A request for help returns a NotFound status whose message is the usage text.
absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args,
                                              const Environment& env);

// How slot counts of hosts named without one are found for `--slots-per-host auto`.
struct HostProbe {
  std::function<bool(const std::string& host)> is_local;
  int local_gpus = 0;
  // GPUs of a remote host; asked only for hosts without a slot count.
  std::function<absl::StatusOr<int>(const std::string& host)> remote_gpus;
};

struct JobSetup {
  Plan plan;
  ClusterHosts::Launcher launcher = ClusterHosts::Launcher::kSsh;
  std::string source;  // where the hosts came from: "-H", a hostfile, a cluster, "this host"
  // SageMaker-style clusters: this host is not the leader; it must start nothing.
  bool follower = false;
  std::string leader;
  // On the leader of such a cluster: the other hosts, which wait for it to send the job's status.
  std::vector<std::string> followers;
  // This host's name in the cluster's host list where the cluster says which it is (SageMaker's
  // current_host, SLURMD_NODENAME); empty otherwise. A SageMaker container's own hostname is not
  // its name in the job and need not resolve: mpiexec is given this one (-localhost) for the
  // other hosts' proxies to connect back to.
  std::string this_host;
  // How long the leader waits for the other hosts to answer before starting (--host-wait, else
  // the cluster's ClusterHosts::host_wait_s), and a follower for the leader's ranks beyond
  // --start-timeout.
  double host_wait_s = 0;
  // The leader first waits for its own name in DNS (ClusterHosts::own_name_in_dns); that wait and
  // the one for the other hosts share host_wait_s.
  bool own_name_in_dns = false;
  // Variables the cluster gives every rank (ClusterRankEnvironment); -x of the same name wins.
  std::vector<std::pair<std::string, std::string>> env;
};

// Refuses to run under another launcher, picks the hosts (-H, --hostfile, a cluster environment,
// or this host alone), decides slot counts and makes the plan.
absl::StatusOr<JobSetup> ResolveJob(const LaunchOptions& options, const Environment& env,
                                    const FileReader& read_file, const HostProbe& probe);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_OPTIONS_H_
