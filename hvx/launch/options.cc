#include "hvx/launch/options.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hvx/common/cluster.h"
#include "hvx/common/status.h"

namespace hvx {
namespace launch {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "': expected ", want));
}

absl::StatusOr<double> ParseSeconds(absl::string_view flag, absl::string_view value) {
  double s = 0;
  if (!absl::SimpleAtod(value, &s) || s < 0) {
    return FlagError(flag, value, "a non-negative number of seconds");
  }
  return s;
}

bool IsValidEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

absl::Status SetExport(absl::string_view arg, const Environment& env, LaunchOptions* o) {
  size_t eq = arg.find('=');
  std::string name(arg.substr(0, eq));
  if (!IsValidEnvName(name)) return FlagError("-x", arg, "VAR or VAR=VALUE");
  std::string value;
  if (eq != absl::string_view::npos) {
    value = std::string(arg.substr(eq + 1));
  } else {
    std::optional<std::string> v = env.Get(name);
    if (!v) {
      return absl::InvalidArgumentError(
          absl::StrCat("-x ", name, ": not set in hvxrun's environment (use -x ", name, "=VALUE)"));
    }
    value = *v;
  }
  o->env.emplace_back(std::move(name), std::move(value));
  return absl::OkStatus();
}

}  // namespace

std::string LaunchUsage() {
  return R"(usage: hvxrun [-np N] [-H host[:slots],... | --hostfile FILE] [options] -- PROGRAM [ARGS...]

Starts N copies of PROGRAM (one rank per slot) with MPICH's mpiexec, tags every output line with
its rank, and stops the whole job when any rank fails.

  -np N, -n N              number of processes (default: every slot)
  -H, --hosts LIST         host[:slots],... filled in this order (default: a detected cluster
                           environment, else this host)
  --hostfile FILE          lines "host", "host:N" or "host slots=N"; '#' starts a comment
  --slots-per-host auto|K  slots of hosts named without a count; auto = the host's GPUs, 1 without
  -x VAR[=VALUE]           export VAR to every rank (value from this environment when not given)
  --tag-output rank|full|none
                           line prefix: "[R] " (default), "[R host:L] ", or none
  --output-dir DIR         also write each rank's output to DIR/rank.R.log
  --launcher-exec CMD      remote shell used instead of ssh
  --start-timeout S        fail when some rank has not started after S seconds (default 60)
  --stop-timeout S         after a failure, kill what still runs after S seconds (default 10)
  --timeout S              stop the job after S seconds (default: no limit)
  --preempt-grace S        SIGTERM/SIGINT: ask the ranks to checkpoint (SIGUSR1) and give them S
                           seconds (default 30; 0: stop at once); a second signal stops them;
                           a job that ended cleanly after it exits 75
  --mpiexec PATH           MPICH hydra mpiexec to use (default: mpiexec on PATH)
  --dry-run                print the plan and the mpiexec command, start nothing
  --verbose                print the plan and the command before running

Elastic jobs:
  --max-restarts N         after a failure, start the job again up to N times (default 0) on the
                           hosts still usable; ranks see HVX_RESTART_COUNT and HVX_RUN_ID
  --host-failure-limit K   exclude a host after K failed attempts on it (default 1)
  --min-np M               end the job when fewer than M slots are usable (default 1)
  --max-np N               at most N processes however many slots there are
  --host-discovery-script PATH
                           prints "host:slots" lines: the hosts, read at the start and at every
                           restart, so a restart can also grow the job
  --discovery-interval S   also run it every S seconds; when it lists more slots, the ranks
                           checkpoint and the job restarts larger
)";
}

absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args,
                                              const Environment& env) {
  LaunchOptions o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string flag = args[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (flag.empty() || flag[0] != '-') break;
    std::optional<std::string> inline_value;
    if (absl::StartsWith(flag, "--") && flag.find('=') != std::string::npos) {
      inline_value = flag.substr(flag.find('=') + 1);
      flag = flag.substr(0, flag.find('='));
    }
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      }
      return args[++i];
    };
    auto no_value = [&]() -> absl::Status {
      if (inline_value) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " takes no value"));
      }
      return absl::OkStatus();
    };
    if (flag == "-h" || flag == "--help") {
      return absl::NotFoundError(LaunchUsage());
    } else if (flag == "-np" || flag == "-n" || flag == "--num-proc") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      int np = 0;
      if (!absl::SimpleAtoi(v, &np) || np < 1 || np > kMaxRanks) {
        return FlagError(flag, v, absl::StrCat("a positive integer up to ", kMaxRanks));
      }
      o.np = np;
    } else if (flag == "-H" || flag == "--hosts" || flag == "-host" || flag == "--host") {
      HVX_ASSIGN_OR_RETURN(o.hosts, value());
    } else if (flag == "--hostfile" || flag == "-hostfile") {
      HVX_ASSIGN_OR_RETURN(o.hostfile, value());
    } else if (flag == "--slots-per-host") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      int k = 0;
      if (v == "auto") {
        o.slots_per_host.reset();
      } else if (absl::SimpleAtoi(v, &k) && k > 0 && k <= kMaxSlotsPerHost) {
        o.slots_per_host = k;
      } else {
        return FlagError(flag, v,
                         absl::StrCat("auto or a positive integer up to ", kMaxSlotsPerHost));
      }
    } else if (flag == "-x") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      HVX_RETURN_IF_ERROR(SetExport(v, env, &o));
    } else if (flag == "--tag-output") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      if (v == "rank") {
        o.tag_output = TagMode::kRank;
      } else if (v == "full") {
        o.tag_output = TagMode::kFull;
      } else if (v == "none") {
        o.tag_output = TagMode::kNone;
      } else {
        return FlagError(flag, v, "rank, full or none");
      }
    } else if (flag == "--output-dir") {
      HVX_ASSIGN_OR_RETURN(o.output_dir, value());
    } else if (flag == "--launcher-exec") {
      HVX_ASSIGN_OR_RETURN(o.launcher_exec, value());
    } else if (flag == "--start-timeout") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      HVX_ASSIGN_OR_RETURN(o.start_timeout_s, ParseSeconds(flag, v));
    } else if (flag == "--stop-timeout") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      HVX_ASSIGN_OR_RETURN(o.stop_timeout_s, ParseSeconds(flag, v));
    } else if (flag == "--timeout") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      HVX_ASSIGN_OR_RETURN(o.timeout_s, ParseSeconds(flag, v));
    } else if (flag == "--preempt-grace") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      HVX_ASSIGN_OR_RETURN(o.preempt_grace_s, ParseSeconds(flag, v));
    } else if (flag == "--mpiexec") {
      HVX_ASSIGN_OR_RETURN(o.mpiexec, value());
    } else if (flag == "--max-restarts" || flag == "--host-failure-limit" || flag == "--min-np" ||
               flag == "--max-np") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      int n = 0;
      const int least = flag == "--max-restarts" ? 0 : 1;
      if (!absl::SimpleAtoi(v, &n) || n < least) {
        return FlagError(flag, v, least == 0 ? "a non-negative integer" : "a positive integer");
      }
      if (flag == "--max-restarts") o.max_restarts = n;
      if (flag == "--host-failure-limit") o.host_failure_limit = n;
      if (flag == "--min-np") o.min_np = n;
      if (flag == "--max-np") o.max_np = n;
    } else if (flag == "--host-discovery-script") {
      HVX_ASSIGN_OR_RETURN(o.host_discovery_script, value());
    } else if (flag == "--discovery-interval") {
      HVX_ASSIGN_OR_RETURN(std::string v, value());
      HVX_ASSIGN_OR_RETURN(o.discovery_interval_s, ParseSeconds(flag, v));
    } else if (flag == "--dry-run") {
      HVX_RETURN_IF_ERROR(no_value());
      o.dry_run = true;
    } else if (flag == "--verbose" || flag == "-v") {
      HVX_RETURN_IF_ERROR(no_value());
      o.verbose = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", args[i], "' (hvxrun --help lists the flags)"));
    }
  }
  o.program.assign(args.begin() + std::min(i, args.size()), args.end());
  if (o.program.empty()) {
    return absl::InvalidArgumentError("no program to run: hvxrun [options] -- PROGRAM [ARGS...]");
  }
  if (!o.hosts.empty() && !o.hostfile.empty()) {
    return absl::InvalidArgumentError("give either -H or --hostfile, not both");
  }
  if (o.discovery_interval_s > 0 && o.host_discovery_script.empty()) {
    return absl::InvalidArgumentError("--discovery-interval needs --host-discovery-script");
  }
  if (!o.host_discovery_script.empty() && (!o.hosts.empty() || !o.hostfile.empty())) {
    return absl::InvalidArgumentError(
        "--host-discovery-script lists the hosts: give it without -H or --hostfile");
  }
  return o;
}

