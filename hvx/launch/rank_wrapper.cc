// The per-rank wrapper (rank_wrapper.h), over 700 lines in one file because it is one process's
// event loop: the program's output pipes (OutputRelay), its PMI connection (PmiRelay) and its
// flight record and stacks (FlightDump) wait in one poll() beside the child and end with it, and
// the wrapper links only the C++ library, so these parts share no header with the rest of
// hvx/launch.
#include "hvx/launch/rank_wrapper.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hvx/common/flight_ring.h"
#include "hvx/launch/cpu_binding.h"
#include "hvx/launch/placement.h"
#include "hvx/launch/records.h"
#include "hvx/shm/names.h"

namespace hvx {
namespace launch {
namespace {

// Passed on to the program (ForwardSignal).
constexpr int kForwardedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_exit_code = 0;
// Set when the program has a flight recorder: hydra's SIGINT (the job being stopped) then waits
// for the wrapper to send the ring before it goes on to the program (g_sigint_held meanwhile),
// and no longer ends the wrapper once the program has ended.
volatile sig_atomic_t g_flight_on = 0;
volatile sig_atomic_t g_sigint_held = 0;
// SIGCHLD writes a byte here, so the PMI relay's poll wakes when the program ends.
int g_child_pipe[2] = {-1, -1};

void OnChild(int) {
  const int saved = errno;
  const char c = 0;
  (void)!write(g_child_pipe[1], &c, 1);
  errno = saved;
}

// While the program runs, signals go to it; once it has ended, a signal (hydra stopping the job)
// ends the wrapper at once with the program's status.
void ForwardSignal(int sig) {
  if (sig == SIGINT && g_flight_on) {
    if (g_child_pid > 0) {
      g_sigint_held = 1;
      OnChild(0);  // wakes the relay's poll, which sends the ring and then passes SIGINT on
    }
    // Once the program has ended the wrapper finishes its records (and its abort's wait) first:
    // hydra kills every rank of a host as soon as one wrapper ends, and the others may still be
    // sending their rings.
    return;
  }
  if (g_child_pid > 0) {
    kill(g_child_pid, sig);
  } else {
    _exit(g_exit_code != 0 ? g_exit_code : 128 + sig);
  }
}

// hvxrun stops the job when it reads our exit record; it normally does within milliseconds.
// Only when it has not after this long does the wrapper ask hydra itself to abort: an abort sent
// at once races the record through hydra, and the record (which rank failed, how) is lost.
constexpr int kStopWaitMs = 1000;
// Long enough for hydra to act on the abort and kill this process; bounded so a wrapper never
// lingers when the abort is lost.
constexpr int kAbortWaitMs = 5000;

// A decimal integer, the whole string; false otherwise.
bool ParseInt(const char* text, int* value) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || errno != 0 || v < -(1L << 30) || v > (1L << 30)) return false;
  *value = static_cast<int>(v);
  return true;
}

int Fail(int rank, const std::string& host, const std::string& message) {
  WriteFully(2, "hvxrun: rank " + std::to_string(rank) + " on " + host + ": " + message + "\n");
  WriteFully(2, FormatErrorRecord(rank, host, message));
  return 1;
}

// Tells hydra to end the whole job with `code`, unless hvxrun has stopped it first. After a clean
// MPI_Finalize the proxy has closed its end: the write fails with EPIPE (SIGPIPE is ignored) and
// nothing happens.
int64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Waits `ms` whatever signals come meanwhile (a handler's return cuts poll short: hydra's SIGINT,
// which the wrapper no longer ends at once, must not shorten the waits below), or, with `p`,
// until it is readable.
void WaitMs(int64_t ms, pollfd* p = nullptr) {
  const int64_t until = NowMs() + ms;
  for (int64_t left = ms; left > 0; left = until - NowMs()) {
    if (poll(p, p ? 1 : 0, static_cast<int>(left)) > 0) return;
  }
}

void AbortJob(int code) {
  WaitMs(kStopWaitMs);
  int fd = -1;
  if (!ParseInt(getenv("PMI_FD"), &fd) || fd < 0) return;
  const std::string cmd = "cmd=abort exitcode=" + std::to_string(code) + "\n";
  if (write(fd, cmd.data(), cmd.size()) != static_cast<ssize_t>(cmd.size())) return;
  pollfd p{fd, POLLIN, 0};
  WaitMs(kAbortWaitMs, &p);
}

// Whether `child` has ended; if so *status is its wait status. The pid is forgotten (g_child_pid),
// with the program's code kept for ForwardSignal, before the child is reaped: from then on the
// pid may be another process's, and a signal to the wrapper must not be passed to it.
bool Reaped(pid_t child, bool block, int* status) {
  siginfo_t info{};
  while (waitid(P_PID, child, &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG)) != 0) {
    if (errno == EINTR) continue;
    *status = 127 << 8;
    g_exit_code = 127;
    g_child_pid = 0;
    return true;
  }
  if (info.si_pid != child) return false;  // still running
  const bool signalled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  g_exit_code = signalled ? 128 + info.si_status : info.si_status;
  g_child_pid = 0;
  while (waitpid(child, status, 0) < 0 && errno == EINTR) {
  }
  return true;
}

// The program's stdout and stderr are pipes the wrapper reads; it alone writes to the descriptors
// hydra reads. What the program writes goes on with every \x01 escaped (EscapeMarkerBytes), so a
// line a rank prints (a record key from a crafted dataset in an error message, a sample that
// Python's logging writes) can neither start a control record nor a hydra rank marker, and so
// can neither end the job as a success nor blame another rank. The wrapper's own records start a
// line of their own, after what the program wrote before them.
class OutputRelay {
 public:
  OutputRelay() = default;
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;
  ~OutputRelay() {
    for (int fd : {read_[0], read_[1], write_[0], write_[1]}) {
      if (fd >= 0) close(fd);
    }
  }

