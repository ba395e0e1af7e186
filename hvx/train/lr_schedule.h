// The learning rate of every training step, from the optimizer config
// (hvx/train/train_config.proto).
//
// clang-format off
//   LrSchedule schedule(config.optimizer(), Size(), config.data().batch_size(), steps_per_epoch,
//                       epochs);
//   SetLr(optimizer, schedule.At(global_step));
// clang-format on
//
// Peak rate: lr as written (NONE), lr x world size (BY_WORLD_SIZE) or lr x global batch /
// reference_batch (BY_GLOBAL_BATCH). Warmup climbs linearly over warmup_epochs from peak / world
// size (scaled) or 0 (unscaled) to the peak, reaching it at the last warmup step. After warmup: the
// peak (CONSTANT), the peak x step_gamma for every step_epochs entry already reached (STEP; warmup
// does not shift the boundaries), or a half cosine from the peak at the end of warmup towards 0 at
// the end of the last step (COSINE). Steps are counted from 0 over the whole run, so a resumed run
// gets the same rates.
#ifndef HVX_TRAIN_LR_SCHEDULE_H_
#define HVX_TRAIN_LR_SCHEDULE_H_

#include <cstdint>

#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

class LrSchedule {
 public:
  // `batch_size` is per rank; steps_per_epoch < 1 counts as 1.
  LrSchedule(const OptimizerConfig& optimizer, int world_size, int batch_size,
             int64_t steps_per_epoch, int epochs);

  // The rate at global step `step` (0-based).
  double At(int64_t step) const;

  double peak() const { return peak_; }
  int64_t warmup_steps() const { return warmup_steps_; }

 private:
  const OptimizerConfig optimizer_;
  const int64_t steps_per_epoch_;
  const int64_t total_steps_;
  double peak_ = 0;
  double start_ = 0;
  int64_t warmup_steps_ = 0;
};

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_LR_SCHEDULE_H_
