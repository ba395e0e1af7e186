#include "hvx/launch/launch.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/cluster.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/launch/command.h"
#include "hvx/launch/output.h"
#include "hvx/launch/rank_wrapper.h"
#include "hvx/launch/restarts.h"

namespace hvx {
namespace launch {
namespace {

using Clock = std::chrono::steady_clock;

// When mpiexec ends before ranks report, the summary repeats the last stderr lines of this many
// of them; a large job that fails everywhere at once would otherwise repeat its whole output.
constexpr int kUnreportedRanksShown = 4;

// Signals to hvxrun (and SIGCHLD) arrive here so the poll loop sees them.
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const int saved = errno;
  unsigned char c = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &c, 1);
  errno = saved;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
Clock::duration FromSeconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::vector<char*> CArgv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (std::string& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read ends; -1 once closed
  int err = -1;
};

// Starts argv in its own process group with stdout/stderr on pipes. Variables that would make
// hydra pick other hosts or another launcher behind our back are removed from its environment.
absl::StatusOr<Child> Spawn(std::vector<std::string> argv) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  if (pipe2(err, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  std::vector<char*> cargv = CArgv(argv);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    // hvxrun killed outright (SIGKILL, the OOM killer) runs no handler: the kernel's SIGTERM
    // makes mpiexec stop the job instead of leaving it running with nobody to report it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    setpgid(0, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (const char* v : {"HYDRA_HOST_FILE", "HYDRA_RMK", "HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP",
                          "HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC", "MPIEXEC_TIMEOUT"}) {
      unsetenv(v);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) signal(sig, SIG_DFL);
    execvp(cargv[0], cargv.data());
    WriteAll(2, absl::StrCat("hvxrun: cannot run '", argv[0], "': ", strerror(errno), "\n"));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  return Child{pid, out[0], err[0]};
}

// Runs argv, returns its stdout; fails on a non-zero exit or after timeout_s (the child is killed).
absl::StatusOr<std::string> RunCapture(std::vector<std::string> argv, double timeout_s) {
  HVX_ASSIGN_OR_RETURN(Child c, Spawn(argv));
  std::string out, err;
  const Clock::time_point deadline = Clock::now() + FromSeconds(timeout_s);
  while (c.out >= 0 || c.err >= 0) {
    pollfd fds[2] = {{c.out, POLLIN, 0}, {c.err, POLLIN, 0}};
    int ms = static_cast<int>(Seconds(deadline - Clock::now()) * 1000);
    if (ms <= 0) break;
    if (poll(fds, 2, ms) < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = read(fds[k].fd, buf, sizeof(buf));
      if (n > 0) {
        (k == 0 ? out : err).append(buf, n);
      } else if (n == 0) {
        close(fds[k].fd);
        (k == 0 ? c.out : c.err) = -1;
      }
    }
  }
  const bool timed_out = c.out >= 0 || c.err >= 0;
  if (timed_out) kill(-c.pid, SIGKILL);
  if (c.out >= 0) close(c.out);
  if (c.err >= 0) close(c.err);
  int status = 0;
  waitpid(c.pid, &status, 0);
  const std::string shown = ShellJoin(argv);
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("'", shown, "' took over ", timeout_s, " s"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(
        absl::StrCat("'", shown, "' failed: ", absl::StripAsciiWhitespace(err)));
  }
  return out;
}

std::string SelfExe() {
  const std::string self = SelfExecutable();
  return self.empty() ? std::string("/proc/self/exe") : self;
}

// The per-rank wrapper: hvxrun_rank beside this binary (they are installed together, and Bazel
// builds them into the same directory), else this binary, which then must call
// MaybeRunRankWrapper first. hvxrun_rank links only the C++ library and starts much faster.
std::string DefaultWrapper() {
  const std::string self = SelfExe();
  const size_t slash = self.rfind('/');
  if (slash != std::string::npos) {
    const std::string sibling = self.substr(0, slash + 1) + "hvxrun_rank";
    if (access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return self;
}

// The network namespace of a process ("net:[4026531840]"), "" when it cannot be read.
std::string NetNamespace(const std::string& pid) {
  char buf[64];
  const ssize_t n = readlink(absl::StrCat("/proc/", pid, "/ns/net").c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, n) : std::string();
}

// Whether a hydra proxy runs on this host: in this network namespace, so that hosts sharing one
// kernel's process table (containers, the tests' namespace hosts) see only their own.
bool HydraProxyRunning() {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return false;
  const std::string own_net = NetNamespace("self");
  bool found = false;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    absl::StatusOr<std::string> comm = ReadFileFromDisk(absl::StrCat("/proc/", pid, "/comm"));
    if (comm.ok() && absl::StripAsciiWhitespace(*comm) == "hydra_pmi_proxy" &&
        NetNamespace(e->d_name) == own_net) {
      found = true;
      break;
    }
  }
  closedir(proc);
  return found;
}

// A follower host of a SageMaker-style cluster: the leader starts this host's ranks through the
// remote shell. Staying alive until they have run keeps the cluster's per-host entry point from
// ending (and the host from being released) while ranks still run here. With --max-restarts
// (the leader has the same command line) it also waits --start-timeout after its ranks end for a
// restart that brings them back.
absl::StatusOr<int> FollowLeader(const LaunchOptions& options, const JobSetup& setup) {
  WriteAll(options.err_fd,
           absl::StrCat("hvxrun: this host is not the leader of the ", setup.source, "; ",
                        setup.leader, " starts the ranks here. Waiting for them to finish.\n"));
  const Clock::time_point deadline = Clock::now() + FromSeconds(options.start_timeout_s);
  while (!HydraProxyRunning()) {
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no ranks were started on this host by the leader ", setup.leader,
                       " within ", options.start_timeout_s, " s"));
    }
    // Short jobs' proxies live well under a second: a coarser poll could miss them all.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  while (true) {
    while (HydraProxyRunning()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // The leader runs the same command: with --max-restarts it may start the job again here.
    if (options.max_restarts == 0) return 0;
    const Clock::time_point again_by = Clock::now() + FromSeconds(options.start_timeout_s);
    bool again = false;
    while (!again && Clock::now() < again_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      again = HydraProxyRunning();
    }
    if (!again) return 0;
    WriteAll(options.err_fd, absl::StrCat("hvxrun: ", setup.leader,
                                          " restarted the job; this host runs ranks again\n"));
  }
}