  // The pipes; false on failure (nothing is relayed then: the program cannot be started safely).
  bool Open() {
    for (int k = 0; k < 2; ++k) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) return false;
      read_[k] = p[0];
      write_[k] = p[1];
      fcntl(read_[k], F_SETFL, fcntl(read_[k], F_GETFL) | O_NONBLOCK);
    }
    return true;
  }

  // In the program, before exec: the pipes become its stdout and stderr.
  bool InstallInChild() const { return dup2(write_[0], 1) == 1 && dup2(write_[1], 2) == 2; }

  // In the wrapper, once the program runs: only the program holds the write ends, so the pipes
  // end when it (and whatever it started that kept them) is gone.
  void CloseWriteEnds() {
    for (int& fd : write_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }

  // The read end of the program's fd 1 (k = 0) or 2 (k = 1); -1 once it has ended.
  int fd(int k) const { return read_[k]; }

  // Passes on what the program's fd 1 or 2 holds now, without waiting; while the program runs, at
  // most kTurn bytes a call, so that a program that writes without pause does not keep the loop
  // from its PMI connection and its exit.
  void Relay(int k) {
    char buf[65536];
    for (size_t turn = 0; read_[k] >= 0 && (draining_ || turn < kTurn);) {
      const ssize_t n = read(read_[k], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;  // EAGAIN: nothing more now
      if (n == 0) {
        close(read_[k]);
        read_[k] = -1;
        return;
      }
      WriteFully(k + 1, EscapeMarkerBytes(buf, static_cast<size_t>(n)));
      if (k == 1) stderr_line_open_ = buf[n - 1] != '\n';
      relayed_ += static_cast<size_t>(n);
      turn += static_cast<size_t>(n);
      // A process the program left running may go on writing: the end of a rank's output is
      // what was there when the program ended, bounded.
      if (draining_ && relayed_ > kDrainLimit) return;
    }
  }

  // After the program ended: what it wrote before it ended, then no more.
  void Drain() {
    draining_ = true;
    relayed_ = 0;
    Relay(0);
    Relay(1);
  }

  // A control record, on a line of its own after what the program wrote to stderr before it.
  void WriteRecord(const std::string& record) {
    Relay(1);
    if (stderr_line_open_) WriteFully(2, "\n");
    stderr_line_open_ = false;
    WriteFully(2, record);
  }

 private:
  static constexpr size_t kTurn = 1 << 20;
  static constexpr size_t kDrainLimit = 16 << 20;
  int read_[2] = {-1, -1};
  int write_[2] = {-1, -1};
  bool stderr_line_open_ = false;
  bool draining_ = false;
  size_t relayed_ = 0;
};

// The program's PMI connection passes through the wrapper. MPI_Abort, and MPICH's handler for a
// fatal MPI error, end the job with a PMI abort that reaches hydra ahead of what the rank wrote on
// stderr, and hydra exits at once: which rank ended the job, and why, was lost about one time in
// thirty. The relay holds an abort back, tells hvxrun first with an error record (which comes
// behind the rank's output on the same pipe), and forwards the abort only when hvxrun has not
// stopped the job within kStopWaitMs. Everything else passes unchanged, both ways, at once.
class PmiRelay {
 public:
  // Error records go out through `output`, which must outlive the relay.
  PmiRelay(int proxy_fd, int rank, std::string host, OutputRelay* output)
      : proxy_fd_(proxy_fd), rank_(rank), host_(std::move(host)), output_(output) {}

  // The program's end, which it gets as the same descriptor number as PMI_FD; -1 on failure
  // (the program then talks to the proxy directly).
  int Open() {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return -1;
    program_fd_ = pair[0];
    return pair[1];
  }

  // The two descriptors to wait on (the program's end, the proxy's), into fds[0..1].
  void PollFds(pollfd* fds) const {
    fds[0] = {program_fd_, static_cast<short>(program_fd_ >= 0 ? POLLIN : 0), 0};
    fds[1] = {proxy_fd_, static_cast<short>(proxy_fd_ >= 0 ? POLLIN : 0), 0};
  }

  // How long poll may wait: until a held abort is due, or -1.
  int PollTimeout() const {
    if (abort_at_ < 0 || released_) return -1;
    return static_cast<int>(std::max<int64_t>(0, abort_at_ - NowMs()));
  }

  // Relays what poll found on the descriptors of PollFds, and releases a held abort once due.
  void OnPoll(const pollfd* fds) {
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) FromProgram(0);
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) FromProxy();
    if (abort_at_ >= 0 && NowMs() >= abort_at_) Release();
  }

  // After the program ended: what it sent before it ended goes on too, without waiting (a
  // process the program started may hold its end open); an abort it sent is held for
  // FinishAbort.
  void FinishProgram() {
    while (program_fd_ >= 0 && FromProgram(MSG_DONTWAIT)) {
    }
    if (program_fd_ >= 0) close(program_fd_);
    program_fd_ = -1;
  }

  // Sends a held abort once its wait is over (the job goes on ending if hvxrun has not ended it).
  void FinishAbort() {
    if (abort_at_ < 0) return;
    WaitMs(abort_at_ - NowMs());
    Release();
  }

  // Whether the program asked hydra to abort the job (the abort is then on its way).
  bool aborted() const { return abort_at_ != -1; }

 private:
  static constexpr char kAbort[] = "cmd=abort";

  // Reads what the program sent; false at its end, or with MSG_DONTWAIT when there is no more.
  bool FromProgram(int flags) {
    char buf[4096];
    const ssize_t n = recv(program_fd_, buf, sizeof(buf), flags);
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && errno == EAGAIN) return (flags & MSG_DONTWAIT) == 0;
    if (n <= 0) {
      close(program_fd_);
      program_fd_ = -1;
      return false;
    }
    pending_.append(buf, static_cast<size_t>(n));
    Forward();
    return true;
  }

  void FromProxy() {
    char buf[4096];
    const ssize_t n = read(proxy_fd_, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0 || program_fd_ < 0) {
      // The proxy is gone (the parent-death signal follows) or the program is: nothing to relay.
      if (n <= 0) proxy_fd_ = -1;
      return;
    }
    WriteFully(program_fd_, std::string(buf, static_cast<size_t>(n)));
  }

  // Sends the proxy every line before an abort (a line whose command is "cmd=abort"); holds the
  // abort and what follows it, and the start of a line that may become one.
  void Forward() {
    if (released_) {
      SendPending();
      return;
    }
    if (abort_at_ != -1) return;  // held
    const std::string_view abort(kAbort);
    size_t sent = 0;
    while (sent < pending_.size()) {
      const size_t eol = pending_.find('\n', sent);
      const std::string_view line(pending_.data() + sent,
                                  (eol == std::string::npos ? pending_.size() : eol) - sent);
      if (eol == std::string::npos) {
        // Part of a line: hold it while it may still turn out to be the abort.
        if (abort.substr(0, line.size()) == line.substr(0, abort.size())) break;
        sent = pending_.size();
        break;
      }
      if (line.substr(0, line.find(' ')) == abort) {
        Hold(line);
        break;
      }
      sent = eol + 1;
    }
    if (proxy_fd_ >= 0) WriteFully(proxy_fd_, pending_.substr(0, sent));
    pending_.erase(0, sent);
  }

  void Hold(std::string_view line) {
    int code = 1;
    const size_t at = line.find("exitcode=");
    if (at != std::string_view::npos) {
      const std::string digits(line.substr(at + 9, line.find(' ', at) - at - 9));
      if (!ParseInt(digits.c_str(), &code)) code = 1;
    }
    output_->WriteRecord(FormatErrorRecord(rank_, host_,
                                           "ended the job through MPI_Abort or a fatal MPI error "
                                           "(PMI abort, exit code " +
                                               std::to_string(code) + ")",
                                           code));
    abort_at_ = NowMs() + kStopWaitMs;
  }

  void Release() {
    if (released_) return;
    released_ = true;
    SendPending();
  }

  // Everything the program sent that the proxy has not had (dropped when the proxy is gone).
  void SendPending() {
    if (proxy_fd_ >= 0) WriteFully(proxy_fd_, pending_);
    pending_.clear();
  }

  int proxy_fd_;
  int program_fd_ = -1;
  int rank_;
  std::string host_;
  OutputRelay* output_;
  std::string pending_;
  int64_t abort_at_ = -1;
  bool released_ = false;
};

