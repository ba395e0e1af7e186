#include "hvx/data/shard_plan.h"

#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "hvx/data/random.h"

namespace hvx {
namespace data {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

}  // namespace

absl::StatusOr<RemainderPolicy> ParseRemainderPolicy(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  if (lower == "pad") return RemainderPolicy::kPad;
  if (lower == "drop") return RemainderPolicy::kDrop;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown remainder policy '", name, "'; expected \"pad\" or \"drop\""));
}

std::vector<int64_t> EpochPermutation(int64_t num_samples, int64_t epoch, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(num_samples));
  std::iota(p.begin(), p.end(), int64_t{0});
  SampleRng rng(MixSeed(seed, static_cast<uint64_t>(epoch), 0x5eed5eed));
  for (int64_t i = num_samples - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i + 1)));
    std::swap(p[i], p[j]);
  }
  return p;
}

absl::StatusOr<ShardPlan> MakeShardPlan(const ShardPlanOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard plan: rank ", o.rank, " is outside a world of size ", o.size));
  }
  if (o.num_samples < 0 || o.epoch < 0 || o.consumed < 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard plan: num_samples (", o.num_samples,
                                                   "), epoch (", o.epoch, ") and consumed (",
                                                   o.consumed, ") must not be negative"));
  }
  const int64_t n = o.num_samples;
  ShardPlan plan;
  if (n == 0) return plan;
  const int64_t remaining = n - o.consumed;
  int64_t per_rank = o.remainder == RemainderPolicy::kPad ? CeilDiv(remaining, o.size)
                                                          : FloorDiv(remaining, o.size);
  if (per_rank <= 0) return plan;
  std::vector<int64_t> perm;
  if (o.shuffle) perm = EpochPermutation(n, o.epoch, o.seed);
  plan.sample_ids.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = 0; i < per_rank; ++i) {
    int64_t pos = o.consumed + o.rank + i * o.size;
    if (pos >= n) ++plan.num_padded;
    pos %= n;
    plan.sample_ids.push_back(o.shuffle ? perm[static_cast<size_t>(pos)] : pos);
  }
  return plan;
}

}  // namespace data
}  // namespace hvx
