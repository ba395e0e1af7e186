// The engine's negotiation vote (Communicator::BitwiseAnd) among the ranks of one host, through
// shared memory: each rank publishes its words in its region and ANDs its peers' as they arrive.
//
//   ShmBitwiseAnd vote(group.get());   // a group of at least ShmBitwiseAnd::RegionBytes() a rank
//   HVX_RETURN_IF_ERROR(vote.And(&words, "negotiation vote"));
//
// A rank whose peers are late (still in their backward pass) blocks in the kernel until the last
// of them publishes, where a vote over MPI polls, waking its thread again and again on the core
// its training thread needs. Votes alternate between two slots of each region: a rank writes a
// slot again only after every peer has published the vote after the one that read it.
//
// Not thread-safe; every rank of the group makes the same calls in the same order, with the same
// number of words (at most kMaxWords).
#ifndef HVX_SHM_SHM_VOTE_H_
#define HVX_SHM_SHM_VOTE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "hvx/shm/shm_group.h"

namespace hvx {
namespace shm {

class ShmBitwiseAnd {
 public:
  // The most words one vote carries (a response cache of 32,000 entries needs 1001).
  static constexpr size_t kMaxWords = 1024;
  static constexpr size_t RegionBytes() { return 2 * kMaxWords * sizeof(uint64_t); }

  // `group` must outlive this; it is used for votes only.
  explicit ShmBitwiseAnd(ShmGroup* group) : group_(group) {}

  // Element-wise AND of every local rank's *bits, in place. Errors name `what` and the peer (one
  // that exited, failed or missed the group's timeout); after one, every later call fails too.
  absl::Status And(std::vector<uint64_t>* bits, absl::string_view what);

 private:
  ShmGroup* const group_;
  uint64_t votes_ = 0;  // completed by this rank
  absl::Status broken_;
};

}  // namespace shm
}  // namespace hvx

#endif  // HVX_SHM_SHM_VOTE_H_
