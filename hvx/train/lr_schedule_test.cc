#include "hvx/train/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

OptimizerConfig Sgd(double lr, OptimizerConfig::LrScaling scaling, double warmup_epochs,
                    OptimizerConfig::Schedule schedule) {
  OptimizerConfig o;
  o.set_lr(lr);
  o.set_lr_scaling(scaling);
  o.set_reference_batch(256);
  o.set_warmup_epochs(warmup_epochs);
  o.set_schedule(schedule);
  o.set_step_gamma(0.1);
  return o;
}

TEST(LrScheduleTest, ScalingOfThePeak) {
  // 4 ranks x 64 samples.
  EXPECT_DOUBLE_EQ(
      LrSchedule(Sgd(0.1, OptimizerConfig::NONE, 0, OptimizerConfig::CONSTANT), 4, 64, 10, 1).At(0),
      0.1);
  EXPECT_DOUBLE_EQ(
      LrSchedule(Sgd(0.1, OptimizerConfig::BY_WORLD_SIZE, 0, OptimizerConfig::CONSTANT), 4, 64, 10,
                 1)
          .At(5),
      0.4);
  // 0.1 per 256 samples of global batch: 4 x 64 = 256 -> 0.1; 8 x 128 = 1024 -> 0.4.
  EXPECT_DOUBLE_EQ(
      LrSchedule(Sgd(0.1, OptimizerConfig::BY_GLOBAL_BATCH, 0, OptimizerConfig::CONSTANT), 4, 64,
                 10, 1)
          .At(9),
      0.1);
  EXPECT_DOUBLE_EQ(
      LrSchedule(Sgd(0.1, OptimizerConfig::BY_GLOBAL_BATCH, 0, OptimizerConfig::CONSTANT), 8, 128,
                 10, 1)
          .At(9),
      0.4);
}

TEST(LrScheduleTest, WarmupFromPeakOverWorldSizeWhenScaled) {
  // Peak 0.4 (4 ranks), warmup 0.5 epoch of 20 steps = 10 steps from 0.1 to 0.4.
  const LrSchedule s(Sgd(0.1, OptimizerConfig::BY_WORLD_SIZE, 0.5, OptimizerConfig::CONSTANT), 4,
                     32, 20, 3);
  EXPECT_EQ(s.warmup_steps(), 10);
  EXPECT_NEAR(s.At(0), 0.1 + 0.3 * 1 / 10, 1e-12);
  EXPECT_NEAR(s.At(4), 0.1 + 0.3 * 5 / 10, 1e-12);
  EXPECT_NEAR(s.At(9), 0.4, 1e-12);  // the last warmup step reaches the peak
  for (int64_t step = 1; step < 10; ++step) EXPECT_GT(s.At(step), s.At(step - 1)) << step;
  EXPECT_DOUBLE_EQ(s.At(10), 0.4);
  EXPECT_DOUBLE_EQ(s.At(59), 0.4);
}

TEST(LrScheduleTest, WarmupFromZeroWhenUnscaled) {
  const LrSchedule s(Sgd(0.2, OptimizerConfig::NONE, 1, OptimizerConfig::CONSTANT), 4, 32, 8, 2);
  EXPECT_EQ(s.warmup_steps(), 8);
  EXPECT_NEAR(s.At(0), 0.2 / 8, 1e-12);
  EXPECT_NEAR(s.At(3), 0.2 * 4 / 8, 1e-12);
  EXPECT_NEAR(s.At(7), 0.2, 1e-12);
  // One rank: scaled or not, the world size does not change the rate.
  const LrSchedule one(Sgd(0.2, OptimizerConfig::BY_WORLD_SIZE, 0, OptimizerConfig::CONSTANT), 1,
                       32, 8, 2);
  EXPECT_DOUBLE_EQ(one.At(0), 0.2);
}

TEST(LrScheduleTest, StepDecayAtEpochBoundaries) {
  OptimizerConfig o = Sgd(0.1, OptimizerConfig::BY_GLOBAL_BATCH, 2, OptimizerConfig::STEP);
  o.add_step_epochs(3);
  o.add_step_epochs(5);
  // 2 ranks x 128 = 256: peak 0.1; 10 steps per epoch; warmup 20 steps from 0.05.
  const LrSchedule s(o, 2, 128, 10, 7);
  EXPECT_NEAR(s.At(0), 0.05 + 0.05 / 20, 1e-12);
  EXPECT_NEAR(s.At(19), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.At(20), 0.1);
  EXPECT_DOUBLE_EQ(s.At(29), 0.1);
  EXPECT_NEAR(s.At(30), 0.01, 1e-15);  // epoch 3 starts
  EXPECT_NEAR(s.At(49), 0.01, 1e-15);
  EXPECT_NEAR(s.At(50), 0.001, 1e-15);  // epoch 5 starts
  EXPECT_NEAR(s.At(69), 0.001, 1e-15);
}

TEST(LrScheduleTest, CosineFromPeakAfterWarmupTowardsZero) {
  // Peak 0.3 (3 ranks), 10 steps per epoch, 4 epochs, warmup 1 epoch: cosine over steps 10..39.
  const LrSchedule s(Sgd(0.1, OptimizerConfig::BY_WORLD_SIZE, 1, OptimizerConfig::COSINE), 3, 16,
                     10, 4);
  EXPECT_NEAR(s.At(9), 0.3, 1e-12);
  EXPECT_NEAR(s.At(10), 0.3, 1e-12);
  EXPECT_NEAR(s.At(25), 0.15, 1e-12);  // half way
  EXPECT_NEAR(s.At(39), 0.5 * 0.3 * (1 + std::cos(M_PI * 29 / 30)), 1e-12);
  EXPECT_LT(s.At(39), 0.001);
  for (int64_t step = 11; step < 40; ++step) EXPECT_LT(s.At(step), s.At(step - 1)) << step;
  // Unscaled, no warmup: starts at lr.
  const LrSchedule plain(Sgd(0.05, OptimizerConfig::NONE, 0, OptimizerConfig::COSINE), 3, 16, 10,
                         4);
  EXPECT_DOUBLE_EQ(plain.At(0), 0.05);
  EXPECT_NEAR(plain.At(20), 0.025, 1e-12);
}

}  // namespace
}  // namespace train
}  // namespace hvx
