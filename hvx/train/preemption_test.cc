// The ranks' agreement after a step (2 ranks): a checkpoint request that reached one rank, and the
// checkpoint.every_seconds clock of rank 0, reach every rank at the same step.
#include "hvx/train/preemption.h"

#include <signal.h>

#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/train/config.h"

namespace hvx {
namespace train {
namespace {

TEST(PreemptionTest, ARequestToOneRankStopsEveryRankAfterTheSameStep) {
  absl::StatusOr<TrainConfig> config = ParseTrainConfig("", "preemption_test");
  ASSERT_TRUE(config.ok()) << config.status();
  RunOptions options;
  options.max_steps = 100;
  train::Run run{*config, options};
  TrainingPosition pos;
  pos.global_step = 5;

  CheckpointRequestHandlers handlers;
  absl::StatusOr<AfterStep> before = AgreeAfterStep(run);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_FALSE(before->preempt);
  EXPECT_FALSE(before->checkpoint_due);
  EXPECT_FALSE(before->still_writing);
  EXPECT_FALSE(StopAfterThisStep(run, pos));

  // The launcher's request (SIGUSR1) reaches rank 1 only.
  if (Rank() == 1) {
    ASSERT_EQ(raise(SIGUSR1), 0);
  }
  absl::StatusOr<AfterStep> after = AgreeAfterStep(run);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->preempt) << "rank " << Rank();
  run.preempted = after->preempt;
  EXPECT_TRUE(StopAfterThisStep(run, pos));
}

TEST(PreemptionTest, RankZerosClockDecidesWhenACheckpointIsDue) {
  absl::StatusOr<TrainConfig> config =
      ParseTrainConfig("checkpoint { every_seconds: 60 }", "preemption_test");
  ASSERT_TRUE(config.ok()) << config.status();
  RunOptions options;
  train::Run run{*config, options};
  // A run after one that was preempted (ARequestToOneRank...) starts with no request.
  CheckpointRequestHandlers handlers;
  // Rank 0 last checkpointed two minutes ago, rank 1 (whose clock does not count) just now.
  run.last_checkpoint = Clock::now() - (Rank() == 0 ? std::chrono::minutes(2) : Clock::duration());
  absl::StatusOr<AfterStep> due = AgreeAfterStep(run);
  ASSERT_TRUE(due.ok()) << due.status();
  EXPECT_TRUE(due->checkpoint_due) << "rank " << Rank();
  EXPECT_FALSE(due->preempt) << "rank " << Rank();

  run.last_checkpoint = Clock::now() - (Rank() == 1 ? std::chrono::minutes(2) : Clock::duration());
  absl::StatusOr<AfterStep> not_due = AgreeAfterStep(run);
  ASSERT_TRUE(not_due.ok()) << not_due.status();
  EXPECT_FALSE(not_due->checkpoint_due) << "rank " << Rank();
}

TEST(PreemptionTest, MaxStepsStopsTheRunAtItsStep) {
  absl::StatusOr<TrainConfig> config = ParseTrainConfig("", "preemption_test");
  ASSERT_TRUE(config.ok()) << config.status();
  RunOptions options;
  options.max_steps = 6;
  train::Run run{*config, options};
  TrainingPosition pos;
  pos.global_step = 5;
  EXPECT_FALSE(StopAfterThisStep(run, pos));
  pos.global_step = 6;
  EXPECT_TRUE(StopAfterThisStep(run, pos));
}

}  // namespace
}  // namespace train
}  // namespace hvx