// The program's flight recorder (flight_ring.h): a memfd the wrapper makes and the program
// inherits as HVX_FLIGHT_FD. The wrapper reads it, whatever state the program is in, and sends
// its recent ops to hvxrun as records when the program fails, when the job is being stopped and
// when the program's ops have been quiet for a while (Tick).
class FlightDump {
 public:
  // What a dump sends (SelectForDump): this many unfinished ops, the oldest half and the newest
  // half, and this many of the last finished ones.
  static constexpr size_t kDumpedUnfinished = 64;
  static constexpr size_t kDumpedFinished = 32;

  FlightDump(int rank, std::string host) : rank_(rank), host_(std::move(host)) {}
  ~FlightDump() {
    if (memory_ != nullptr) munmap(memory_, FlightRingBytes());
    if (fd_ >= 0) close(fd_);
    for (int fd : stack_pipe_) {
      if (fd >= 0) close(fd);
    }
  }
  FlightDump(const FlightDump&) = delete;
  FlightDump& operator=(const FlightDump&) = delete;

  // Makes the ring and exports HVX_FLIGHT_FD, unless HVX_FLIGHT_RECORDER=0. Without one (no
  // memfd), the program runs without a recorder.
  void Open() {
    unsetenv(kFlightFdVariable);  // none inherited from an outer job reaches the program
    unsetenv(kStackFdVariable);
    if (Off(getenv("HVX_FLIGHT_RECORDER"))) return;
    fd_ = memfd_create(kFlightMemfdName, 0);  // not close-on-exec: the program's
    if (fd_ < 0) return;
    if (ftruncate(fd_, static_cast<off_t>(FlightRingBytes())) != 0) return Close();
    void* m = mmap(nullptr, FlightRingBytes(), PROT_READ, MAP_SHARED, fd_, 0);
    if (m == MAP_FAILED) return Close();
    memory_ = m;
    setenv(kFlightFdVariable, std::to_string(fd_).c_str(), 1);
    // The stacks' pipe (unless HVX_FLIGHT_STACKS=0), non-blocking at both ends: a full pipe
    // loses stacks rather than holding a thread of the program inside its signal handler. The
    // program inherits the write end.
    if (!Off(getenv("HVX_FLIGHT_STACKS"))) {
      if (pipe2(stack_pipe_, O_NONBLOCK | O_CLOEXEC) == 0) {
        fcntl(stack_pipe_[0], F_SETPIPE_SZ, 256 << 10);
        fcntl(stack_pipe_[1], F_SETFD, 0);
        setenv(kStackFdVariable, std::to_string(stack_pipe_[1]).c_str(), 1);
      } else {
        stack_pipe_[0] = stack_pipe_[1] = -1;
      }
    }
    g_flight_on = 1;
    // The collective timeout the program runs with (hvx's default when unset or unreadable).
    double timeout_s = 300;
    const char* text = getenv("HVX_COLLECTIVE_TIMEOUT_S");
    if (text != nullptr && *text != '\0') {
      char* end = nullptr;
      const double v = std::strtod(text, &end);
      while (*end == ' ' || *end == '\t') ++end;
      if (*end == '\0' && v > 0 && v < 1e7) timeout_s = v;
    }
    // Three quarters of the timeout (at least 1 s before it), and at most kMaxIdleS: a Ctrl-C on a
    // job hung for longer finds every ring at hvxrun already.
    const double idle_s =
        std::min(kMaxIdleS, std::max(0.5, timeout_s - std::max(1.0, timeout_s / 4)));
    idle_ns_ = static_cast<int64_t>(idle_s * 1e9);
    // The stacks only when a hang is likely, three quarters into the timeout: asking interrupts
    // every thread's system calls (a sleep returns early), which a healthy program's quiet spell
    // (an evaluation, a checkpoint) should not see every 30 s.
    stack_idle_ns_ = std::max(idle_ns_, static_cast<int64_t>(timeout_s * 0.75e9));
  }

