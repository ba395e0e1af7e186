#include "hvx/launch/rank_wrapper.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "hvx/launch/placement.h"
#include "hvx/launch/records.h"
#include "hvx/shm/names.h"

namespace hvx {
namespace launch {
namespace {

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_exit_code = 0;

// While the program runs, signals go to it; once it has ended, a signal (hydra stopping the job)
// ends the wrapper at once with the program's status.
void ForwardSignal(int sig) {
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
void AbortJob(int code) {
  poll(nullptr, 0, kStopWaitMs);
  int fd = -1;
  if (!ParseInt(getenv("PMI_FD"), &fd) || fd < 0) return;
  const std::string cmd = "cmd=abort exitcode=" + std::to_string(code) + "\n";
  if (write(fd, cmd.data(), cmd.size()) != static_cast<ssize_t>(cmd.size())) return;
  pollfd p{fd, POLLIN, 0};
  poll(&p, 1, kAbortWaitMs);
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

  // The proxy that started us dies -> we get SIGTERM and pass it on.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);

  // The program's shared-memory regions carry this tag, so that what it leaves in /dev/shm
  // (killed while creating its CPU plane) is removed below, whatever pid namespace it ran in.
  // The wrapper removes them itself when its program ends; the sweeper when hydra kills the
  // wrapper first (a job being stopped).
  const std::string shm_tag = shm::NewShmTag();
  setenv(shm::kShmTagVariable, shm_tag.c_str(), 1);
  const int sweeper = shm::StartRegionSweeper(shm_tag);

  WriteFully(2, FormatStartRecord(rank, p.host, getpid()));
  const pid_t self = getpid();
  const pid_t child = fork();
  if (child < 0) {
    const int rc = Fail(rank, p.host, std::string("fork failed: ") + strerror(errno));
    AbortJob(rc);
    return rc;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self) _exit(137);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
      sigaction(sig, &dfl, nullptr);
    }
    execvp(argv[i], argv + i);
    WriteFully(2, "hvxrun: rank " + std::to_string(rank) + " on " + p.host + ": cannot run '" +
                      argv[i] + "': " + strerror(errno) + "\n");
    _exit(127);
  }
  g_child_pid = child;
  shm::WatchProcess(sweeper, child);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      status = 127 << 8;
      break;
    }
  }
  const int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  g_exit_code = code;
  g_child_pid = 0;
  shm::RemoveRegionsTagged(shm_tag);
  WriteFully(2, FormatExitRecord(rank, p.host, status));
  if (code != 0) AbortJob(code);
  return code;
}

}  // namespace launch
}  // namespace hvx