struct Failure {
  int rank = -1;
  std::string host;
  int exit_code = 0;
  int signal = 0;
  std::string message;
  Clock::time_point when;
};

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, const Plan& plan)
      : options_(options),
        plan_(plan),
        router_(
            plan, options.tag_output, options.out_fd, options.err_fd,
            [](int fd, absl::string_view data) { WriteAll(fd, data); },
            [this](const ControlRecord& r) { OnControl(r); }),
        out_demux_(
            [this](int src, absl::string_view d) { router_.OnBytes(Stream::kStdout, src, d); }),
        err_demux_(
            [this](int src, absl::string_view d) { router_.OnBytes(Stream::kStderr, src, d); }) {}

  absl::Status OpenOutputDir(const std::string& dir) { return router_.OpenOutputDir(dir); }

  int Run(Child child);

  // Polled every `interval_s` while the job runs (RunElastic's discovery): a non-empty answer
  // (what appeared) asks the ranks to checkpoint, and the job ends for a restart with more ranks.
  void WatchForGrowth(double interval_s, std::function<std::string()> more) {
    grow_interval_s_ = interval_s;
    more_slots_ = std::move(more);
  }

  // After Run: whether a restart may help (a rank failed, or ranks never started; not a signal
  // to hvxrun or --timeout), why the attempt ended, and the hosts at fault.
  struct Outcome {
    bool restartable = false;
    bool grow = false;  // every rank ended cleanly after a growth request
    std::string cause;
    std::vector<std::string> fault_hosts;
    // mpiexec ended before these hosts' ranks reported an exit: a host that died takes its
    // proxy with it, and hydra then ends the whole job. Which host is not known here.
    std::vector<std::string> lost_hosts;
  };
  Outcome outcome() const;

 private:
  void OnControl(const ControlRecord& r);
  void BeginStop(const char* why);
  void Say(absl::string_view text) {
    WriteAll(options_.err_fd, absl::StrCat("hvxrun: ", text, "\n"));
  }
  int Report(int mpiexec_status);

  const LaunchOptions& options_;
  const Plan& plan_;
  OutputRouter router_;
  StreamDemuxer out_demux_;
  StreamDemuxer err_demux_;

  Child child_;
  Clock::time_point start_;
  std::set<int> started_;
  std::map<int, ControlRecord> exits_;
  std::optional<Failure> failure_;
  bool stopping_ = false;
  bool killed_ = false;
  bool start_failed_ = false;
  bool timed_out_ = false;
  int got_signal_ = 0;
  // A preemption notice was forwarded as a checkpoint request; the ranks have until this.
  bool preempting_ = false;
  Clock::time_point preempt_deadline_;
  double grow_interval_s_ = 0;
  std::function<std::string()> more_slots_;
  std::string growing_;  // what appeared, once the ranks were asked to checkpoint for it
  Clock::time_point next_growth_check_;
  Clock::time_point kill_at_;
  std::optional<Clock::time_point> all_exited_at_;
};