  // Called as the relay's loop turns (at least every kTickMs). When no op of the program has
  // moved on for most of the collective timeout (or kMaxIdleS), sends the ring: a rank the others
  // wait for (stuck in its own code, frozen, waiting in another op) and the ranks that wait have
  // all sent theirs before the timeout ends the job, when hydra's stop may cut the output short.
  // When an op moves on again, tells hvxrun the ring it has is no longer current (an op that fails,
  // as the waiting ones do at the timeout, leaves it current).
  void Tick(OutputRelay& output, pid_t child) {
    if (memory_ == nullptr || final_) return;
    const int64_t last = FlightRingLastProgress(memory_, FlightRingBytes());
    if (current_ && last != sent_last_) {
      output.WriteRecord(FormatFlightRecord(rank_, host_, "", "", FlightNowNs(), 0, "stale"));
      current_ = false;
      stacks_sent_ = false;
    }
    if (!current_ && last != 0 && last != sent_last_ && FlightNowNs() - last >= idle_ns_) {
      Send(output, child, "idle");
    }
    if (current_ && !stacks_sent_ && last == sent_last_ && FlightNowNs() - last >= stack_idle_ns_) {
      SendStacks(output, child, "idle", kStackWaitMs);
    }
  }

  // Sends the ring: the process state of `child` (0: it has ended), then its events, then ("stop"
  // of a program still running) its threads' stacks. "idle" at most once per quiet spell; "stop"
  // and "exit" whenever asked.
  void Send(OutputRelay& output, pid_t child, const char* why);
  // Asks `child` for every thread's stack (stack_dump.h), waiting at most `wait_ms`, and sends
  // the lines after the ring's events; nothing when it is not running or has no hvx handler.
  void SendStacks(OutputRelay& output, pid_t child, const char* why, int wait_ms);

