#include "hvx/common/stack_dump.h"

#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/debugging/symbolize.h"

namespace hvx {
namespace {

constexpr int kMaxFrames = 32;
constexpr size_t kBufferBytes = 4000;     // one write() of at most PIPE_BUF (4096) bytes
constexpr int64_t kRoundNs = 1000000000;  // a round of dumps lasts a second

std::atomic<int> g_fd{-1};
std::atomic<int64_t> g_round_start_ns{0};  // 0: no round yet
std::atomic<bool> g_python{false};         // Python's faulthandler is registered
int g_wake[2] = {-1, -1};                  // kStackSignal's handler wakes the helper thread
pid_t g_helper_tid = 0;

// Text built in a fixed buffer of N bytes without allocating (inside a signal handler).
template <size_t N>
class Text {
 public:
  void Add(const char* s) {
    while (*s != '\0' && n_ < N) buf_[n_++] = *s++;
  }
  void Add(const char* s, size_t len) {
    for (size_t i = 0; i < len && n_ < N; ++i) buf_[n_++] = s[i];
  }
  void Decimal(uint64_t v) {
    char digits[24];
    int k = 0;
    do {
      digits[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0 && n_ < N) buf_[n_++] = digits[--k];
  }
  void Hex(uintptr_t v) {
    Add("0x");
    char digits[20];
    int k = 0;
    do {
      digits[k++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v != 0);
    while (k > 0 && n_ < N) buf_[n_++] = digits[--k];
  }
  bool full() const { return n_ + 300 > N; }  // no room left for another frame
  const char* data() const { return buf_; }
  size_t size() const { return n_; }

 private:
  char buf_[N];
  size_t n_ = 0;
};

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool InRound() {
  const int64_t start = g_round_start_ns.load(std::memory_order_acquire);
  return start != 0 && NowNs() - start < kRoundNs;
}

uintptr_t InterruptedPc(const void* context) {
  if (context == nullptr) return 0;
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.pc);
#else
  (void)uc;
  return 0;
#endif
}

// Writes "thread TID NAME\n" and, with `frames`, a line per frame of the code this thread was
// running when the signal came (`context`: the handler's ucontext).
void DumpThisThread(const void* context, bool frames) {
  const int fd = g_fd.load(std::memory_order_acquire);
  if (fd < 0) return;
  Text<kBufferBytes> text;
  const long tid = syscall(SYS_gettid);
  text.Add("thread ");
  text.Decimal(static_cast<uint64_t>(tid));
  // Its name, from /proc/self/task/TID/comm.
  Text<64> path;
  path.Add("/proc/self/task/");
  path.Decimal(static_cast<uint64_t>(tid));
  path.Add("/comm");
  char path_z[64] = {};
  std::memcpy(path_z, path.data(), std::min<size_t>(path.size(), sizeof(path_z) - 1));
  const int comm = open(path_z, O_RDONLY | O_CLOEXEC);
  if (comm >= 0) {
    char name[32];
    const ssize_t n = read(comm, name, sizeof(name));
    close(comm);
    if (n > 0) {
      text.Add(" ");
      text.Add(name, static_cast<size_t>(n) - (name[n - 1] == '\n' ? 1 : 0));
    }
  }
  if (!frames) text.Add(" (in a signal handler)");
  text.Add("\n");
  void* pcs[kMaxFrames];
  const int depth = frames ? backtrace(pcs, kMaxFrames) : 0;
  // Frames from the interrupted one on: the handler's own and the signal trampoline's go.
  const uintptr_t interrupted = InterruptedPc(context);
  int first = 0;
  for (int i = 0; i < depth; ++i) {
    if (reinterpret_cast<uintptr_t>(pcs[i]) == interrupted) {
      first = i;
      break;
    }
  }
  for (int i = first; i < depth && !text.full(); ++i) {
    const uintptr_t pc = reinterpret_cast<uintptr_t>(pcs[i]);
    text.Add("  #");
    text.Decimal(static_cast<uint64_t>(i - first));
    text.Add(" ");
    text.Hex(pc);
    text.Add(" ");
    char symbol[256];
    // A return address points after its call: look up the call's own instruction.
    const uintptr_t lookup = i == first ? pc : pc - 1;
    if (absl::Symbolize(reinterpret_cast<void*>(lookup), symbol, sizeof(symbol))) {
      text.Add(symbol);
    } else {
      text.Add("??");
    }
    text.Add("\n");
  }
  ssize_t ignored = write(fd, text.data(), text.size());
  (void)ignored;
}

// Signals every thread of this process but the helper with the follower signal; returns how many.
int SignalOtherThreads() {
  const int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  int signalled = 0;
  const long self = g_helper_tid;
  const pid_t pid = getpid();
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
      uint16_t reclen;
      std::memcpy(&reclen, buf + off + 16, sizeof(reclen));
      const char* name = buf + off + 19;
      long tid = 0;
      bool number = *name != '\0';
      for (const char* c = name; *c != '\0'; ++c) {
        if (*c < '0' || *c > '9') {
          number = false;
          break;
        }
        tid = tid * 10 + (*c - '0');
      }
      if (number && tid != self && syscall(SYS_tgkill, pid, tid, StackFollowerSignal()) == 0) {
        ++signalled;
      }
      off += reclen;
    }
  }
  close(dir);
  return signalled;
}

// Only wakes the helper: the handler may run on a small alternate signal stack (Python's, when it
// shares the signal), where unwinding and symbolizing would overflow into the heap.
void OnStackSignal(int, siginfo_t*, void*) {
  const int saved = errno;
  const char byte = 1;
  ssize_t ignored = write(g_wake[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

void OnFollowerSignal(int, siginfo_t*, void* context) {
  const int saved = errno;
  if (InRound()) {
    stack_t alt;
    if (sigaltstack(nullptr, &alt) == 0 && (alt.ss_flags & SS_ONSTACK) != 0) {
      // Inside another handler on its alternate stack: too small to unwind on.
      DumpThisThread(nullptr, /*frames=*/false);
    } else {
      DumpThisThread(context, /*frames=*/true);
    }
  }
  errno = saved;
}

// The thread that runs a round: Python's frames first (faulthandler, on its own signal), then
// every other thread's own stack.
void* HelperMain(void*) {
  g_helper_tid = static_cast<pid_t>(syscall(SYS_gettid));
  pthread_setname_np(pthread_self(), "hvx-stacks");
  for (;;) {
    char bytes[64];
    const ssize_t n = read(g_wake[0], bytes, sizeof(bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return nullptr;
    if (InRound()) continue;
    g_round_start_ns.store(NowNs(), std::memory_order_release);
    if (g_python.load()) {
      kill(getpid(), PythonStackSignal());
      usleep(100000);  // its lines are many small writes: let them end before the threads' own
    }
    // How many thread stacks the reader is to wait for.
    Text<64> marker;
    marker.Add("signalled ");
    marker.Decimal(static_cast<uint64_t>(SignalOtherThreads()));
    marker.Add(" threads\n");
    ssize_t ignored = write(g_fd.load(), marker.data(), marker.size());
    (void)ignored;
  }
}

bool IsPipe(int fd) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

bool Default(int sig) {
  struct sigaction old;
  return sigaction(sig, nullptr, &old) == 0 && (old.sa_flags & SA_SIGINFO) == 0 &&
         (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN);
}

}  // namespace

static_assert(kStackSignal == SIGURG, "kStackSignal is SIGURG");

int StackSignal() { return kStackSignal; }
int StackFollowerSignal() { return SIGRTMIN + 7; }
int PythonStackSignal() { return SIGRTMIN + 8; }

void EnablePythonStacks() { g_python = true; }

std::string InstallStackDumper(int fd) {
  if (!IsPipe(fd)) return "the stack dump's descriptor is not a pipe";
  static std::mutex* const mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  if (g_fd.load() >= 0) return "";
  if (!Default(StackSignal()) || !Default(StackFollowerSignal()) || !Default(PythonStackSignal())) {
    return "the program handles SIGURG, SIGRTMIN+7 or SIGRTMIN+8 itself";
  }
  // backtrace() loads the unwinder on its first call: not inside a signal handler.
  void* warm[2];
  backtrace(warm, 2);
  absl::InitializeSymbolizer("/proc/self/exe");
  // Programs it execs do not inherit the pipe (forked ones keep it, and are never asked).
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (pipe2(g_wake, O_NONBLOCK | O_CLOEXEC) != 0) return "no pipe for the stack dump's helper";
  fcntl(g_wake[0], F_SETFL, 0);  // the helper blocks reading; the handler never blocks writing
  // The helper starts with every signal blocked, so that none meant for the process (the
  // request, Python's) lands on it.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t helper;
  const int made = pthread_create(&helper, nullptr, HelperMain, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (made != 0) {
    close(g_wake[0]);
    close(g_wake[1]);
    return "no thread for the stack dump's helper";
  }
  pthread_detach(helper);
  g_fd.store(fd);
  struct sigaction sa = {};
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = OnFollowerSignal;
  sigaction(StackFollowerSignal(), &sa, nullptr);
  sa.sa_sigaction = OnStackSignal;
  sigaction(StackSignal(), &sa, nullptr);
  return "";
}

int StackDumpFd() { return g_fd.load(); }

int StackFdFromEnvironment() {
  const char* text = std::getenv(kStackFdVariable);
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  if (*end != '\0' || fd < 3 || fd > 1 << 20) return -1;
  return IsPipe(static_cast<int>(fd)) ? static_cast<int>(fd) : -1;
}

}  // namespace hvx