Supervisor::Outcome Supervisor::outcome() const {
  Outcome o;
  if (got_signal_ != 0 || timed_out_) return o;
  if (!growing_.empty() && !failure_ && static_cast<int>(exits_.size()) == plan_.size) {
    o.restartable = true;
    o.grow = true;
    o.cause = absl::StrCat("the discovery script listed more slots (", growing_, ")");
    return o;
  }
  if (failure_) {
    const RankPlacement& p = plan_.ranks[failure_->rank];
    o.restartable = true;
    o.cause =
        absl::StrCat("rank ", failure_->rank, " on host ", p.host, " ",
                     failure_->message.empty() ? DescribeExit(failure_->exit_code, failure_->signal)
                                               : failure_->message);
    o.fault_hosts = {p.host};
  } else if (start_failed_) {
    o.restartable = true;
    for (const RankPlacement& p : plan_.ranks) {
      if (!started_.count(p.rank) &&
          std::find(o.fault_hosts.begin(), o.fault_hosts.end(), p.host) == o.fault_hosts.end()) {
        o.fault_hosts.push_back(p.host);
      }
    }
    o.cause = absl::StrCat("ranks did not start on host ", absl::StrJoin(o.fault_hosts, ", "));
  } else if (static_cast<int>(exits_.size()) < plan_.size) {
    o.restartable = true;
    for (const RankPlacement& p : plan_.ranks) {
      if (!exits_.count(p.rank) &&
          std::find(o.lost_hosts.begin(), o.lost_hosts.end(), p.host) == o.lost_hosts.end()) {
        o.lost_hosts.push_back(p.host);
      }
    }
    o.cause = "mpiexec ended before the ranks reported their exit";
  }
  return o;
}

void Supervisor::OnControl(const ControlRecord& r) {
  switch (r.kind) {
    case ControlRecord::Kind::kStart:
      started_.insert(r.rank);
      break;
    case ControlRecord::Kind::kExit:
      exits_[r.rank] = r;
      // A rank that does not handle the checkpoint request ends by it: the stop that was asked.
      if ((preempting_ || !growing_.empty()) && r.signal == SIGUSR1) {
        BeginStop("a rank ended on the checkpoint request");
      } else if ((r.exit_code != 0 || r.signal != 0) && !failure_ && !stopping_) {
        failure_ = Failure{r.rank, r.host, r.exit_code, r.signal, "", Clock::now()};
        BeginStop("a rank failed");
      }
      if (static_cast<int>(exits_.size()) == plan_.size) all_exited_at_ = Clock::now();
      break;
    case ControlRecord::Kind::kError:
      if (!failure_ && !stopping_) {
        failure_ = Failure{r.rank, r.host, 1, 0, r.message, Clock::now()};
        BeginStop("a rank failed");
      }
      break;
  }
}

void Supervisor::BeginStop(const char* why) {
  if (stopping_) return;
  stopping_ = true;
  kill_at_ = Clock::now() + FromSeconds(options_.stop_timeout_s);
  if (options_.verbose) Say(absl::StrCat("stopping the job: ", why));
  router_.set_show_mpiexec(options_.verbose);
  // Hydra's Ctrl-C path: it signals every rank on every host and exits.
  kill(child_.pid, SIGINT);
}

