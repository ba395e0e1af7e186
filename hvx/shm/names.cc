#include "hvx/shm/names.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hvx/common/random_hex.h"

namespace hvx {
namespace shm {
namespace {

bool IsValidTag(const char* tag) {
  const size_t n = tag == nullptr ? 0 : strlen(tag);
  if (n == 0 || n > 32) return false;
  for (size_t i = 0; i < n; ++i) {
    const char c = tag[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) return false;
  }
  return true;
}

}  // namespace

std::string NewShmTag() { return RandomHex(); }

const std::string& ProcessShmTag() {
  static const std::string tag = [] {
    const char* given = getenv(kShmTagVariable);
    return IsValidTag(given) ? std::string(given) : NewShmTag();
  }();
  return tag;
}

std::string RegionName(uint64_t n) {
  return "/hvx." + ProcessShmTag() + "." + std::to_string(getpid()) + "." + std::to_string(n) +
         "." + RandomHex();
}

int RemoveRegionsTagged(const std::string& tag) {
  if (!IsValidTag(tag.c_str())) return 0;
  const std::string prefix = "hvx." + tag + ".";
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    if (shm_unlink(("/" + std::string(e->d_name)).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

namespace {

// Whether `pid` has ended: gone, or a zombie nobody has reaped yet.
bool Ended(int pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return true;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (f == nullptr) return true;
  char buf[512] = {};
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  // "pid (comm) S ...": the state follows the last ')'.
  const char* close_paren = strrchr(buf, ')');
  return n == 0 || close_paren == nullptr || close_paren[1] == '\0' || close_paren[2] == 'Z' ||
         close_paren[2] == 'X';
}

}  // namespace

int StartRegionSweeper(const std::string& tag) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid > 0) {
    close(fds[0]);
    return fds[1];
  }
  // The watchdog: out of the wrapper's process group and session, holding nothing open that
  // anyone waits on (hydra reads the wrapper's stdout and stderr until they close).
  setsid();
  // A stop is not for it: hvxrun ends what a job leaves behind (SIGTERM, then SIGKILL a second
  // later), and the sweep it still has to do takes milliseconds once its program is gone.
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) signal(sig, SIG_IGN);
  const int devnull = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) dup2(devnull, fd);
  const int keep = 3;
  if (fds[0] != keep) dup2(fds[0], keep);
  close_range(keep + 1, ~0U, 0);
  // The program's pid (WatchProcess: one write below PIPE_BUF, so it arrives whole), then nothing
  // until the write end closes: the wrapper is gone.
  int watched = 0;
  ssize_t n;
  do {
    n = read(keep, &watched, sizeof(watched));
  } while (n < 0 && errno == EINTR);
  const bool have_pid = n == static_cast<ssize_t>(sizeof(watched));
  for (char rest; n != 0;) {
    n = read(keep, &rest, 1);
    if (n < 0 && errno != EINTR) break;
  }
  // The program dies with its wrapper (PR_SET_PDEATHSIG) or has already ended; wait a bounded
  // time for it, so that it cannot create a name after the sweep.
  if (have_pid) {
    for (int i = 0; i < 2000 && !Ended(watched); ++i) usleep(1000);
  }
  RemoveRegionsTagged(tag);
  _exit(0);
}

void WatchProcess(int sweeper_fd, int pid) {
  if (sweeper_fd < 0) return;
  const ssize_t n = write(sweeper_fd, &pid, sizeof(pid));
  (void)n;
}

}  // namespace shm
}  // namespace hvx