  static constexpr int kTickMs = 250;
  static constexpr double kMaxIdleS = 30;
  // How long the wrapper waits for the program's threads' stacks: while the job looks stuck, and
  // while it is being stopped (hydra's stop may cut the output short).
  static constexpr int kStackWaitMs = 1000;
  static constexpr int kStackStopWaitMs = 300;

  // HVX_FLIGHT_RECORDER's "off" as hvx's knobs spell it (0, false, no, off, any case).
  static bool Off(const char* value) {
    if (value == nullptr) return false;
    std::string v(value);
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v == "0" || v == "false" || v == "no" || v == "off";
  }
  bool on() const { return memory_ != nullptr; }

 private:
  void Close() {
    close(fd_);
    fd_ = -1;
  }

  const int rank_;
  const std::string host_;
  // The lines of every thread's stack of `child`, asked for with kStackSignal, within `wait_ms`.
  std::vector<std::string> Stacks(pid_t child, int wait_ms);

  int fd_ = -1;
  int stack_pipe_[2] = {-1, -1};
  void* memory_ = nullptr;
  int64_t idle_ns_ = 0;
  int64_t stack_idle_ns_ = 0;
  bool stacks_sent_ = false;     // in this quiet spell
  int64_t stacks_asked_ns_ = 0;  // when the program was last asked for them
  bool current_ = false;         // hvxrun has the ring as it is now
  bool final_ = false;     // a "stop" or "exit" dump went: the job is ending, no more idle ones
  int64_t sent_last_ = 0;  // FlightRingLastProgress at the last send
};

// The first line of /proc/<pid>/<file>, "" when it cannot be read.
std::string ProcFile(pid_t pid, const char* file) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return "";
  std::string text(buf, static_cast<size_t>(n));
  return text.substr(0, text.find('\n'));
}

// The state letter of `pid` (R S D T t Z X), from /proc/<pid>/stat: "pid (comm) S ...", comm may
// hold spaces and parentheses; 0 when it cannot be read.
char ProcessState(pid_t pid) {
  const std::string stat = ProcFile(pid, "stat");
  const size_t close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() ? stat[close_paren + 2]
                                                                           : 0;
}

// Whether `pid` runs hvx's stack dumper: its helper thread ("hvx-stacks", stack_dump.cc) is one
// of its threads. A program that handles SIGURG for its own reasons is not asked.
bool HasStackHelper(pid_t pid) {
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(task.c_str());
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const std::string comm = task + "/" + entry->d_name + "/comm";
    const int fd = open(comm.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char name[32];
    const ssize_t n = read(fd, name, sizeof(name));
    close(fd);
    if (n >= 10 && std::string_view(name, 10) == "hvx-stacks") {
      found = true;
      break;
    }
  }
  closedir(dir);
  return found;
}

// The threads the program's helper said it signalled ("signalled N threads"), -1 before it said.
int SignalledThreads(const std::string& text) {
  const size_t at = text.find("signalled ");
  if (at == std::string::npos || (at != 0 && text[at - 1] != '\n')) return -1;
  const size_t end = text.find('\n', at);
  if (end == std::string::npos) return -1;
  return std::atoi(text.c_str() + at + 10);
}

// Lines that begin a native thread's stack ("thread TID NAME").
int ThreadHeaders(const std::string& text) {
  int n = 0;
  for (size_t at = 0; at < text.size();) {
    if (text.compare(at, 7, "thread ") == 0) ++n;
    const size_t next = text.find('\n', at);
    if (next == std::string::npos) break;
    at = next + 1;
  }
  return n;
}

