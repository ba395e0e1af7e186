#include "hvx/shm/shm_group.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "hvx/common/clock.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/status.h"
#include "hvx/shm/names.h"

namespace hvx {
namespace shm {
namespace {

constexpr uint64_t kMagic = 0x68767873686d3033;  // "hvxshm03"

// A peer's progress usually arrives within microseconds of this rank's own: spinning that long
// costs nothing. Past it the waiter yields its core between checks, which lets a descheduled
// peer (more ranks than cores) run; past kYield it sleeps, so that a rank waiting for a slow peer
// (still in its backward pass, or descheduled) leaves the core to training instead of taking a
// whole one for the wait. Each sleep is a tenth of the wait so far, between kMinSleep and
// kMaxSleep: the wake-up comes at most about 10% (and kMaxSleep) after the peer's progress.
constexpr absl::Duration kSpin = absl::Microseconds(100);
constexpr absl::Duration kYield = absl::Milliseconds(1);
constexpr absl::Duration kMinSleep = absl::Microseconds(50);
constexpr absl::Duration kMaxSleep = absl::Milliseconds(2);
// How often a long wait checks that the peer's process still exists.
constexpr absl::Duration kLivenessInterval = absl::Milliseconds(20);
// A blocking wait's spin: a peer already on its way arrives within it without a system call.
constexpr absl::Duration kBlockSpin = absl::Microseconds(20);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

size_t RoundUpToPage(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

// This process's pid namespace as (device, inode) of /proc/self/ns/pid; {0, 0} when unknown (no
// /proc of this namespace mounted).
std::pair<uint64_t, uint64_t> PidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return {0, 0};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

// A write lock on the whole region, held through its open file description: the kernel drops it
// when the last descriptor of that description closes, that is when the owner and every child it
// forked since have exited, in whatever pid namespace they run.
struct flock WholeFile() {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  return lock;
}

std::string NextRegionName() {
  static std::atomic<uint64_t> next{0};
  return RegionName(next.fetch_add(1));
}

// Every rank's verdict of one step: OK when all are OK, else the error every rank returns (its
// own for the failing rank, the failing rank's message for the others).
absl::Status Agree(const ShmGroup::Exchange& exchange, const absl::Status& local,
                   const std::vector<std::string>& names, int rank, absl::string_view step) {
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(exchange(local.ok() ? std::string() : std::string(local.message()), &all));
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r].empty()) continue;
    if (r == rank) return local;
    return absl::FailedPreconditionError(absl::StrCat(step, " failed on ", names[r], ": ", all[r]));
  }
  return absl::OkStatus();
}

}  // namespace

struct ShmGroup::Header {
  struct alignas(64) Line {
    std::atomic<uint64_t> value;
  };
  uint64_t magic;
  int64_t pid;
  uint64_t pid_ns_dev, pid_ns_ino;  // the owner's pid namespace (PidNamespace), 0 when unknown
  uint64_t locked;                  // 1: the owner holds WholeFile() on the region while it lives
  uint64_t bytes;
  int64_t rank;    // the owner's local rank in its group
  char name[128];  // the region's own name, as the owner announced it
  Line counters[kNumCounters];
  Line failed;
  // Futex words (shared between processes: FUTEX_WAIT without FUTEX_PRIVATE_FLAG): `generation`
  // grows at every Set of the owner; `sleepers` counts the peers blocked on it, so that a Set
  // makes the wake-up system call only when someone sleeps.
  struct alignas(64) Doorbell {
    std::atomic<uint32_t> generation;
    std::atomic<uint32_t> sleepers;
  } doorbell;
};

ShmGroup::ShmGroup(int rank, int size, size_t bytes, std::vector<std::string> names,
                   absl::Duration timeout)
    : rank_(rank),
      size_(size),
      bytes_(bytes),
      names_(std::move(names)),
      timeout_(timeout),
      regions_(size) {}

ShmGroup::~ShmGroup() {
  for (Region& r : regions_) {
    if (r.header != nullptr) munmap(r.header, r.mapped);
    if (r.fd >= 0) close(r.fd);
  }
}

