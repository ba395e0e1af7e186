#include "hvx/launch/subprocess.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/status.h"
#include "hvx/launch/command.h"
#include "hvx/launch/output.h"

namespace hvx {
namespace launch {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
Clock::duration FromSeconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

namespace {

std::vector<char*> CArgv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (std::string& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<Child> Spawn(std::vector<std::string> argv,
                            const std::vector<std::pair<std::string, std::string>>& env) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    return ErrnoToStatus(e, "pipe");
  }
  std::vector<char*> cargv = CArgv(argv);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return ErrnoToStatus(e, "fork");
  }
  if (pid == 0) {
    // hvxrun killed outright (SIGKILL, the OOM killer) runs no handler: the kernel's SIGTERM
    // makes mpiexec stop the job instead of leaving it running with nobody to report it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    setsid();
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (const char* v : {"HYDRA_HOST_FILE", "HYDRA_RMK", "HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP",
                          "HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC", "MPIEXEC_TIMEOUT"}) {
      unsetenv(v);
    }
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
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

std::optional<ProcessStat> ReadProcessStat(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  ProcessStat p;
  if (fields.size() < 2 || fields[0].size() != 1 || !absl::SimpleAtoi(fields[1], &p.ppid)) {
    return std::nullopt;
  }
  p.state = fields[0][0];
  return p;
}

std::vector<int> ProcessIds() {
  std::vector<int> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (absl::SimpleAtoi(e->d_name, &pid)) pids.push_back(pid);
  }
  closedir(proc);
  return pids;
}

std::vector<pid_t> LiveChildren() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::vector<pid_t> children;
  const pid_t self = getpid();
  for (int pid : ProcessIds()) {
    if (pid == self) continue;
    const std::optional<ProcessStat> p = ReadProcessStat(pid);
    if (p && p->state != 'Z' && p->ppid == self) children.push_back(pid);
  }
  return children;
}

int EndLeftoverChildren(double grace_s, const std::set<pid_t>& keep) {
  std::set<pid_t> ended;
  const Clock::time_point kill_at = Clock::now() + FromSeconds(grace_s);
  const Clock::time_point give_up = kill_at + FromSeconds(5);
  const auto leftovers = [&keep] {
    std::vector<pid_t> left;
    for (pid_t pid : LiveChildren()) {
      if (!keep.count(pid)) left.push_back(pid);
    }
    return left;
  };
  for (std::vector<pid_t> left = leftovers(); !left.empty() && Clock::now() < give_up;
       left = leftovers()) {
    const bool hard = Clock::now() >= kill_at;
    for (pid_t pid : left) {
      if (ended.insert(pid).second || hard) kill(pid, hard ? SIGKILL : SIGTERM);
    }
    poll(nullptr, 0, 20);
  }
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return static_cast<int>(ended.size());
}

std::vector<absl::StatusOr<std::string>> RunCaptureAll(
    const std::vector<std::vector<std::string>>& commands, double timeout_s) {
  struct Running {
    Child c;
    std::string out, err;
    bool exited = false;
    int status = 0;
  };
  const Clock::time_point deadline = Clock::now() + FromSeconds(timeout_s);
  std::vector<absl::StatusOr<std::string>> results(commands.size(), std::string());
  std::vector<std::optional<Running>> running(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    absl::StatusOr<Child> c = Spawn(commands[i]);
    if (c.ok()) {
      running[i] = Running{*c};
    } else {
      results[i] = c.status();
    }
  }
  // Their output until every one has closed both pipes, or the deadline.
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, int>> whose;  // (command, 0 = stdout, 1 = stderr)
    for (size_t i = 0; i < running.size(); ++i) {
      if (!running[i]) continue;
      for (int k = 0; k < 2; ++k) {
        const int fd = k == 0 ? running[i]->c.out : running[i]->c.err;
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        whose.emplace_back(i, k);
      }
    }
    const int ms = static_cast<int>(
        std::min<double>(Seconds(deadline - Clock::now()) * 1000, std::numeric_limits<int>::max()));
    if (fds.empty() || ms <= 0) break;
    if (poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) break;
    for (size_t j = 0; j < fds.size(); ++j) {
      if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Running& r = *running[whose[j].first];
      const int k = whose[j].second;
      char buf[4096];
      const ssize_t n = read(fds[j].fd, buf, sizeof(buf));
      if (n > 0) {
        // Past the bound the rest is read and dropped, and the command's result is an error.
        std::string& kept = k == 0 ? r.out : r.err;
        kept.append(buf, std::min<size_t>(n, kMaxCapturedBytes - kept.size()));
      } else if (n == 0 || errno != EINTR) {
        close(fds[j].fd);
        (k == 0 ? r.c.out : r.c.err) = -1;
      }
    }
  }
  // A command may close its output and go on running (a discovery script that daemonizes, or
  // sleeps): its exit is waited for within the same deadline.
  while (true) {
    bool waiting = false;
    for (std::optional<Running>& r : running) {
      if (!r || r->exited || r->c.out >= 0 || r->c.err >= 0) continue;
      if (waitpid(r->c.pid, &r->status, WNOHANG) == r->c.pid) {
        r->exited = true;
      } else {
        waiting = true;
      }
    }
    if (!waiting || Clock::now() >= deadline) break;
    poll(nullptr, 0, 10);
  }
  for (size_t i = 0; i < running.size(); ++i) {
    if (!running[i]) continue;
    Running& r = *running[i];
    for (int* fd : {&r.c.out, &r.c.err}) {
      if (*fd >= 0) close(*fd);
    }
    const std::string shown = ShellJoin(commands[i]);
    if (!r.exited) {
      kill(-r.c.pid, SIGKILL);
      waitpid(r.c.pid, &r.status, 0);
      results[i] =
          absl::DeadlineExceededError(absl::StrCat("'", shown, "' took over ", timeout_s, " s"));
    } else if (r.out.size() == kMaxCapturedBytes || r.err.size() == kMaxCapturedBytes) {
      results[i] = absl::ResourceExhaustedError(absl::StrCat(
          "'", shown, "' printed ", kMaxCapturedBytes >> 20, " MiB or more on one stream"));
    } else if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
      results[i] = absl::UnavailableError(
          absl::StrCat("'", shown, "' failed: ", absl::StripAsciiWhitespace(r.err)));
    } else {
      results[i] = std::move(r.out);
    }
  }
  return results;
}

absl::StatusOr<std::string> RunCapture(std::vector<std::string> argv, double timeout_s) {
  return std::move(RunCaptureAll({std::move(argv)}, timeout_s)[0]);
}

}  // namespace launch
}  // namespace hvx