std::vector<std::string> FlightDump::Stacks(pid_t child, int wait_ms) {
  std::vector<std::string> lines;
  char buf[65536];
  while (read(stack_pipe_[0], buf, sizeof(buf)) > 0) {  // what an earlier round left
  }
  stacks_asked_ns_ = FlightNowNs();
  if (kill(child, kStackSignal) != 0) return lines;
  std::string text;
  const int64_t start = FlightNowNs();
  for (;;) {
    const int signalled = SignalledThreads(text);
    if (signalled >= 0 && ThreadHeaders(text) >= signalled) break;
    const int64_t left_ms = wait_ms - (FlightNowNs() - start) / 1000000;
    if (left_ms <= 0) break;
    pollfd p = {stack_pipe_[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left_ms)) < 0 && errno != EINTR) break;
    ssize_t n;
    while ((n = read(stack_pipe_[0], buf, sizeof(buf))) > 0)
      text.append(buf, static_cast<size_t>(n));
  }
  // Blocks: Python's (faulthandler's "Thread 0x..." / "Current thread 0x...") and each native
  // thread's ("thread TID NAME"); the main thread's is marked. Past kMaxFlightStackLines, the
  // last Python block (Python lists its oldest thread, the main one, last) and the main thread's
  // native block are kept before the others.
  const std::string main_thread = "thread " + std::to_string(child);
  std::vector<std::vector<std::string>> blocks;
  int last_python = -1, main_native = -1;
  size_t from = 0;
  while (from < text.size()) {
    size_t end = text.find('\n', from);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(from, std::min<size_t>(end - from, 400));
    from = end + 1;
    if (line.empty() || line.rfind("signalled ", 0) == 0) continue;
    const bool python = line.rfind("Thread 0x", 0) == 0 || line.rfind("Current thread 0x", 0) == 0;
    const bool native = line.rfind("thread ", 0) == 0;
    if (native && line.compare(0, main_thread.size(), main_thread) == 0 &&
        (line.size() == main_thread.size() || line[main_thread.size()] == ' ')) {
      line += " (main)";
      main_native = static_cast<int>(blocks.size());
    }
    if (python) last_python = static_cast<int>(blocks.size());
    if (python || native || blocks.empty()) blocks.emplace_back();
    blocks.back().push_back(std::move(line));
  }
  std::vector<bool> keep(blocks.size(), false);
  size_t kept = 0;
  auto take = [&](int b) {
    if (b < 0 || keep[b] || kept + blocks[b].size() > kMaxFlightStackLines) return;
    keep[b] = true;
    kept += blocks[b].size();
  };
  take(last_python);
  take(main_native);
  for (size_t b = 0; b < blocks.size(); ++b) take(static_cast<int>(b));
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (keep[b]) lines.insert(lines.end(), blocks[b].begin(), blocks[b].end());
  }
  return lines;
}

void FlightDump::SendStacks(OutputRelay& output, pid_t child, const char* why, int wait_ms) {
  stacks_sent_ = true;
  if (stack_pipe_[0] < 0 || child <= 0) return;
  // A round of the program's lasts a second: one asked within it would not answer.
  if (stacks_asked_ns_ != 0 && FlightNowNs() - stacks_asked_ns_ < 1100000000) return;
  const char letter = ProcessState(child);
  if (letter == 'T' || letter == 't' || letter == 'Z' || letter == 'X' || !HasStackHelper(child)) {
    return;
  }
  const std::vector<std::string> lines = Stacks(child, wait_ms);
  for (size_t i = 0; i < lines.size(); ++i) {
    output.WriteRecord(FormatFlightStackRecord(rank_, lines[i], i == 0, why, lines.size()));
  }
}

void FlightDump::Send(OutputRelay& output, pid_t child, const char* why) {
  if (memory_ == nullptr || !IsFlightRing(memory_, FlightRingBytes())) return;
  const int64_t last = FlightRingLastProgress(memory_, FlightRingBytes());
  const bool stacks_current = stacks_sent_ && current_ && last == sent_last_;
  sent_last_ = last;
  current_ = true;
  if (strcmp(why, "idle") != 0) final_ = true;
  std::string proc = "exited", wchan;
  if (child > 0) {
    if (const char state = ProcessState(child); state != 0) proc = std::string(1, state);
    wchan = ProcFile(child, "wchan");
    if (wchan == "0") wchan.clear();
  }
  const std::vector<FlightEvent> events =
      SelectForDump(ReadFlightRing(memory_, FlightRingBytes()), kDumpedUnfinished, kDumpedFinished);
  output.WriteRecord(
      FormatFlightRecord(rank_, host_, proc, wchan, FlightNowNs(), events.size(), why));
  for (const FlightEvent& e : events) {
    output.WriteRecord(FormatFlightEventRecord(rank_, EncodeFlightEvent(e)));
  }
  // At a stop, unless this quiet spell's stacks went already (hydra's stop may cut a second set).
  if (strcmp(why, "stop") == 0 && !stacks_current) SendStacks(output, child, why, kStackStopWaitMs);
}