int Supervisor::Run(Child child) {
  child_ = child;
  start_ = Clock::now();
  const Clock::time_point start_deadline = start_ + FromSeconds(options_.start_timeout_s);
  next_growth_check_ = start_ + FromSeconds(grow_interval_s_);
  const bool has_deadline = options_.timeout_s > 0;
  const Clock::time_point job_deadline = start_ + FromSeconds(options_.timeout_s);
  // Once mpiexec is gone, remote shells may still hold the pipes for a moment; not longer.
  constexpr double kDrainSeconds = 2;
  std::optional<int> mpiexec_status;
  Clock::time_point exited_at;
  while (true) {
    const Clock::time_point now = Clock::now();
    if (!stopping_ && static_cast<int>(started_.size()) < plan_.size && now > start_deadline) {
      start_failed_ = true;
      BeginStop("ranks did not start in time");
    }
    if (preempting_ && !stopping_ && now > preempt_deadline_) {
      BeginStop("--preempt-grace expired");
    }
    if (grow_interval_s_ > 0 && growing_.empty() && !preempting_ && !stopping_ &&
        now > next_growth_check_) {
      next_growth_check_ = now + FromSeconds(grow_interval_s_);
      growing_ = more_slots_();
      if (!growing_.empty()) {
        kill(child_.pid, SIGUSR1);
        Say(absl::StrCat("the discovery script lists more slots (", growing_,
                         "): asked the ranks to checkpoint (SIGUSR1) for a restart with more"));
      }
    }
    if (!stopping_ && has_deadline && now > job_deadline) {
      timed_out_ = true;
      BeginStop("--timeout expired");
    }
    // Every rank has ended but mpiexec has not: hydra's own teardown is stuck.
    if (!stopping_ && !mpiexec_status && all_exited_at_ &&
        now > *all_exited_at_ + FromSeconds(options_.stop_timeout_s)) {
      BeginStop("mpiexec did not exit after every rank had ended");
    }
    if (stopping_ && !killed_ && !mpiexec_status && now > kill_at_) {
      killed_ = true;
      kill(-child_.pid, SIGKILL);
    }
    if (mpiexec_status &&
        ((child_.out < 0 && child_.err < 0) || now > exited_at + FromSeconds(kDrainSeconds))) {
      break;
    }
    std::vector<pollfd> fds = {
        {g_signal_pipe[0], POLLIN, 0}, {child_.out, POLLIN, 0}, {child_.err, POLLIN, 0}};
    poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n = read(g_signal_pipe[0], sigs, sizeof(sigs));
      for (ssize_t k = 0; k < n; ++k) {
        if (sigs[k] == SIGCHLD) continue;
        const bool notice = sigs[k] == SIGTERM || sigs[k] == SIGINT;
        if (got_signal_ == 0 && notice && options_.preempt_grace_s > 0 && !stopping_) {
          // Hydra forwards SIGUSR1 to every rank on every host.
          got_signal_ = sigs[k];
          preempting_ = true;
          preempt_deadline_ = now + FromSeconds(options_.preempt_grace_s);
          kill(child_.pid, SIGUSR1);
          Say(absl::StrCat("signal ", sigs[k], " (", strsignal(sigs[k]),
                           "): asked the ranks to checkpoint and end (SIGUSR1); they have ",
                           options_.preempt_grace_s,
                           " s (--preempt-grace), a second signal stops them now"));
        } else if (got_signal_ == 0 || preempting_) {
          if (got_signal_ == 0) got_signal_ = sigs[k];
          BeginStop("hvxrun was signalled");
        }
      }
    }
    for (int k = 1; k <= 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t n = read(fds[k].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      StreamDemuxer& demux = k == 1 ? out_demux_ : err_demux_;
      if (n > 0) {
        demux.Feed(absl::string_view(buf, n));
      } else {
        demux.Finish();
        close(fds[k].fd);
        (k == 1 ? child_.out : child_.err) = -1;
      }
    }
    if (!mpiexec_status) {
      int status = 0;
      if (waitpid(child_.pid, &status, WNOHANG) == child_.pid) {
        mpiexec_status = status;
        exited_at = Clock::now();
      }
    }
  }
  for (int* fd : {&child_.out, &child_.err}) {
    if (*fd >= 0) close(*fd);
  }
  out_demux_.Finish();
  err_demux_.Finish();
  router_.Finish();
  return Report(*mpiexec_status);
}

