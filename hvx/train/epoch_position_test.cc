#include "hvx/train/epoch_position.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

using data::RemainderPolicy;

EpochShape Shape(int64_t n, int world_size, int batch_size,
                 RemainderPolicy remainder = RemainderPolicy::kDrop, int64_t max_steps = 0) {
  return EpochShape{n, world_size, batch_size, remainder, max_steps};
}

// Positions of the epoch that `steps` steps at `shape` train from `consumed` on, as the pipeline
// cuts them: each rank's shard plan (unshuffled, so a sample id is its position mod N) in
// batches. Positions past N (padding) are returned as they are.
std::vector<int64_t> TrainedPositions(const EpochShape& shape, int64_t consumed, int64_t steps) {
  std::vector<int64_t> positions;
  for (int r = 0; r < shape.world_size; ++r) {
    data::ShardPlanOptions o;
    o.num_samples = shape.num_samples;
    o.rank = r;
    o.size = shape.world_size;
    o.remainder = shape.remainder;
    o.shuffle = false;
    o.consumed = consumed;
    auto plan = data::MakeShardPlan(o);
    EXPECT_TRUE(plan.ok()) << plan.status();
    const int64_t shard = static_cast<int64_t>(plan->sample_ids.size());
    // PAD's last step may be short: it trains what is left of the shard.
    const int64_t rows = shape.remainder == RemainderPolicy::kPad
                             ? std::min(steps * shape.batch_size, shard)
                             : steps * shape.batch_size;
    EXPECT_GE(shard, rows);
    for (int64_t i = 0; i < rows && i < static_cast<int64_t>(plan->sample_ids.size()); ++i) {
      positions.push_back(consumed + r + i * shape.world_size);
      EXPECT_EQ(plan->sample_ids[static_cast<size_t>(i)], positions.back() % shape.num_samples);
    }
  }
  return positions;
}

// DROP: the whole batches of each rank's shard; PAD: all its batches, the last one possibly short.
TEST(EpochPositionTest, StepsPerEpochCutEachShardIntoBatches) {
  for (RemainderPolicy policy : {RemainderPolicy::kDrop, RemainderPolicy::kPad}) {
    for (int64_t n : {1, 7, 40, 97, 320}) {
      for (int w : {1, 2, 3, 4}) {
        for (int b : {1, 3, 10, 32}) {
          data::ShardPlanOptions o;
          o.num_samples = n;
          o.size = w;
          o.remainder = policy;
          const int64_t shard = static_cast<int64_t>(data::MakeShardPlan(o)->sample_ids.size());
          const int64_t steps = policy == RemainderPolicy::kPad ? (shard + b - 1) / b : shard / b;
          EXPECT_EQ(StepsPerEpoch(Shape(n, w, b, policy)), steps) << n << " " << w << " " << b;
          EXPECT_EQ(StepsPerEpoch(Shape(n, w, b, policy, 2)), std::min<int64_t>(2, steps));
        }
      }
    }
  }
}

TEST(EpochPositionTest, SameSizeResumeContinuesTheCounter) {
  const EpochShape shape = Shape(240, 2, 10);
  for (int64_t k = 0; k <= 12; ++k) {
    const EpochContinuation rest = ContinueEpoch(shape, k * 20);
    EXPECT_EQ(rest.steps_per_epoch, 12);
    EXPECT_EQ(rest.steps, 12 - k);
    EXPECT_EQ(rest.first_step, k);
    EXPECT_FALSE(rest.capped);
  }
}