// Relays the program's output (and its PMI connection, with `pmi`) until `child` ends; returns
// its wait status, once what it wrote before it ended has gone on.
int RelayUntilExit(pid_t child, OutputRelay& output, PmiRelay* pmi, FlightDump& flight) {
  int status = 0;
  while (!Reaped(child, /*block=*/false, &status)) {
    if (g_sigint_held && g_child_pid > 0) {
      flight.Send(output, child, "stop");
      g_sigint_held = 0;
      kill(child, SIGINT);
    }
    flight.Tick(output, child);
    pollfd fds[5] = {{g_child_pipe[0], POLLIN, 0},
                     {output.fd(0), static_cast<short>(output.fd(0) >= 0 ? POLLIN : 0), 0},
                     {output.fd(1), static_cast<short>(output.fd(1) >= 0 ? POLLIN : 0), 0},
                     {-1, 0, 0},
                     {-1, 0, 0}};
    if (pmi != nullptr) pmi->PollFds(fds + 3);
    int timeout_ms = pmi != nullptr ? pmi->PollTimeout() : -1;
    if (flight.on()) {
      timeout_ms = timeout_ms < 0 ? FlightDump::kTickMs : std::min(timeout_ms, FlightDump::kTickMs);
    }
    if (poll(fds, 5, timeout_ms) < 0 && errno != EINTR) {
      Reaped(child, /*block=*/true, &status);
      break;
    }
    if (fds[0].revents & POLLIN) {
      char drain[64];
      while (read(g_child_pipe[0], drain, sizeof(drain)) > 0) {
      }
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[1 + k].revents & (POLLIN | POLLHUP | POLLERR)) output.Relay(k);
    }
    if (pmi != nullptr) pmi->OnPoll(fds + 3);
  }
  output.Drain();
  if (pmi != nullptr) pmi->FinishProgram();
  return status;
}

void SetInt(const char* name, int value) { setenv(name, std::to_string(value).c_str(), 1); }

}  // namespace

