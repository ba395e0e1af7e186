// The shared memory of the ranks of one group on one host: each rank owns a region that every
// other local rank of the group maps, with a header of progress counters the others wait on.
//
//   HVX_ASSIGN_OR_RETURN(std::unique_ptr<ShmGroup> group,
//                        ShmGroup::Create(local_rank, local_size, bytes, exchange, names,
//                        timeout));
//   std::memcpy(group->data(group->rank()), mine, n);
//   group->Set(ShmGroup::kPublished, 1);                     // release: peers may read it now
//   HVX_RETURN_IF_ERROR(group->WaitFor(peer, ShmGroup::kPublished, 1, "allreduce 'grad'"));
//
// Crash safety: a region's name (names.h) is unlinked as soon as every local rank has mapped it,
// or when Create fails at any step, so the memory goes away with the last process that maps it,
// however the job ends; a process killed inside Create leaves its name to the rank wrapper, which
// removes it by tag. A wait gives up when the peer's process is gone (the lock it holds on its
// region released, or, in this pid namespace, its pid gone), when the peer marked itself failed,
// or at the group's timeout, with an error naming the peer: a rank dying mid-collective fails the
// op on the others instead of leaving them spinning.
//
// Not thread-safe: one thread (the engine's) uses a group.
#ifndef HVX_SHM_SHM_GROUP_H_
#define HVX_SHM_SHM_GROUP_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace hvx {
namespace shm {

class ShmGroup {
 public:
  // Monotonic counters in each rank's header, written only by their owner.
  enum Counter { kPublished = 0, kReduced = 1, kConsumed = 2, kNumCounters = 3 };

  // Every local rank's `mine`, in local rank order: a collective over the group's ranks (the
  // control plane of the transport that runs them).
  using Exchange =
      std::function<absl::Status(const std::string& mine, std::vector<std::string>* all)>;

  // Collective over the `size` local ranks: creates this rank's region of `bytes` data bytes
  // (reserved in full, so a /dev/shm too small fails here and not with SIGBUS later), maps every
  // peer's, and unlinks its own name once all have mapped. `names[r]` names local rank r in errors
  // ("global rank 3 (host b)"). Waits give up after `timeout`. If any rank fails, every rank
  // returns an error, the others naming the failing rank and its message.
  static absl::StatusOr<std::unique_ptr<ShmGroup>> Create(int rank, int size, size_t bytes,
                                                          const Exchange& exchange,
                                                          std::vector<std::string> names,
                                                          absl::Duration timeout);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t bytes() const { return bytes_; }
  const std::string& name(int r) const { return names_[r]; }

  // Local rank r's data region (this rank's own for r == rank()).
  char* data(int r) const { return regions_[r].data; }

  // Local rank r's counter, read with acquire ordering.
  uint64_t Get(int r, Counter c) const;
  // Sets this rank's counter `c` with release ordering: writes to this rank's region before it
  // are visible to a peer that reads the new value. Wakes the peers blocked on this rank.
  void Set(Counter c, uint64_t value);

  // How a wait passes the time once a short spin has not seen the peer's progress.
  enum class Waiting {
    // Yields the core between checks, then sleeps for growing intervals (a data transfer whose
    // peer is usually a few microseconds behind, and which advances only while this rank polls).
    kPoll,
    // Blocks in the kernel (a futex on the peer's header) until the peer's next Set: no wake-ups
    // while the peer is away, one when it arrives (a negotiation vote, whose peers may be a whole
    // backward pass late).
    kBlock,
  };

  // Returns once local rank r's counter `c` is at least `target`. Errors (naming `what` and the
  // peer): the peer's process has exited, the peer called MarkFailed, or the wait lasted longer
  // than the group's timeout (DeadlineExceeded).
  absl::Status WaitFor(int r, Counter c, uint64_t target, absl::string_view what,
                       Waiting waiting = Waiting::kPoll);

  // Tells the peers that this rank will not continue (an error ended its collective), so that
  // their waits on it fail at once instead of at the timeout.
  void MarkFailed();

 private:
  struct Header;
  struct Region {
    Header* header = nullptr;
    char* data = nullptr;
    size_t mapped = 0;
    int fd = -1;                       // the region's open file (the owner's holds its lock)
    bool same_pid_ns = false;          // the peer's pid means that process here
    bool lock_tells_liveness = false;  // the owner holds a lock on the region while it lives
  };
  ShmGroup(int rank, int size, size_t bytes, std::vector<std::string> names,
           absl::Duration timeout);
  absl::Status CheckPeer(int r, absl::string_view what) const;
  // Whether local rank r's process has exited: its region's lock released, or (in this pid
  // namespace) its pid gone.
  bool PeerExited(int r) const;

  const int rank_;
  const int size_;
  const size_t bytes_;
  const std::vector<std::string> names_;
  const absl::Duration timeout_;
  std::vector<Region> regions_;
};

// The bytes of header before each region's data.
inline constexpr size_t kShmHeaderBytes = 4096;

}  // namespace shm
}  // namespace hvx

#endif  // HVX_SHM_SHM_GROUP_H_