absl::StatusOr<JobSetup> ResolveJob(const LaunchOptions& options, const Environment& env,
                                    const FileReader& read_file, const HostProbe& probe) {
  if (std::optional<std::string> launcher = DetectEnclosingLauncher(env)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "hvxrun is already running under ", *launcher,
        "; it will not launch a job inside a rank of another job: run the program directly"));
  }
  JobSetup setup;
  std::vector<HostSpec> specs;
  if (!options.hosts.empty()) {
    HVX_ASSIGN_OR_RETURN(specs, ParseHostList(options.hosts, "-H"));
    setup.source = "-H";
  } else if (!options.hostfile.empty()) {
    HVX_ASSIGN_OR_RETURN(std::string text, read_file(options.hostfile));
    HVX_ASSIGN_OR_RETURN(specs, ParseHostfile(text, options.hostfile));
    setup.source = absl::StrCat("hostfile ", options.hostfile);
  } else {
    HVX_ASSIGN_OR_RETURN(std::optional<ClusterHosts> cluster,
                         DetectClusterHosts(env, read_file, probe.local_gpus));
    if (cluster) {
      setup.source = cluster->source;
      setup.launcher = cluster->launcher;
      if (!cluster->is_leader) {
        setup.follower = true;
        setup.leader = cluster->hosts[0].name;
        return setup;
      }
      specs = cluster->hosts;
      if (options.slots_per_host) {
        for (HostSpec& h : specs) h.slots = options.slots_per_host;
      }
    } else {
      // This host alone: -np N means N local processes, as with a plain `mpiexec -n N`.
      int slots =
          options.slots_per_host.value_or(options.np.value_or(std::max(probe.local_gpus, 1)));
      specs.push_back({HostName("localhost"), slots});
      setup.source = "this host";
    }
  }
  HVX_RETURN_IF_ERROR(ValidateHosts(specs, setup.source));
  std::vector<Host> hosts;
  for (const HostSpec& s : specs) {
    int slots = 0;
    if (s.slots) {
      slots = *s.slots;
    } else if (options.slots_per_host) {
      slots = *options.slots_per_host;
    } else if (probe.is_local && probe.is_local(s.name)) {
      slots = std::max(probe.local_gpus, 1);
    } else if (probe.remote_gpus) {
      absl::StatusOr<int> gpus = probe.remote_gpus(s.name);
      if (!gpus.ok()) {
        return Annotate(gpus.status(),
                        absl::StrCat("cannot count the GPUs of host '", s.name,
                                     "' for --slots-per-host auto (give host:slots instead)"));
      }
      slots = std::clamp(*gpus, 1, kMaxSlotsPerHost);
    } else {
      slots = 1;
    }
    hosts.push_back({s.name, slots});
  }
  int total = 0;  // at most kMaxRanks: ValidateHosts bounded the counts given, the rest are small
  for (const Host& h : hosts) total += h.slots;
  HVX_ASSIGN_OR_RETURN(setup.plan, MakePlan(options.np.value_or(total), hosts));
  return setup;
}

}  // namespace launch
}  // namespace hvx