int Supervisor::Report(int mpiexec_status) {
  const double elapsed = Seconds(Clock::now() - start_);
  if (failure_) {
    const Failure& f = *failure_;
    const RankPlacement& p = plan_.ranks[f.rank];
    std::string what = f.message.empty() ? DescribeExit(f.exit_code, f.signal) : f.message;
    Say(absl::StrCat("rank ", f.rank, " on host ", p.host, " (local rank ", p.local_rank, ") ",
                     what, "; it was the first of ", plan_.size,
                     " ranks to fail, the others were stopped (job ran ",
                     absl::StrFormat("%.1f", elapsed), " s)"));
    std::vector<std::string> lines = router_.LastStderrLines(f.rank);
    if (lines.empty()) {
      Say(absl::StrCat("rank ", f.rank, " wrote nothing on stderr"));
    } else {
      Say(absl::StrCat("last stderr lines of rank ", f.rank, ":"));
      for (const std::string& l : lines) Say(absl::StrCat("  ", l));
    }
    return f.signal != 0 ? 128 + f.signal : (f.exit_code != 0 ? f.exit_code : 1);
  }
  if (preempting_ && !stopping_ && static_cast<int>(exits_.size()) == plan_.size &&
      std::all_of(exits_.begin(), exits_.end(),
                  [](const auto& e) { return e.second.exit_code == 0 && e.second.signal == 0; })) {
    Say(absl::StrCat("preempted: every rank ended cleanly after the checkpoint request (signal ",
                     got_signal_, "); exit status ", kPreemptedExitCode,
                     ": run the same command again to resume"));
    return kPreemptedExitCode;
  }
  if (got_signal_ != 0) {
    Say(absl::StrCat("stopped the job on signal ", got_signal_, " (", strsignal(got_signal_), ")"));
    return 128 + got_signal_;
  }
  if (start_failed_) {
    std::map<std::string, std::vector<int>> missing;
    for (const RankPlacement& p : plan_.ranks) {
      if (!started_.count(p.rank)) missing[p.host].push_back(p.rank);
    }
    std::vector<std::string> parts;
    for (const auto& [host, ranks] : missing) {
      parts.push_back(absl::StrCat(host, " (ranks ", absl::StrJoin(ranks, ","), ")"));
    }
    Say(absl::StrCat("ranks did not start within ", options_.start_timeout_s,
                     " s (--start-timeout) on host ", absl::StrJoin(parts, ", "),
                     ": check that the host is reachable with the remote shell and that the "
                     "program exists there"));
    for (const std::string& l : router_.LastMpiexecLines()) Say(absl::StrCat("  ", l));
    return 1;
  }
  if (timed_out_) {
    Say(absl::StrCat("stopped the job after --timeout ", options_.timeout_s, " s"));
    return 124;
  }
  if (static_cast<int>(exits_.size()) == plan_.size) return 0;
  std::vector<int> unreported;
  for (const RankPlacement& p : plan_.ranks) {
    if (!exits_.count(p.rank)) unreported.push_back(p.rank);
  }
  const int code =
      WIFEXITED(mpiexec_status) ? WEXITSTATUS(mpiexec_status) : 128 + WTERMSIG(mpiexec_status);
  Say(absl::StrCat("mpiexec ended (",
                   DescribeExit(WIFEXITED(mpiexec_status) ? code : 0,
                                WIFSIGNALED(mpiexec_status) ? WTERMSIG(mpiexec_status) : 0),
                   ") before ranks ", absl::StrJoin(unreported, ","), " reported their exit"));
  for (const std::string& l : router_.LastMpiexecLines()) Say(absl::StrCat("  ", l));
  // A rank that ends the job itself (MPI_Abort, or an MPI error in MPI_Init, which aborts) reaches
  // hydra before its wrapper's exit record does; what it wrote last says why.
  int shown = 0;
  for (int rank : unreported) {
    const std::vector<std::string> lines = router_.LastStderrLines(rank);
    if (lines.empty()) continue;
    if (++shown > kUnreportedRanksShown) {
      Say("(the last stderr lines of further ranks are above, tagged by rank)");
      break;
    }
    Say(absl::StrCat("last stderr lines of rank ", rank, " (host ", plan_.ranks[rank].host, "):"));
    for (const std::string& l : lines) Say(absl::StrCat("  ", l));
  }
  return code != 0 ? code : 1;
}

}  // namespace