int MaybeRunRankWrapper(int argc, char** argv) {
  if (argc < 2 || strcmp(argv[1], kRankWrapperFlag) != 0) return -1;
  signal(SIGPIPE, SIG_IGN);  // hvxrun or the proxy may be gone: writes must fail, not kill us
  std::string used_hosts;
  int i = 2;
  for (; i < argc; ++i) {
    if (strcmp(argv[i], "--") == 0) {
      ++i;
      break;
    }
    if (strcmp(argv[i], "--plan") == 0 && i + 1 < argc) {
      used_hosts = argv[++i];
    } else {
      WriteFully(2, std::string("hvxrun rank wrapper: unknown argument '") + argv[i] + "'\n");
      return 2;
    }
  }
  if (i >= argc) {
    WriteFully(2, "hvxrun rank wrapper: no program\n");
    return 2;
  }
  std::vector<HostCount> hosts;
  std::string error;
  if (!ParseUsedHosts(used_hosts, &hosts, &error)) return Fail(-1, "?", error);
  const std::vector<RankPlacement> plan = PlaceRanks(hosts);
  const char* pmi_rank = getenv("PMI_RANK");
  int rank = -1;
  if (!ParseInt(pmi_rank, &rank) || rank < 0 || rank >= static_cast<int>(plan.size())) {
    return Fail(rank, "?",
                std::string("PMI_RANK='") + (pmi_rank ? pmi_rank : "") +
                    "' is not a rank of the plan " + used_hosts +
                    ": the wrapper runs only under hvxrun's mpiexec");
  }
  const RankPlacement& p = plan[rank];
  // Hydra numbers ranks per host from its own host list; a difference means hydra did not place
  // ranks the way the plan says, and every local_rank would be wrong.
  for (const auto& [var, want] : {std::pair<const char*, int>{"MPI_LOCALRANKID", p.local_rank},
                                  {"MPI_LOCALNRANKS", p.local_size}}) {
    const char* got = getenv(var);
    int value = 0;
    if (got != nullptr && *got != '\0' && (!ParseInt(got, &value) || value != want)) {
      const int rc = Fail(rank, p.host,
                          std::string("mpiexec placed this rank with ") + var + "=" + got +
                              " but the plan says " + std::to_string(want));
      AbortJob(rc);
      return rc;
    }
  }
  SetInt("HVX_RANK", p.rank);
  SetInt("HVX_SIZE", static_cast<int>(plan.size()));
  SetInt("HVX_LOCAL_RANK", p.local_rank);
  SetInt("HVX_LOCAL_SIZE", p.local_size);
  SetInt("HVX_CROSS_RANK", p.cross_rank);
  SetInt("HVX_CROSS_SIZE", p.cross_size);
  setenv("HVX_HOSTNAME", p.host.c_str(), 1);

  // Each rank on CPUs of its own (cpu_binding.h); the program inherits the binding.
  const char* bind_to = getenv(kBindToVariable);
  const std::string bind = bind_to != nullptr && *bind_to != '\0' ? bind_to : "core";
  if (bind != "core" && bind != "none") {
    const int rc = Fail(
        rank, p.host,
        std::string(kBindToVariable) + "='" + bind + "' is not core or none (hvxrun --bind-to)");
    AbortJob(rc);
    return rc;
  }
  if (bind == "core") {
    const std::vector<int> block = CpuBlock(AllowedCpus(), p.local_rank, p.local_size);
    if (!block.empty() && !BindToCpus(block)) {
      WriteFully(2, "hvxrun: rank " + std::to_string(rank) + " on " + p.host +
                        ": left unbound, binding to CPUs " + FormatCpuList(block) +
                        " failed: " + strerror(errno) + "\n");
    }
  }

  // The program's shared-memory regions carry this tag, so that what it leaves in /dev/shm
  // (killed while creating its CPU plane) is removed below, whatever pid namespace it ran in.
  // The wrapper removes them itself when its program ends; the sweeper when hydra kills the
  // wrapper first (a job being stopped).
  const std::string shm_tag = shm::NewShmTag();
  setenv(shm::kShmTagVariable, shm_tag.c_str(), 1);
  const int sweeper = shm::StartRegionSweeper(shm_tag);

  // The signals passed on to the program wait, blocked, until its pid is recorded: one that came
  // before would end the wrapper with no program to pass it to (a checkpoint request lost, and
  // no exit record). The program gets them unblocked, whatever mask the wrapper was started with.
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int sig : kForwardedSignals) sigaddset(&forwarded, sig);
  sigset_t started_with;
  sigprocmask(SIG_BLOCK, &forwarded, &started_with);
  // The proxy that started us dies -> we get SIGHUP and pass it on. Not SIGTERM: the trainer
  // takes that for a checkpoint request and would go on to its next step.
  prctl(PR_SET_PDEATHSIG, SIGHUP);
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwardedSignals) sigaction(sig, &sa, nullptr);

  // The program's output runs through the wrapper (OutputRelay), and its PMI connection through
  // a relay (PmiRelay) where hydra gave us one.
  OutputRelay output;
  if (!output.Open() || pipe2(g_child_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int rc = Fail(rank, p.host, std::string("pipe failed: ") + strerror(errno));
    sigprocmask(SIG_UNBLOCK, &forwarded, nullptr);
    AbortJob(rc);
    return rc;
  }
  FlightDump flight(rank, p.host);
  flight.Open();
  int pmi_fd = -1;
  std::optional<PmiRelay> relay;
  int program_pmi_fd = -1;
  if (ParseInt(getenv("PMI_FD"), &pmi_fd) && pmi_fd >= 0 && fcntl(pmi_fd, F_GETFD) != -1) {
    relay.emplace(pmi_fd, rank, p.host, &output);
    program_pmi_fd = relay->Open();
    if (program_pmi_fd < 0) relay.reset();
  }
  struct sigaction chld {};
  chld.sa_handler = OnChild;
  sigemptyset(&chld.sa_mask);
  chld.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &chld, nullptr);

  WriteFully(2, FormatStartRecord(rank, p.host, getpid()));
  const pid_t self = getpid();
  const pid_t child = fork();
  if (child < 0) {
    const int rc = Fail(rank, p.host, std::string("fork failed: ") + strerror(errno));
    sigprocmask(SIG_UNBLOCK, &forwarded, nullptr);
    AbortJob(rc);
    return rc;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self) _exit(137);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kForwardedSignals) sigaction(sig, &dfl, nullptr);
    for (int sig : {SIGPIPE, SIGCHLD}) sigaction(sig, &dfl, nullptr);
    sigset_t mask = started_with;
    for (int sig : kForwardedSignals) sigdelset(&mask, sig);
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    // The relay's end takes PMI_FD's number; the real connection stays with the wrapper.
    if (program_pmi_fd >= 0 && dup2(program_pmi_fd, pmi_fd) < 0) _exit(127);
    if (!output.InstallInChild()) _exit(127);
    execvp(argv[i], argv + i);
    WriteFully(2, "hvxrun: rank " + std::to_string(rank) + " on " + p.host + ": cannot run '" +
                      argv[i] + "': " + strerror(errno) + "\n");
    _exit(127);
  }
  if (program_pmi_fd >= 0) close(program_pmi_fd);
  output.CloseWriteEnds();
  g_child_pid = child;
  sigprocmask(SIG_UNBLOCK, &forwarded, nullptr);  // what came meanwhile goes to the program now
  shm::WatchProcess(sweeper, child);
  const int status = RelayUntilExit(child, output, relay ? &*relay : nullptr, flight);
  const int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  if (code != 0 && code != kPreemptedExitCode) flight.Send(output, 0, "exit");
  shm::RemoveRegionsTagged(shm_tag);
  output.WriteRecord(FormatExitRecord(rank, p.host, status));
  if (relay && relay->aborted()) {
    relay->FinishAbort();  // the program's own abort ends the job
  } else if (code != 0 && code != kPreemptedExitCode) {
    AbortJob(code);
  }
  return code;
}

}  // namespace launch
}  // namespace hvx
