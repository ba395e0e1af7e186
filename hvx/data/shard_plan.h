// Which samples each rank reads in an epoch: a pure function of its arguments.
//
//   ShardPlanOptions o;  o.num_samples = 60000;  o.rank = 1;  o.size = 4;  o.epoch = 3;
//   HVX_ASSIGN_OR_RETURN(ShardPlan plan, MakeShardPlan(o));  // 15000 ids, disjoint from others'
//
// Definition. P = a permutation of [0, N) drawn from (seed, epoch) alone (Fisher–Yates with
// SampleRng), identical on every rank and shuffling across shard files, because sample ids are
// global (see Dataset). The epoch is the sequence of positions 0, 1, 2, ... of P, extended past N
// by wrapping around (position p >= N means P[p - N], a padding duplicate). Resuming after
// `consumed` samples of the epoch (summed over all ranks), the remaining positions start at
// `consumed`; each rank gets the same count
//     pad:  ceil((N - consumed) / size)        drop: floor((N - consumed) / size)   (>= 0)
// and rank r takes positions consumed + r, consumed + r + size, ... (strided, as PyTorch's
// DistributedSampler does; with consumed = 0 and kPad the ids match its layout for our P).
// Properties: ranks are disjoint except for padding duplicates; kPad covers every sample,
// kDrop all but fewer than `size`; counts are equal, so no rank runs out of batches first;
// a plan resumed at consumed = k * size is exactly the tail of the original plan, and a resume
// with another world size still reads every remaining sample once.
#ifndef HVX_DATA_SHARD_PLAN_H_
#define HVX_DATA_SHARD_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hvx {
namespace data {

enum class RemainderPolicy {
  kPad,   // repeat samples so that every rank gets ceil(N / size): nothing unseen
  kDrop,  // leave out N mod size samples (different ones each epoch): no duplicates
};

// "pad" or "drop".
absl::StatusOr<RemainderPolicy> ParseRemainderPolicy(absl::string_view name);

struct ShardPlanOptions {
  int64_t num_samples = 0;
  int rank = 0;
  int size = 1;
  int64_t epoch = 0;
  uint64_t seed = 0;
  RemainderPolicy remainder = RemainderPolicy::kPad;
  // false: P is the identity (evaluation in file order).
  bool shuffle = true;
  // Samples of this epoch already consumed, summed over all ranks (resume position).
  int64_t consumed = 0;
};

struct ShardPlan {
  // Global sample ids this rank reads, in order.
  std::vector<int64_t> sample_ids;
  // The last num_padded entries of sample_ids are padding duplicates (kPad only): exclude them
  // from evaluation metrics.
  int64_t num_padded = 0;
};

// InvalidArgument for rank outside [0, size), size < 1, negative counts or epoch.
absl::StatusOr<ShardPlan> MakeShardPlan(const ShardPlanOptions& options);

// P for (num_samples, epoch, seed): the same vector MakeShardPlan uses.
std::vector<int64_t> EpochPermutation(int64_t num_samples, int64_t epoch, uint64_t seed);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_SHARD_PLAN_H_