HostProbe SystemHostProbe(const LaunchOptions& options, const Environment& env) {
  HostProbe probe;
  const std::string self = HostName();
  probe.local_gpus = CountVisibleGpus(env);
  probe.is_local = [self](const std::string& host) {
    return host == "localhost" || host == "127.0.0.1" || host == self ||
           host == self.substr(0, self.find('.'));
  };
  const std::string shell = options.launcher_exec.empty() ? "ssh" : options.launcher_exec;
  const double timeout = options.start_timeout_s;
  probe.remote_gpus = [shell, timeout](const std::string& host) -> absl::StatusOr<int> {
    HVX_ASSIGN_OR_RETURN(
        std::string out,
        RunCapture(
            {shell, host,
             "if [ -n \"${CUDA_VISIBLE_DEVICES+x}\" ]; then echo \"cvd=$CUDA_VISIBLE_DEVICES\"; "
             "fi; ls /proc/driver/nvidia/gpus 2>/dev/null | wc -l"},
            timeout));
    MapEnvironment remote;
    int dir_count = 0;
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
      line = absl::StripAsciiWhitespace(line);
      if (absl::ConsumePrefix(&line, "cvd=")) {
        remote.Set("CUDA_VISIBLE_DEVICES", std::string(line));
      } else if (!absl::SimpleAtoi(line, &dir_count)) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected GPU probe output: ", out));
      }
    }
    return remote.Get("CUDA_VISIBLE_DEVICES") ? CountVisibleGpus(remote) : dir_count;
  };
  return probe;
}

absl::StatusOr<int> RunJob(const LaunchOptions& options) {
  return RunJob(options, Environment::Process());
}

namespace {

// One start of the job on `setup`'s plan, supervised to its end; *outcome says whether a restart
// may help.
absl::StatusOr<int> RunAttempt(const LaunchOptions& options, const JobSetup& setup,
                               Supervisor::Outcome* outcome,
                               std::function<std::string()> more_slots = nullptr) {
  const std::string wrapper = options.wrapper.empty() ? DefaultWrapper() : options.wrapper;
  const std::vector<std::string> argv = MpiexecCommand(options, setup, wrapper);
  if (options.dry_run || options.verbose) {
    std::string text =
        absl::StrCat("hvxrun: plan from ", setup.source, ": ", setup.plan.size, " processes on ",
                     setup.plan.used_hosts.size(), " hosts\n", FormatPlan(setup.plan),
                     "hvxrun: command: ", ShellJoin(argv), "\n");
    WriteAll(options.dry_run ? options.out_fd : options.err_fd, text);
    if (options.dry_run) return 0;
  }
  Supervisor supervisor(options, setup.plan);
  if (more_slots) supervisor.WatchForGrowth(options.discovery_interval_s, std::move(more_slots));
  if (!options.output_dir.empty())
    HVX_RETURN_IF_ERROR(supervisor.OpenOutputDir(options.output_dir));

  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoToStatus(errno, "pipe");
  struct sigaction sa {
  }, old[4];
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  for (int k = 0; k < 4; ++k) sigaction(sigs[k], &sa, &old[k]);
  struct sigaction ignore {
  }, old_pipe;
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old_pipe);

  absl::StatusOr<Child> child = Spawn(argv);
  int rc = child.ok() ? supervisor.Run(*child) : 0;
  if (child.ok() && outcome != nullptr) *outcome = supervisor.outcome();

