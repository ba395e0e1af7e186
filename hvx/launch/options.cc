#include "hvx/launch/options.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hvx/common/cluster.h"
#include "hvx/common/status.h"
#include "hvx/launch/cpu_binding.h"

namespace hvx {
namespace launch {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "': expected ", want));
}

absl::StatusOr<double> ParseSeconds(absl::string_view flag, absl::string_view value) {
  double s = 0;
  if (!absl::SimpleAtod(value, &s) || !(s >= 0 && s <= kMaxSeconds)) {
    return FlagError(flag, value, absl::StrCat("seconds, from 0 to ", kMaxSeconds));
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
  --failure-file PATH      when the job fails, write why to PATH (hvxrun's summary, at most
                           1 KiB; SageMaker shows /opt/ml/output/failure as the job's reason)
  --bind-to core|none      core (default): each rank on its own block of the host's CPUs (those
                           hvxrun may use, split evenly; no binding with more ranks than CPUs);
                           none: ranks unbound
  --launcher-exec CMD      remote shell used instead of ssh
  --start-timeout S        fail when some rank has not started after S seconds (default 60)
  --host-wait S            first wait up to S seconds for every other host to answer the remote
                           shell (default 1800 on SageMaker and in an MPIJob's launcher, whose
                           hosts start minutes apart; 0 elsewhere), an MPIJob's launcher first for
                           its own name in DNS within the same S; a follower host waits as long
                           for the leader
  --stop-timeout S         after a failure, kill what still runs after S seconds (default 10)
  --timeout S              stop the job after S seconds (default: no limit)
  --preempt-grace S        SIGTERM/SIGINT: ask the ranks to checkpoint (SIGUSR1) and give them S
                           seconds (default 30; 0: stop at once); a second signal stops them;
                           a job that ended cleanly after it exits 75
  --mpiexec PATH           MPICH hydra mpiexec to use (default: MPICH's on PATH, also behind
                           another MPI's mpiexec; Open MPI's is refused)
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

namespace {

// One hvxrun flag: its spellings, whether it takes a value ("--flag V" or "--flag=V"), and what it
// sets in the options. ParseLaunchArgs reads the command line through this table.
struct FlagSpec {
  std::vector<absl::string_view> names;
  bool takes_value;
  std::function<absl::Status(absl::string_view flag, const std::string& value,
                             const Environment& env, LaunchOptions* o)>
      apply;
};

template <typename T>
FlagSpec TextFlag(std::vector<absl::string_view> names, T LaunchOptions::*field) {
  return {std::move(names), true,
          [field](absl::string_view, const std::string& v, const Environment&, LaunchOptions* o) {
            o->*field = v;
            return absl::OkStatus();
          }};
}

// Seconds, stored in `field` (a double or an optional<double>).
template <typename T>
FlagSpec SecondsFlag(absl::string_view name, T LaunchOptions::*field) {
  return {{name},
          true,
          [field](absl::string_view flag, const std::string& v, const Environment&,
                  LaunchOptions* o) -> absl::Status {
            HVX_ASSIGN_OR_RETURN(o->*field, ParseSeconds(flag, v));
            return absl::OkStatus();
          }};
}

// An integer of at least `least`, stored in `field` (an int or an optional<int>).
template <typename T>
FlagSpec CountFlag(absl::string_view name, int least, T LaunchOptions::*field) {
  return {{name},
          true,
          [field, least](absl::string_view flag, const std::string& v, const Environment&,
                         LaunchOptions* o) {
            int n = 0;
            if (!absl::SimpleAtoi(v, &n) || n < least) {
              return FlagError(flag, v,
                               least == 0 ? "a non-negative integer" : "a positive integer");
            }
            o->*field = n;
            return absl::OkStatus();
          }};
}

FlagSpec SwitchFlag(std::vector<absl::string_view> names, bool LaunchOptions::*field) {
  return {std::move(names), false,
          [field](absl::string_view, const std::string&, const Environment&, LaunchOptions* o) {
            o->*field = true;
            return absl::OkStatus();
          }};
}

absl::Status SetNp(absl::string_view flag, const std::string& v, const Environment&,
                   LaunchOptions* o) {
  int np = 0;
  if (!absl::SimpleAtoi(v, &np) || np < 1 || np > kMaxRanks) {
    return FlagError(flag, v, absl::StrCat("a positive integer up to ", kMaxRanks));
  }
  o->np = np;
  return absl::OkStatus();
}

absl::Status SetSlotsPerHost(absl::string_view flag, const std::string& v, const Environment&,
                             LaunchOptions* o) {
  int k = 0;
  if (v == "auto") {
    o->slots_per_host.reset();
  } else if (absl::SimpleAtoi(v, &k) && k > 0 && k <= kMaxSlotsPerHost) {
    o->slots_per_host = k;
  } else {
    return FlagError(flag, v, absl::StrCat("auto or a positive integer up to ", kMaxSlotsPerHost));
  }
  return absl::OkStatus();
}

absl::Status SetTagOutput(absl::string_view flag, const std::string& v, const Environment&,
                          LaunchOptions* o) {
  if (v == "rank") {
    o->tag_output = TagMode::kRank;
  } else if (v == "full") {
    o->tag_output = TagMode::kFull;
  } else if (v == "none") {
    o->tag_output = TagMode::kNone;
  } else {
    return FlagError(flag, v, "rank, full or none");
  }
  return absl::OkStatus();
}

absl::Status SetBindTo(absl::string_view flag, const std::string& v, const Environment&,
                       LaunchOptions* o) {
  if (v != "core" && v != "none") return FlagError(flag, v, "core or none");
  o->env.emplace_back(kBindToVariable, v);
  return absl::OkStatus();
}

const std::vector<FlagSpec>& LaunchFlags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {{"-h", "--help"},
       false,
       [](absl::string_view, const std::string&, const Environment&, LaunchOptions*) {
         return absl::NotFoundError(LaunchUsage());
       }},
      {{"-np", "-n", "--num-proc"}, true, SetNp},
      TextFlag({"-H", "--hosts", "-host", "--host"}, &LaunchOptions::hosts),
      TextFlag({"--hostfile", "-hostfile"}, &LaunchOptions::hostfile),
      {{"--slots-per-host"}, true, SetSlotsPerHost},
      {{"-x"},
       true,
       [](absl::string_view, const std::string& v, const Environment& env, LaunchOptions* o) {
         return SetExport(v, env, o);
       }},
      {{"--tag-output"}, true, SetTagOutput},
      {{"--bind-to"}, true, SetBindTo},
      TextFlag({"--output-dir"}, &LaunchOptions::output_dir),
      TextFlag({"--failure-file"}, &LaunchOptions::failure_file),
      TextFlag({"--launcher-exec"}, &LaunchOptions::launcher_exec),
      SecondsFlag("--start-timeout", &LaunchOptions::start_timeout_s),
      SecondsFlag("--host-wait", &LaunchOptions::host_wait_s),
      SecondsFlag("--stop-timeout", &LaunchOptions::stop_timeout_s),
      SecondsFlag("--timeout", &LaunchOptions::timeout_s),
      SecondsFlag("--preempt-grace", &LaunchOptions::preempt_grace_s),
      TextFlag({"--mpiexec"}, &LaunchOptions::mpiexec),
      CountFlag("--max-restarts", 0, &LaunchOptions::max_restarts),
      CountFlag("--host-failure-limit", 1, &LaunchOptions::host_failure_limit),
      CountFlag("--min-np", 1, &LaunchOptions::min_np),
      CountFlag("--max-np", 1, &LaunchOptions::max_np),
      TextFlag({"--host-discovery-script"}, &LaunchOptions::host_discovery_script),
      SecondsFlag("--discovery-interval", &LaunchOptions::discovery_interval_s),
      SwitchFlag({"--dry-run"}, &LaunchOptions::dry_run),
      SwitchFlag({"--verbose", "-v"}, &LaunchOptions::verbose),
  };
  return *flags;
}

const FlagSpec* FindFlag(absl::string_view flag) {
  for (const FlagSpec& spec : LaunchFlags()) {
    if (std::find(spec.names.begin(), spec.names.end(), flag) != spec.names.end()) return &spec;
  }
  return nullptr;
}

}  // namespace

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
    const FlagSpec* spec = FindFlag(flag);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", args[i], "' (hvxrun --help lists the flags)"));
    }
    std::string value;
    if (spec->takes_value && inline_value) {
      value = *inline_value;
    } else if (spec->takes_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      }
      value = args[++i];
    } else if (inline_value) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " takes no value"));
    }
    HVX_RETURN_IF_ERROR(spec->apply(flag, value, env, &o));
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
  setup.host_wait_s = options.host_wait_s.value_or(0);
  setup.env = ClusterRankEnvironment(env, read_file);
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
      setup.host_wait_s = options.host_wait_s.value_or(cluster->host_wait_s);
      setup.this_host = cluster->current_host;
      setup.own_name_in_dns = cluster->own_name_in_dns;
      if (!cluster->is_leader) {
        setup.follower = true;
        setup.leader = cluster->hosts[0].name;
        return setup;
      }
      specs = cluster->hosts;
      if (cluster->leader_launches) {
        for (size_t i = 1; i < specs.size(); ++i) setup.followers.push_back(specs[i].name);
      }
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