absl::StatusOr<std::unique_ptr<ShmGroup>> ShmGroup::Create(int rank, int size, size_t bytes,
                                                           const Exchange& exchange,
                                                           std::vector<std::string> names,
                                                           absl::Duration timeout) {
  if (rank < 0 || rank >= size || static_cast<int>(names.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat("ShmGroup::Create: rank ", rank, " of ", size,
                                                   " with ", names.size(), " names"));
  }
  static_assert(sizeof(Header) <= kShmHeaderBytes, "the header outgrew its page");
  std::unique_ptr<ShmGroup> group(new ShmGroup(rank, size, bytes, std::move(names), timeout));
  const size_t total = RoundUpToPage(kShmHeaderBytes + bytes);
  std::string name = NextRegionName();
  // The name goes on every path out of here: once every rank has mapped it, or at the first
  // failure (a peer that died, an exchange that timed out), so that no attempt leaves 16 MiB a rank
  // in /dev/shm. What a SIGKILL leaves, the rank wrapper removes (names.h).
  bool named = false;
  absl::Cleanup unlink_name = [&] {
    if (named) shm_unlink(name.c_str());
  };

  // This process's pid namespace, which its header names and each peer's is compared with.
  const std::pair<uint64_t, uint64_t> pid_ns = PidNamespace();

  // 1. This rank's region, reserved in full and mapped with its pages present.
  absl::Status created = [&]() -> absl::Status {
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    // Names are random; one taken all the same is someone else's: take another.
    for (int tries = 1; fd < 0 && errno == EEXIST && tries < 4; ++tries) {
      name = NextRegionName();
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("creating /dev/shm", name));
    named = true;
    Failpoint("shm_create");
    const int reserve = posix_fallocate(fd, 0, static_cast<off_t>(total));
    if (reserve != 0) {
      close(fd);
      // What /dev/shm holds, so that the fix can be sized: each rank of the host needs a region.
      struct statvfs fs;
      const std::string room =
          statvfs("/dev/shm", &fs) == 0
              ? absl::StrCat("; /dev/shm has ", (fs.f_blocks * fs.f_frsize) >> 20, " MiB, ",
                             (fs.f_bavail * fs.f_frsize) >> 20, " MiB of it free, and each of the ",
                             size, " ranks of this host needs ", total >> 20, " MiB")
              : std::string();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot reserve ", total >> 20, " MiB of shared memory in /dev/shm (", strerror(reserve),
          room,
          "): give the job a larger /dev/shm (docker run --shm-size; a Kubernetes emptyDir "
          "volume with medium: Memory) or set HVX_CPU_PLANE=mpi"));
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      close(fd);
      return ErrnoToStatus(e, absl::StrCat("mapping /dev/shm", name));
    }
    Region& own = group->regions_[rank];
    own.header = static_cast<Header*>(p);
    own.data = static_cast<char*>(p) + kShmHeaderBytes;
    own.mapped = total;
    own.fd = fd;  // kept open: it holds the lock that tells the peers this rank lives
    struct flock hold = WholeFile();
    own.header->locked = fcntl(fd, F_OFD_SETLK, &hold) == 0 ? 1 : 0;
    std::tie(own.header->pid_ns_dev, own.header->pid_ns_ino) = pid_ns;
    own.header->pid = getpid();
    own.header->bytes = bytes;
    own.header->rank = rank;
    snprintf(own.header->name, sizeof(own.header->name), "%s", name.c_str());
    own.header->magic = kMagic;
    return absl::OkStatus();
  }();
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(exchange(created.ok() ? name : "!" + std::string(created.message()), &all));
  for (int r = 0; r < size && created.ok(); ++r) {
    if (absl::StartsWith(all[r], "!")) {
      created = absl::FailedPreconditionError(
          absl::StrCat("shared memory for the CPU data plane failed on ", group->names_[r], ": ",
                       all[r].substr(1)));
    }
  }
  if (!created.ok()) return created;

  // 2. Every peer's region.
  absl::Status mapped;
  for (int r = 0; r < size && mapped.ok(); ++r) {
    if (r == rank) continue;
    mapped = [&]() -> absl::Status {
      if (all[r] == name) {
        // Mapping it would make this rank its own peer: each rank would wait for itself.
        return absl::InternalError(absl::StrCat(group->names_[r],
                                                " announced this rank's own "
                                                "region /dev/shm",
                                                name));
      }
      const int fd = shm_open(all[r].c_str(), O_RDWR | O_CLOEXEC, 0);
      if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("opening /dev/shm", all[r]));
      struct stat st;
      if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != total) {
        close(fd);
        return absl::InternalError(absl::StrCat("/dev/shm", all[r], " of ", group->names_[r],
                                                " is not ", total, " bytes"));
      }
      void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        close(fd);
        return ErrnoToStatus(e, absl::StrCat("mapping /dev/shm", all[r]));
      }
      Region& peer = group->regions_[r];
      peer.header = static_cast<Header*>(p);
      peer.data = static_cast<char*>(p) + kShmHeaderBytes;
      peer.mapped = total;
      peer.fd = fd;  // to ask whether the owner's lock is still held
      if (peer.header->magic != kMagic || peer.header->bytes != bytes) {
        return absl::InternalError(absl::StrCat("/dev/shm", all[r], " of ", group->names_[r],
                                                " is not an hvx region of ", bytes, " bytes"));
      }
      // The region this name leads to here is the one that rank created (not another job's or
      // another pod's under the same name).
      if (peer.header->rank != r ||
          strncmp(peer.header->name, all[r].c_str(), sizeof(peer.header->name)) != 0) {
        return absl::InternalError(absl::StrCat(
            "/dev/shm", all[r], " of ", group->names_[r], " belongs to local rank ",
            peer.header->rank, " as ", peer.header->name,
            ": the ranks of this host do not share one /dev/shm (containers or pods with one "
            "host name but separate IPC namespaces); set HVX_CPU_PLANE=mpi"));
      }
      // A peer in another pid namespace (a container of a pod that shares this one's /dev/shm)
      // has a pid this process cannot see, or sees as another process's (its own init, as pid 1):
      // kill() only asks about peers of this namespace; the lock answers for every peer.
      peer.same_pid_ns = pid_ns.second != 0 && peer.header->pid_ns_ino == pid_ns.second &&
                         peer.header->pid_ns_dev == pid_ns.first;
      peer.lock_tells_liveness = peer.header->locked == 1;
      return absl::OkStatus();
    }();
  }
  absl::Status agreed = Agree(exchange, Annotate(mapped, "mapping a peer's shared memory"),
                              group->names_, rank, "mapping shared memory for the CPU data plane");
  // Every rank has mapped (or given up on) every region: the name can go (unlink_name).
  HVX_RETURN_IF_ERROR(agreed);
  return group;
}