  for (int k = 0; k < 4; ++k) sigaction(sigs[k], &old[k], nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
  if (!child.ok()) return child.status();
  return rc;
}

// The hosts an elastic job may use now: the discovery script's, else those the options name
// (with every slot they have).
absl::StatusOr<std::vector<Host>> CandidateHosts(const LaunchOptions& options,
                                                 const Environment& env) {
  if (!options.host_discovery_script.empty()) {
    HVX_ASSIGN_OR_RETURN(std::string out,
                         RunCapture({options.host_discovery_script}, options.start_timeout_s));
    return ParseDiscoveredHosts(out, options.host_discovery_script);
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
  const std::string shell = options.launcher_exec.empty() ? "ssh" : options.launcher_exec;
  std::vector<std::string> gone;
  for (const std::string& h : hosts) {
    if (probe.is_local(h)) continue;
    if (!RunCapture({shell, h, "true"}, std::min(options.start_timeout_s, 10.0)).ok()) {
      gone.push_back(h);
    }
  }
  return gone;
}

// --max-restarts: attempts until one succeeds, the restarts run out or too few slots are left.
absl::StatusOr<int> RunElastic(const LaunchOptions& options, const Environment& env,
                               const JobSetup& first) {
  const std::string run_id = env.GetNonEmpty("HVX_RUN_ID").value_or(NewRunId());
  HostHealth health;
  std::string cause;
  bool grew = false;
  int failed_restarts = 0;  // what --max-restarts counts; a restart to grow is not one
  int rc = 0;
  // Without a discovery script the hosts never change: resolve them (and probe their GPUs) once.
  std::vector<Host> hosts;
  if (options.host_discovery_script.empty()) {
    HVX_ASSIGN_OR_RETURN(hosts, CandidateHosts(options, env));
  }
  for (int attempt = 0;; ++attempt) {
    if (!options.host_discovery_script.empty()) {
      HVX_ASSIGN_OR_RETURN(hosts, CandidateHosts(options, env));
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
    HVX_ASSIGN_OR_RETURN(JobSetup setup,
                         ResolveJob(*next, env, ReadFileFromDisk, SystemHostProbe(*next, env)));
    setup.launcher = first.launcher;  // inside SLURM, srun still starts the ranks
    setup.source = absl::StrCat(first.source, ", attempt ", attempt);
    // While it runs: does the discovery script list more than this plan has?
    std::function<std::string()> more_slots;
    if (options.discovery_interval_s > 0) {
      const int np = next->np.value_or(0);
      more_slots = [&options, &env, &health, np, attempt, &run_id]() -> std::string {
        absl::StatusOr<std::vector<Host>> now = CandidateHosts(options, env);
        if (!now.ok()) return "";
        absl::StatusOr<LaunchOptions> bigger = PlanAttempt(options, *now, health, attempt, run_id);
        if (!bigger.ok() || bigger->np.value_or(0) <= np) return "";
        return absl::StrCat("np ", bigger->np.value_or(0), " on ", bigger->hosts);
      };
    }
    Supervisor::Outcome outcome;
    HVX_ASSIGN_OR_RETURN(rc, RunAttempt(*next, setup, &outcome, std::move(more_slots)));
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
    const std::vector<std::string> gone =
        UnreachableHosts(options, SystemHostProbe(options, env), outcome.lost_hosts);
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

}  // namespace

absl::StatusOr<int> RunJob(const LaunchOptions& options, const Environment& env) {
  HVX_ASSIGN_OR_RETURN(JobSetup setup,
                       ResolveJob(options, env, ReadFileFromDisk, SystemHostProbe(options, env)));
  if (setup.follower) return FollowLeader(options, setup);
  if (options.max_restarts > 0 || !options.host_discovery_script.empty()) {
    if (options.dry_run) {
      return absl::InvalidArgumentError("--dry-run prints one plan: give it without elastic flags");
    }
    return RunElastic(options, env, setup);
  }
  return RunAttempt(options, setup, nullptr);
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
  absl::StatusOr<int> rc = RunJob(*options);
  if (!rc.ok()) {
    WriteAll(2, absl::StrCat("hvxrun: ", rc.status().message(), "\n"));
    return 2;
  }
  return *rc;
}

}  // namespace launch
}  // namespace hvx
