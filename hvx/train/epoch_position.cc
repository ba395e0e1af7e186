#include "hvx/train/epoch_position.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hvx {
namespace train {
namespace {

// Samples per rank of a shard plan over `remaining` samples (hvx/data/shard_plan.h).
int64_t PerRank(int64_t remaining, int world_size, data::RemainderPolicy remainder) {
  if (remaining <= 0) return 0;
  return remainder == data::RemainderPolicy::kPad ? (remaining + world_size - 1) / world_size
                                                  : remaining / world_size;
}

// Steps that train `per_rank` samples on every rank: under kPad the last one may be short, so
// nothing is left out; under kDrop only whole batches.
int64_t Steps(int64_t per_rank, int batch_size, data::RemainderPolicy remainder) {
  return remainder == data::RemainderPolicy::kPad ? (per_rank + batch_size - 1) / batch_size
                                                  : per_rank / batch_size;
}

std::string Count(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string RanksTimesBatch(const EpochShape& shape) {
  return DescribeGlobalBatch(shape.world_size, shape.batch_size);
}

absl::string_view PolicyName(data::RemainderPolicy remainder) {
  return remainder == data::RemainderPolicy::kPad ? "PAD" : "DROP";
}

}  // namespace

std::string DescribeGlobalBatch(int64_t world_size, int64_t batch_size) {
  return absl::StrCat(Count(world_size, "rank", "ranks"), " x batch ", batch_size);
}

std::vector<int64_t> EncodePosition(const TrainingPosition& p) {
  return {p.epoch, p.steps_in_epoch, p.global_step, p.world_size, p.batch_size, p.samples_in_epoch};
}

absl::StatusOr<TrainingPosition> DecodePosition(absl::Span<const int64_t> v) {
  if (v.size() != 5 && v.size() != 6) {
    return absl::DataLossError(
        absl::StrCat("checkpoint position: expected 5 or 6 values, found ", v.size()));
  }
  TrainingPosition p{v[0], v[1], v[2], v[3], v[4], v.size() == 6 ? v[5] : v[1] * v[3] * v[4]};
  if (p.epoch < 0 || p.steps_in_epoch < 0 || p.global_step < 0 || p.world_size < 1 ||
      p.batch_size < 1 || p.samples_in_epoch < 0) {
    return absl::DataLossError(absl::StrCat("checkpoint position {", absl::StrJoin(v, ", "),
                                            "} (epoch, steps in epoch, global step, world size, "
                                            "batch size[, samples in epoch]) is impossible"));
  }
  return p;
}

int64_t StepsPerEpoch(const EpochShape& shape) {
  int64_t steps = Steps(PerRank(shape.num_samples, shape.world_size, shape.remainder),
                        shape.batch_size, shape.remainder);
  if (shape.max_steps_per_epoch > 0) steps = std::min(steps, shape.max_steps_per_epoch);
  return steps;
}

EpochContinuation ContinueEpoch(const EpochShape& shape, int64_t samples_in_epoch) {
  EpochContinuation c;
  const int64_t global_batch = int64_t{shape.world_size} * shape.batch_size;
  c.steps_per_epoch = StepsPerEpoch(shape);
  c.remaining = std::max<int64_t>(0, shape.num_samples - samples_in_epoch);
  // The steps of a shard plan that starts at samples_in_epoch; without max_steps_per_epoch they
  // never exceed the budget (under kPad, ceil((N - C) / G) <= ceil(N / G) - floor(C / G)), so the
  // epoch's counter ends at steps_per_epoch either way.
  const int64_t per_rank =
      PerRank(shape.num_samples - samples_in_epoch, shape.world_size, shape.remainder);
  const int64_t all = Steps(per_rank, shape.batch_size, shape.remainder);
  const int64_t budget = std::max<int64_t>(0, c.steps_per_epoch - samples_in_epoch / global_batch);
  c.steps = std::min(all, budget);
  c.capped = c.steps < all;
  c.first_step = c.steps_per_epoch - c.steps;
  c.trained = std::min(c.steps * shape.batch_size, per_rank) * shape.world_size;
  return c;
}

std::string DescribeContinuation(const EpochShape& shape, int64_t epoch,
                                 const EpochContinuation& rest) {
  const std::string left =
      rest.capped ? absl::StrCat("(logging.max_steps_per_epoch: ", shape.max_steps_per_epoch, ")")
                  : absl::StrCat("(data.remainder: ", PolicyName(shape.remainder), ")");
  const std::string remain = absl::StrCat(rest.remaining, " of its ",
                                          Count(shape.num_samples, "sample", "samples"), " remain");
  if (rest.steps == 0) {
    return absl::StrCat(
        "epoch ", epoch + 1, " has no step left at ", RanksTimesBatch(shape), ": ", remain,
        rest.capped ? " and are left out " : ", less than one global batch, and are left out ",
        left);
  }
  std::string line =
      absl::StrCat("epoch ", epoch + 1, " resumes at step ", rest.first_step + 1, "/",
                   rest.steps_per_epoch, ": ", remain, "; ", Count(rest.steps, "step", "steps"),
                   " of ", RanksTimesBatch(shape), " train ");
  if (rest.trained == rest.remaining) return absl::StrCat(line, "all of them");
  if (rest.trained > rest.remaining) {
    return absl::StrCat(
        line, "all of them and ",
        Count(rest.trained - rest.remaining, "padding duplicate ", "padding duplicates "), left);
  }
  return absl::StrCat(
      line, rest.trained, " of them, the last ", rest.remaining - rest.trained,
      rest.capped ? " are left out " : " (less than one global batch) are left out ", left);
}

}  // namespace train
}  // namespace hvx