uint64_t ShmGroup::Get(int r, Counter c) const {
  return regions_[r].header->counters[c].value.load(std::memory_order_acquire);
}

void ShmGroup::Set(Counter c, uint64_t value) {
  Header* h = regions_[rank_].header;
  // Sequentially consistent, with the waiter's (WaitFor, kBlock): either this Set sees its
  // `sleepers` and wakes it, or the waiter's check that follows its increment sees `value`.
  h->counters[c].value.store(value, std::memory_order_seq_cst);
  h->doorbell.generation.fetch_add(1, std::memory_order_seq_cst);
  if (h->doorbell.sleepers.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, &h->doorbell.generation, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
  }
}

void ShmGroup::MarkFailed() {
  regions_[rank_].header->failed.value.store(1, std::memory_order_release);
}

absl::Status ShmGroup::CheckPeer(int r, absl::string_view what) const {
  const Header* h = regions_[r].header;
  if (h->failed.value.load(std::memory_order_acquire) != 0) {
    return absl::AbortedError(absl::StrCat(what, ": ", names_[r], " failed during the collective"));
  }
  if (PeerExited(r)) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", names_[r], " (pid ", h->pid, ") exited during the collective"));
  }
  return absl::OkStatus();
}

bool ShmGroup::PeerExited(int r) const {
  const Region& peer = regions_[r];
  if (peer.lock_tells_liveness) {
    // Released: the owner and whatever it forked are gone.
    struct flock probe = WholeFile();
    if (fcntl(peer.fd, F_OFD_GETLK, &probe) == 0 && probe.l_type == F_UNLCK) return true;
  }
  // The lock outlives the owner in a child it forked (a data loader's worker): its pid, where this
  // process sees it, says more.
  return peer.same_pid_ns && kill(static_cast<pid_t>(peer.header->pid), 0) != 0 && errno == ESRCH;
}

absl::Status ShmGroup::WaitFor(int r, Counter c, uint64_t target, absl::string_view what,
                               Waiting waiting) {
  const std::atomic<uint64_t>& value = regions_[r].header->counters[c].value;
  if (value.load(std::memory_order_acquire) >= target) return absl::OkStatus();
  const absl::Time start = MonotonicNow();
  absl::Time next_check = start + kLivenessInterval;
  enum { kSpinning, kYielding, kSleeping, kBlocking } phase = kSpinning;
  for (uint64_t polls = 1;; ++polls) {
    if (value.load(std::memory_order_acquire) >= target) return absl::OkStatus();
    if (phase == kBlocking) {
      Header::Doorbell& bell = regions_[r].header->doorbell;
      bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = bell.generation.load(std::memory_order_seq_cst);
      if (value.load(std::memory_order_seq_cst) < target) {
        // Until the owner's next Set, or the next liveness check.
        const absl::Duration left = std::max(absl::ZeroDuration(), next_check - MonotonicNow());
        const timespec timeout = absl::ToTimespec(left);
        syscall(SYS_futex, &bell.generation, FUTEX_WAIT, seen, &timeout, nullptr, 0);
      }
      bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    } else if (phase == kSpinning) {
      CpuRelax();
      if (polls % 64 != 0) continue;
    } else if (phase == kYielding) {
      sched_yield();
      if (polls % 8 != 0) continue;
    }
    const absl::Time now = MonotonicNow();
    const absl::Duration waited = now - start;
    if (waiting == Waiting::kBlock) {
      phase = waited < kBlockSpin ? kSpinning : kBlocking;
    } else {
      phase = waited < kSpin ? kSpinning : waited < kYield ? kYielding : kSleeping;
    }
    if (phase == kSleeping) {
      absl::SleepFor(std::clamp(waited / 10, kMinSleep, kMaxSleep));
    }
    if (now < next_check) continue;
    next_check = now + kLivenessInterval;
    if (value.load(std::memory_order_acquire) >= target) return absl::OkStatus();
    absl::Status peer = CheckPeer(r, what);
    // The peer may have reached the target and ended between the read above and the check.
    if (!peer.ok() && value.load(std::memory_order_acquire) >= target) return absl::OkStatus();
    HVX_RETURN_IF_ERROR(peer);
    if (now - start > timeout_) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": waited ", absl::FormatDuration(now - start), " for ", names_[r],
          " (HVX_COLLECTIVE_TIMEOUT_S): it failed, froze or stopped calling collectives"));
    }
  }
}

}  // namespace shm
}  // namespace hvx
