// What makes the ranks' requests for one tensor unservable, as pure functions of the requests: each
// returns what is wrong, in words that name the ranks, or "" when nothing is. The coordinator runs
// them on every name that became ready and names the tensor (Coordinator::Validate).
//
//   const RankNames who{global_ranks, hosts};
//   Mismatch(who, 0, a, 3, b);  // "mismatched data types: rank 0 sent float32, rank 3 sent int32"
//   OpLimits(who, /*size=*/3, adasum);  // "Adasum needs a power-of-two number of ranks; ..."
#ifndef HVX_CORE_VALIDATION_H_
#define HVX_CORE_VALIDATION_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "hvx/core/message.h"

namespace hvx {

// How messages name a process set's ranks.
struct RankNames {
  std::vector<int> global_ranks;   // of each set rank; empty: set ranks are global ranks
  std::vector<std::string> hosts;  // of each set rank; empty: hosts are not named
  // "rank 5", or "rank 5 (set rank 1)" where the set rank differs from the global one.
  std::string Who(int set_rank) const;
  // Who(set_rank) and " (host h)" where the host is known.
  std::string WhoOnHost(int set_rank) const;
};

// The first way in which `b`, set rank r's request, differs from `a`, set rank `first`'s, that
// the operation cares about: its type, data type, device type, shape (every dimension for
// ALLREDUCE, REDUCESCATTER and BROADCAST, all but the first for ALLGATHER and ALLTOALL), a process
// set's ranks, the reduction and its scale factors, a broadcast's root.
std::string Mismatch(const RankNames& who, int first, const Request& a, int r, const Request& b);

// Operations other than ALLREDUCE while some ranks have joined (`joined`: their set ranks).
std::string JoinProblem(const RankNames& who, const std::set<int>& joined, const Request& a);

// A negative dimension in `request`, set rank `rank`'s (each rank refuses its own at submission;
// a peer's are checked before any rank sizes an output from them).
std::string NegativeDimension(const RankNames& who, int rank, const Request& request);

// What the operation of `a` cannot do in a set of `size` ranks: Adasum on a size that is not a
// power of two or on integers, REDUCESCATTER of a scalar or with a reduction other than sum and
// average, a BROADCAST root outside the set, ALLGATHER or ALLTOALL of a scalar, process set ranks
// outside the job.
std::string OpLimits(const RankNames& who, int size, const Request& a);

// ALLTOALL: the rows each rank sends each rank (rows[r * size + j]: from r to j, size =
// request_of_rank.size()), from each rank's splits (empty: an equal split of its first
// dimension). Splits must be one per rank, non-negative, and sum to the first dimension.
std::string AlltoallRows(const RankNames& who, const std::vector<const Request*>& request_of_rank,
                         std::vector<int64_t>* rows);

}  // namespace hvx

#endif  // HVX_CORE_VALIDATION_H_