// Stopped after every step of every shape and resumed at every other: the two runs train
// positions 0 .. c + trained - 1 once each; under DROP what stays out is the end of the
// permutation, fewer than one new global batch; under PAD nothing stays out and fewer than one
// padding duplicate per new rank is added; the counter ends at the new size's steps per epoch.
TEST(EpochPositionTest, ResumedAtAnotherSizeEveryPositionOnce) {
  for (RemainderPolicy policy : {RemainderPolicy::kDrop, RemainderPolicy::kPad}) {
    for (int64_t n : {97, 320}) {
      for (int w1 : {1, 2, 4}) {
        for (int b1 : {3, 10, 32}) {
          const EpochShape before = Shape(n, w1, b1, policy);
          for (int w2 : {1, 2, 3, 4}) {
            for (int b2 : {3, 10, 32, 64}) {
              const EpochShape after = Shape(n, w2, b2, policy);
              const int64_t g2 = int64_t{w2} * b2;
              for (int64_t k = 1; k < StepsPerEpoch(before); ++k) {
                SCOPED_TRACE(testing::Message()
                             << "N " << n << ", " << w1 << "x" << b1 << " step " << k << " -> "
                             << w2 << "x" << b2 << (policy == RemainderPolicy::kPad ? " pad" : ""));
                const int64_t c = k * w1 * b1;
                const EpochContinuation rest = ContinueEpoch(after, c);
                std::vector<int64_t> all = TrainedPositions(before, 0, k);
                for (int64_t p : TrainedPositions(after, c, rest.steps)) all.push_back(p);
                const std::set<int64_t> once(all.begin(), all.end());
                ASSERT_EQ(once.size(), all.size()) << "a position trained twice";
                const int64_t end = c + rest.trained;
                ASSERT_EQ(static_cast<int64_t>(once.size()), end);
                EXPECT_EQ(*once.rbegin(), end - 1);
                EXPECT_EQ(rest.remaining, n - c);
                if (policy == RemainderPolicy::kPad) {
                  EXPECT_GE(rest.trained, rest.remaining) << "a sample left out";
                  EXPECT_LT(rest.trained - rest.remaining, w2);
                } else {
                  EXPECT_LT(rest.remaining - rest.trained, g2);
                  EXPECT_LE(rest.trained, rest.remaining);
                }
                EXPECT_EQ(rest.first_step + rest.steps, StepsPerEpoch(after));
                EXPECT_GE(rest.first_step, c / g2);
                EXPECT_LE(rest.first_step, (c + g2 - 1) / g2);
                EXPECT_FALSE(rest.capped);
              }
            }
          }
        }
      }
    }
  }
}

TEST(EpochPositionTest, MaxStepsPerEpochCapsTheRest) {
  // 4 steps of 20 at most; 100 samples seen at 2 x 10 (5 steps of an uncapped run): nothing left.
  EpochContinuation rest = ContinueEpoch(Shape(320, 2, 10, RemainderPolicy::kDrop, 4), 100);
  EXPECT_EQ(rest.steps, 0);
  EXPECT_EQ(rest.first_step, 4);
  EXPECT_TRUE(rest.capped);
  EXPECT_EQ(DescribeContinuation(Shape(320, 2, 10, RemainderPolicy::kDrop, 4), 0, rest),
            "epoch 1 has no step left at 2 ranks x batch 10: 220 of its 320 samples remain and are "
            "left out "
            "(logging.max_steps_per_epoch: 4)");
  // 40 seen: steps 3 and 4 remain.
  rest = ContinueEpoch(Shape(320, 2, 10, RemainderPolicy::kDrop, 4), 40);
  EXPECT_EQ(rest.steps, 2);
  EXPECT_EQ(rest.first_step, 2);
  EXPECT_TRUE(rest.capped);
  EXPECT_EQ(DescribeContinuation(Shape(320, 2, 10, RemainderPolicy::kDrop, 4), 1, rest),
            "epoch 2 resumes at step 3/4: 280 of its 320 samples remain; 2 steps of 2 ranks x "
            "batch 10 train 40 "
            "of them, the last 240 are left out (logging.max_steps_per_epoch: 4)");
}

