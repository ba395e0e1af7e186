#include "hvx/launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/launch/command.h"
#include "hvx/launch/flight_verdict.h"
#include "hvx/launch/output.h"
#include "hvx/launch/rank_wrapper.h"
#include "hvx/launch/records.h"
#include "hvx/launch/subprocess.h"

namespace hvx {
namespace launch {
namespace {

// When mpiexec ends before ranks report, the summary repeats the last stderr lines of this many
// of them; a large job that fails everywhere at once would otherwise repeat its whole output.
constexpr int kUnreportedRanksShown = 4;

// A rank ended cleanly when it exited 0, or kPreemptedExitCode after saving its state.
bool EndedCleanly(const ControlRecord& r) {
  return r.signal == 0 && (r.exit_code == 0 || r.exit_code == kPreemptedExitCode);
}

// Signals to hvxrun (and SIGCHLD) arrive here so the poll loop sees them.
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const int saved = errno;
  unsigned char c = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &c, 1);
  errno = saved;
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
  const std::string dir = DirName(self);
  if (!dir.empty()) {
    const std::string sibling = absl::StrCat(dir, "/hvxrun_rank");
    if (access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return self;
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

  // After Run: whether a restart may help, and why the attempt ended.
  using Outcome = AttemptOutcome;
  Outcome outcome() const;

 private:
  void OnControl(const ControlRecord& r);
  // The verdict from the ranks' flight recorders, when any sent theirs, and where the merged
  // record was written.
  void ReportFlights();
  void BeginStop(const char* why);
  // BeginStop for a failing rank; when the ranks' flight recorders speak, after kFlightGrace, so
  // that the ranks failing with it (a collective timing out fails every rank that waited in it)
  // send theirs first: hydra's stop cuts their output short.
  void StopSoon();
  // Well inside the 1 s a failing rank's wrapper waits for hvxrun before it aborts the job.
  static constexpr Clock::duration kFlightGrace = std::chrono::milliseconds(300);
  std::optional<Clock::time_point> stop_soon_;
  void Say(absl::string_view text) {
    WriteAll(options_.err_fd, absl::StrCat("hvxrun: ", text, "\n"));
    if (reporting_) report_.emplace_back(text);
  }
  // The summary at the attempt's end; a failing one is kept for LastFailureSummary.
  int Report(int mpiexec_status);
  int Summarize(int mpiexec_status);
  // Signals mpiexec unless it has been reaped (a record read while draining its pipes must not
  // signal whatever process has its pid now).
  void SignalMpiexec(int sig) {
    if (!reaped_) kill(child_.pid, sig);
  }

  const LaunchOptions& options_;
  const Plan& plan_;
  OutputRouter router_;
  StreamDemuxer out_demux_;
  StreamDemuxer err_demux_;

  Child child_;
  Clock::time_point start_;
  std::set<int> started_;
  std::map<int, ControlRecord> exits_;
  // A dump being received becomes the rank's flight record once its events are all in.
  void CommitFlight(int rank) {
    auto it = incoming_flights_.find(rank);
    if (it == incoming_flights_.end() ||
        static_cast<int64_t>(it->second.events.size()) < expected_events_[rank]) {
      return;
    }
    // Stacks come after a dump's events, when the program was asked for them: the last ones stay
    // until new ones come.
    auto last = flights_.find(rank);
    if (last != flights_.end()) {
      it->second.stack = std::move(last->second.stack);
      it->second.stack_why = last->second.stack_why;
    }
    flights_[rank] = std::move(it->second);
    incoming_flights_.erase(it);
  }

  std::map<int, RankFlight> flights_;  // the flight recorders the wrappers sent
  std::map<int, RankFlight> incoming_flights_;
  std::map<int, int64_t> expected_events_;
  struct IncomingStacks {
    std::string why;
    int64_t expected = 0;
    std::vector<std::string> lines;
  };
  std::map<int, IncomingStacks> incoming_stacks_;  // a set of stack lines still coming
  // What the last "idle" dump of each rank read of its process (state, wchan): read while the
  // job ran, unlike the dumps at its end.
  std::map<int, std::pair<std::string, std::string>> idle_proc_;
  std::set<int> ended_before_stop_;  // ranks whose exit came before the job was being stopped
  std::optional<Failure> failure_;
  bool stopping_ = false;
  bool killed_ = false;
  // Set when mpiexec has been reaped: its pid may belong to another process from then on.
  bool reaped_ = false;
  bool reporting_ = false;  // in Report: what Say says is kept in report_
  std::vector<std::string> report_;
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
  Clock::time_point stop_began_;
  Clock::time_point kill_at_;
  std::optional<Clock::time_point> all_exited_at_;
  // The first rank that ended with kPreemptedExitCode unasked (no notice, no growth) while others
  // ran, and when it did: the others have --stop-timeout to end too, or it counts as a failure (a
  // program may exit 75 on an error of its own, and its peers would wait for it forever).
  std::optional<int> lone_stop_;  // the rank; its record is in exits_
  Clock::time_point lone_stop_at_;
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
      if (!stopping_) ended_before_stop_.insert(r.rank);
      // A rank that does not handle the checkpoint request ends by it: the stop that was asked.
      if ((preempting_ || !growing_.empty()) && r.signal == SIGUSR1) {
        BeginStop("a rank ended on the checkpoint request");
      } else if (!EndedCleanly(r) && !failure_ && !stopping_) {
        failure_ = Failure{r.rank, r.host, r.exit_code, r.signal, "", Clock::now()};
        StopSoon();
      } else if (r.exit_code == kPreemptedExitCode && !preempting_ && growing_.empty() &&
                 !lone_stop_) {
        lone_stop_ = r.rank;
        lone_stop_at_ = Clock::now();
      }
      if (static_cast<int>(exits_.size()) == plan_.size) all_exited_at_ = Clock::now();
      break;
    case ControlRecord::Kind::kFlight: {
      if (r.why == "stale") {  // the rank's ops moved on since the ring it sent
        flights_.erase(r.rank);
        incoming_flights_.erase(r.rank);
        idle_proc_.erase(r.rank);
        break;
      }
      // A dump replaces the last one only once all its events have come: hydra's stop may cut
      // it short.
      RankFlight& f = incoming_flights_[r.rank];
      f = RankFlight();
      f.dumped = true;
      f.proc = r.proc;
      f.wchan = r.wchan;
      f.why = r.why;
      f.now_ns = r.now_ns;
      f.received = Clock::now();
      expected_events_[r.rank] = std::min<int64_t>(r.events, kFlightSlots);
      if (r.why == "idle") {
        idle_proc_[r.rank] = {r.proc, r.wchan};
      }
      CommitFlight(r.rank);
      break;
    }
    case ControlRecord::Kind::kFlightEvent: {
      auto it = incoming_flights_.find(r.rank);
      if (it == incoming_flights_.end()) break;
      it->second.events.push_back(r.event);
      CommitFlight(r.rank);
      break;
    }
    case ControlRecord::Kind::kFlightStack: {
      // A set replaces the rank's last stacks once all its lines have come: hydra's stop may cut
      // one short, and the last whole set (taken while the job looked stuck) is worth more.
      IncomingStacks& in = incoming_stacks_[r.rank];
      if (r.first) {
        in = IncomingStacks();
        in.why = r.why;
        in.expected = std::min<int64_t>(r.lines, kMaxFlightStackLines);
      }
      if (static_cast<int64_t>(in.lines.size()) >= in.expected) break;
      in.lines.push_back(r.message);
      auto it = flights_.find(r.rank);
      if (static_cast<int64_t>(in.lines.size()) == in.expected && it != flights_.end()) {
        it->second.stack = std::move(in.lines);
        it->second.stack_why = in.why;
        incoming_stacks_.erase(r.rank);
      }
      break;
    }
    case ControlRecord::Kind::kError:
      if (!failure_ && !stopping_) {
        failure_ =
            Failure{r.rank, r.host, r.exit_code != 0 ? r.exit_code : 1, 0, r.message, Clock::now()};
        StopSoon();
      }
      break;
  }
}

void Supervisor::StopSoon() {
  if (stopping_ || stop_soon_) return;
  if (flights_.empty() && incoming_flights_.empty()) {
    BeginStop("a rank failed");
    return;
  }
  stop_soon_ = Clock::now() + kFlightGrace;
}

void Supervisor::BeginStop(const char* why) {
  if (stopping_) return;
  stopping_ = true;
  stop_began_ = Clock::now();
  kill_at_ = stop_began_ + FromSeconds(options_.stop_timeout_s);
  if (options_.verbose) Say(absl::StrCat("stopping the job: ", why));
  router_.set_show_mpiexec(options_.verbose);
  // Hydra's Ctrl-C path: it signals every rank on every host and exits.
  SignalMpiexec(SIGINT);
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
    if (stop_soon_ && !stopping_ && (now >= *stop_soon_ || all_exited_at_)) {
      BeginStop("a rank failed");
    }
    if (preempting_ && !stopping_ && now > preempt_deadline_) {
      BeginStop("--preempt-grace expired");
    }
    if (lone_stop_ && !preempting_ && !stopping_ && !failure_ && !all_exited_at_ &&
        now > lone_stop_at_ + FromSeconds(options_.stop_timeout_s)) {
      failure_ = Failure{*lone_stop_,
                         exits_.at(*lone_stop_).host,
                         kPreemptedExitCode,
                         0,
                         absl::StrFormat("ended with status %d (stopped to be run again), but the "
                                         "other ranks did not end within --stop-timeout (%g s)",
                                         kPreemptedExitCode, options_.stop_timeout_s),
                         now};
      BeginStop("a rank ended with status 75 alone");
    }
    if (grow_interval_s_ > 0 && growing_.empty() && !preempting_ && !stopping_ &&
        now > next_growth_check_) {
      next_growth_check_ = now + FromSeconds(grow_interval_s_);
      growing_ = more_slots_();
      if (!growing_.empty()) {
        SignalMpiexec(SIGUSR1);
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
    if (stopping_ && !killed_ && !reaped_ && now > kill_at_) {
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
        if (got_signal_ == 0 && notice && options_.preempt_grace_s > 0 && !stopping_ &&
            !stop_soon_) {
          // Hydra forwards SIGUSR1 to every rank on every host.
          got_signal_ = sigs[k];
          preempting_ = true;
          preempt_deadline_ = now + FromSeconds(options_.preempt_grace_s);
          SignalMpiexec(SIGUSR1);
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
        reaped_ = true;
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

std::vector<std::string>& FailureSummary() {
  static auto* summary = new std::vector<std::string>();
  return *summary;
}

int Supervisor::Report(int mpiexec_status) {
  reporting_ = true;
  const int rc = Summarize(mpiexec_status);
  if (rc != 0 && rc != kPreemptedExitCode) ReportFlights();
  reporting_ = false;
  if (rc != 0 && rc != kPreemptedExitCode) FailureSummary() = report_;
  return rc;
}

void Supervisor::ReportFlights() {
  if (flights_.empty()) return;
  for (const auto& [rank, exit] : exits_) {
    RankFlight& f = flights_[rank];
    f.exited = true;
    f.exit_code = exit.exit_code;
    f.signal = exit.signal;
    f.ended_itself = ended_before_stop_.count(rank) != 0;
  }
  if (failure_) {  // from an exit record, or from an error record (an abort) that came first
    RankFlight& f = flights_[failure_->rank];
    f.first_failure = f.ended_itself = true;
    f.failure = failure_->message;
    if (!f.exited) {
      f.exit_code = failure_->exit_code;
      f.signal = failure_->signal;
    }
  }
  for (auto& [rank, f] : flights_) {
    if (idle_proc_.count(rank)) std::tie(f.idle_proc, f.idle_wchan) = idle_proc_[rank];
    if (stopping_ && f.dumped && f.received < stop_began_) {
      f.before_stop_s = Seconds(stop_began_ - f.received);
    }
  }
  const Verdict verdict = JudgeFlights(plan_, flights_);
  if (!verdict.line.empty()) {
    Say(absl::StrCat("verdict: ", verdict.line));
    for (const std::string& d : verdict.details) Say(absl::StrCat("  ", d));
  }
  std::string dir = options_.output_dir;
  if (dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/hvx-flight-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) return;
    dir = pattern;
  }
  const std::string json = absl::StrCat(dir, "/flight.json");
  const std::string trace = absl::StrCat(dir, "/flight.trace.json");
  absl::Status s =
      WriteFileAtomically(json, FlightJson(plan_, flights_, verdict), "flight record", false);
  if (s.ok()) s = WriteFileAtomically(trace, FlightTrace(plan_, flights_), "flight trace", false);
  if (!s.ok()) {
    Say(absl::StrCat("the ranks' flight records could not be written: ", s.message()));
    return;
  }
  Say(absl::StrCat("every rank's last collectives: ", json, " (JSON) and ", trace,
                   " (a trace for ui.perfetto.dev)"));
}

int Supervisor::Summarize(int mpiexec_status) {
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
    // 75 would read as "preempted, run again" to whoever runs hvxrun.
    if (f.signal != 0) return 128 + f.signal;
    return f.exit_code != 0 && f.exit_code != kPreemptedExitCode ? f.exit_code : 1;
  }
  const bool all_clean = static_cast<int>(exits_.size()) == plan_.size &&
                         std::all_of(exits_.begin(), exits_.end(),
                                     [](const auto& e) { return EndedCleanly(e.second); });
  // A rank that ended with kPreemptedExitCode was asked to stop by someone else: SIGTERM straight
  // to the ranks (a scheduler's time limit, a pod being deleted) is the trainer's checkpoint
  // request too. A restart to grow is hvxrun's own request, not a preemption.
  const auto asked = std::find_if(exits_.begin(), exits_.end(), [](const auto& e) {
    return e.second.signal == 0 && e.second.exit_code == kPreemptedExitCode;
  });
  if (!stopping_ && all_clean && (preempting_ || (growing_.empty() && asked != exits_.end()))) {
    const std::string why =
        preempting_ ? absl::StrCat("after the checkpoint request (signal ", got_signal_, ")")
                    : absl::StrCat("after a stop request sent to the ranks themselves (rank ",
                                   asked->first, " on host ", asked->second.host,
                                   " ended with status ", kPreemptedExitCode, ")");
    Say(absl::StrCat("preempted: every rank ended cleanly ", why, "; exit status ",
                     kPreemptedExitCode, ": run the same command again to resume"));
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

std::vector<std::string> LastFailureSummary() { return FailureSummary(); }

absl::StatusOr<int> RunAttempt(const LaunchOptions& options, const JobSetup& setup,
                               AttemptOutcome* outcome, std::function<std::string()> more_slots) {
  const std::string wrapper = options.wrapper.empty() ? DefaultWrapper() : options.wrapper;
  const std::vector<std::string> argv = MpiexecCommand(options, setup, wrapper);
  const std::vector<std::pair<std::string, std::string>> env = JobEnvironment(options, setup);
  if (options.dry_run || options.verbose) {
    // Names only: a value passed with -x may be a secret (a token, a key).
    std::vector<std::string> names;
    for (const auto& [name, value] : env) names.push_back(name);
    std::string text =
        absl::StrCat("hvxrun: plan from ", setup.source, ": ", setup.plan.size, " processes on ",
                     setup.plan.used_hosts.size(), " hosts\n", FormatPlan(setup.plan),
                     "hvxrun: environment (values not shown): ", absl::StrJoin(names, " "),
                     "\nhvxrun: command: ", ShellJoin(argv), "\n");
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

  // What this process had before the job (a container's sshd, started by its entry point, which
  // came to hvxrun as PID 1) is not the job's to end.
  std::set<pid_t> before;
  if (options.end_leftovers) {
    for (pid_t pid : LiveChildren()) before.insert(pid);
  }
  absl::StatusOr<Child> child = Spawn(argv, env);
  int rc = child.ok() ? supervisor.Run(*child) : 0;
  if (child.ok() && outcome != nullptr) *outcome = supervisor.outcome();
  // Nothing mpiexec started outlives the attempt (an ssh to a host whose link was cut waits on a
  // connection that will never answer): it has come to hvxrun, a child subreaper.
  if (child.ok() && options.end_leftovers) {
    if (const int left = EndLeftoverChildren(/*grace_s=*/1, before); left > 0) {
      WriteAll(options.err_fd, absl::StrCat("hvxrun: ended ", left,
                                            " process(es) the job left running after mpiexec "
                                            "exited (an ssh to a host that stopped answering?)\n"));
    }
  }

  for (int k = 0; k < 4; ++k) sigaction(sigs[k], &old[k], nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
  if (!child.ok()) return child.status();
  return rc;
}

}  // namespace launch
}  // namespace hvx
