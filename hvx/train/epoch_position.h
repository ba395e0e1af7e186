// Where training stands inside an epoch, how that carries over to another world size or batch
// size, and how it is stored in a checkpoint. No torch.
//
//   const EpochShape shape{num_samples, Size(), batch_size, remainder, max_steps_per_epoch};
//   const EpochContinuation rest = ContinueEpoch(shape, position.samples_in_epoch);
//   // train rest.steps steps, counting the epoch's steps from rest.first_step
//
// The rule. An epoch is the sequence of positions 0, 1, ... of its permutation (see
// hvx/data/shard_plan.h); one step at world size W and batch B per rank trains the next W x B of
// them (the global batch G). The remainder policy decides the end of an epoch:
// - DROP: S = StepsPerEpoch(shape) whole global batches; the rest of the permutation (fewer than
//   G samples) is left out.
// - PAD: every rank's share is padded to ceil(N / W) with duplicates from the start of the
//   permutation, and the last of the S = ceil(N / G) steps may be short (the same number of rows
//   on every rank): every sample is trained, with fewer than W padding duplicates.
// logging.max_steps_per_epoch may cut either. A position records C, the samples of the epoch
// already trained on (padding included). Resumed at any W and B, the epoch trains positions C,
// C+1, ... as the policy cuts an epoch that starts at C: each position once, and under DROP what
// is left out is the end of the permutation, fewer than G samples; under PAD nothing. Its step
// counter ends at S like every epoch's, so it starts at S minus the steps still to train (C / G
// rounded down or up); the learning rate is the schedule at epoch x S + that counter, which is
// what an uninterrupted run at the new size uses at the same point of the epoch. The global step
// counts the optimizer steps of all runs together, so checkpoint names and summaries never go
// back.
#ifndef HVX_TRAIN_EPOCH_POSITION_H_
#define HVX_TRAIN_EPOCH_POSITION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hvx/data/shard_plan.h"

namespace hvx {
namespace train {

// What a checkpoint records of where training stands, besides model and optimizer.
struct TrainingPosition {
  int64_t epoch = 0;           // the epoch in progress (0-based)
  int64_t steps_in_epoch = 0;  // its step counter at the writer's size
  int64_t global_step = 0;     // optimizer steps taken, all runs together
  int64_t world_size = 1;      // of the run that wrote it
  int64_t batch_size = 0;      // per rank, of the run that wrote it
  int64_t samples_in_epoch =
      0;  // positions of the epoch trained on, over all ranks, padding included
};

// The stored form: {epoch, steps_in_epoch, global_step, world_size, batch_size, samples_in_epoch}.
inline constexpr size_t kEncodedPositionSize = 6;
std::vector<int64_t> EncodePosition(const TrainingPosition& position);

// Reads EncodePosition's values, or the 5 of checkpoints written before samples_in_epoch was
// stored, whose runs trained steps_in_epoch x batch_size x world_size samples of the epoch.
// DataLoss when the count or a value is impossible.
absl::StatusOr<TrainingPosition> DecodePosition(absl::Span<const int64_t> stored);

// What decides how an epoch falls into steps.
struct EpochShape {
  int64_t num_samples = 0;
  int world_size = 1;
  int batch_size = 1;  // per rank
  data::RemainderPolicy remainder = data::RemainderPolicy::kDrop;
  int64_t max_steps_per_epoch = 0;  // 0: no limit
};

// Steps of an uninterrupted epoch, at most max_steps_per_epoch: under DROP the whole batches in
// each rank's shard (0 when it holds less than one batch), under PAD its batches, the last one
// possibly short.
int64_t StepsPerEpoch(const EpochShape& shape);

// The part of an epoch still to train after `samples_in_epoch` of it.
struct EpochContinuation {
  int64_t steps_per_epoch = 0;  // StepsPerEpoch(shape)
  int64_t steps = 0;            // steps to train
  int64_t first_step = 0;  // the epoch's step counter before the first: steps_per_epoch - steps
  int64_t remaining =
      0;                // samples of the epoch not yet trained on (num_samples - samples_in_epoch)
  int64_t trained = 0;  // positions the steps train, padding included (steps x G unless PAD's last
                        // step is short)
  bool capped = false;  // max_steps_per_epoch leaves out more than the remainder policy does
};

EpochContinuation ContinueEpoch(const EpochShape& shape, int64_t samples_in_epoch);

// "4 ranks x batch 10".
std::string DescribeGlobalBatch(int64_t world_size, int64_t batch_size);

// The line a resumed run logs, e.g. "epoch 2 resumes at step 4/8: 220 of its 320 samples
// remain; 5 steps of 4 ranks x batch 10 train 200 of them, the last 20 (less than one global
// batch) are left out (data.remainder: DROP)". `epoch` is 0-based.
std::string DescribeContinuation(const EpochShape& shape, int64_t epoch,
                                 const EpochContinuation& rest);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_EPOCH_POSITION_H_