TEST(EpochPositionTest, Descriptions) {
  // 2 -> 4 ranks after 5 of 16 steps.
  EpochShape shape = Shape(320, 4, 10);
  EpochContinuation rest = ContinueEpoch(shape, 100);
  EXPECT_EQ(rest.steps, 5);
  EXPECT_EQ(rest.first_step, 3);
  EXPECT_EQ(
      DescribeContinuation(shape, 0, rest),
      "epoch 1 resumes at step 4/8: 220 of its 320 samples remain; 5 steps of 4 ranks x batch 10 "
      "train 200 "
      "of them, the last 20 (less than one global batch) are left out (data.remainder: DROP)");
  // Batch 64 -> 32 after 1 of 2 steps.
  shape = Shape(320, 2, 32);
  EXPECT_EQ(DescribeContinuation(shape, 0, ContinueEpoch(shape, 128)),
            "epoch 1 resumes at step 3/5: 192 of its 320 samples remain; 3 steps of 2 ranks x "
            "batch 32 train all of "
            "them");
  // PAD: 13 samples, 4 ranks x 3 after 1 step of 1 rank x 3: 10 remain, the last of 2 steps.
  shape = Shape(13, 4, 3, RemainderPolicy::kPad);
  EXPECT_EQ(DescribeContinuation(shape, 2, ContinueEpoch(shape, 3)),
            "epoch 3 resumes at step 2/2: 10 of its 13 samples remain; 1 step of 4 ranks x batch 3 "
            "train all of them "
            "and 2 padding duplicates (data.remainder: PAD)");
  // PAD, 2 -> 4 ranks after 5 of 16 steps: 220 remain, 55 per rank, 6 steps of which the last
  // trains 5 rows per rank.
  shape = Shape(320, 4, 10, RemainderPolicy::kPad);
  rest = ContinueEpoch(shape, 100);
  EXPECT_EQ(rest.steps_per_epoch, 8);
  EXPECT_EQ(rest.steps, 6);
  EXPECT_EQ(rest.first_step, 2);
  EXPECT_EQ(rest.trained, 220);
  EXPECT_EQ(DescribeContinuation(shape, 0, rest),
            "epoch 1 resumes at step 3/8: 220 of its 320 samples remain; 6 steps of 4 ranks x "
            "batch 10 train all of them");
  // PAD, 97 samples at 4 ranks x 10: 3 steps, the last short. After one: 57 remain, 15 per
  // rank, a step of 10 rows and one of 5, with 3 padding duplicates in all.
  shape = Shape(97, 4, 10, RemainderPolicy::kPad);
  EXPECT_EQ(StepsPerEpoch(shape), 3);
  EXPECT_EQ(DescribeContinuation(shape, 0, ContinueEpoch(shape, 40)),
            "epoch 1 resumes at step 2/3: 57 of its 97 samples remain; 2 steps of 4 ranks x batch "
            "10 train all of them and 3 padding duplicates (data.remainder: PAD)");
  // Less than one global batch left.
  shape = Shape(320, 4, 10);
  EXPECT_EQ(DescribeContinuation(shape, 0, ContinueEpoch(shape, 300)),
            "epoch 1 has no step left at 4 ranks x batch 10: 20 of its 320 samples remain, less "
            "than one global "
            "batch, and are left out (data.remainder: DROP)");
  shape = Shape(64, 1, 16);
  EXPECT_EQ(DescribeContinuation(shape, 0, ContinueEpoch(shape, 32)),
            "epoch 1 resumes at step 3/4: 32 of its 64 samples remain; 2 steps of 1 rank x batch "
            "16 train all of "
            "them");
}

TEST(EpochPositionTest, StoredPositions) {
  const TrainingPosition p{1, 3, 17, 4, 10, 120};
  const std::vector<int64_t> stored = EncodePosition(p);
  EXPECT_EQ(stored, (std::vector<int64_t>{1, 3, 17, 4, 10, 120}));
  auto back = DecodePosition(stored);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(EncodePosition(*back), stored);
  // A checkpoint from before samples_in_epoch: 5 steps of 2 ranks x 10.
  auto old = DecodePosition(std::vector<int64_t>{1, 5, 17, 2, 10});
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(EncodePosition(*old), (std::vector<int64_t>{1, 5, 17, 2, 10, 100}));

  auto short_one = DecodePosition(std::vector<int64_t>{1, 5, 17, 2});
  EXPECT_EQ(short_one.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(short_one.status().message(), "checkpoint position: expected 5 or 6 values, found 4");
  auto zero_ranks = DecodePosition(std::vector<int64_t>{1, 5, 17, 0, 10, 0});
  EXPECT_EQ(zero_ranks.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(zero_ranks.status().message(),
            "checkpoint position {1, 5, 17, 0, 10, 0} (epoch, steps in epoch, global step, world "
            "size, batch "
            "size[, samples in epoch]) is impossible");
}

}  // namespace
}  // namespace train
}  // namespace hvx
