#include "hvx/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace hvx {
namespace train {

LrSchedule::LrSchedule(const OptimizerConfig& optimizer, int world_size, int batch_size,
                       int64_t steps_per_epoch, int epochs)
    : optimizer_(optimizer),
      steps_per_epoch_(std::max<int64_t>(1, steps_per_epoch)),
      total_steps_(steps_per_epoch_ * epochs) {
  switch (optimizer.lr_scaling()) {
    case OptimizerConfig::BY_WORLD_SIZE:
      peak_ = optimizer.lr() * world_size;
      break;
    case OptimizerConfig::BY_GLOBAL_BATCH:
      peak_ = optimizer.lr() * batch_size * world_size / optimizer.reference_batch();
      break;
    default:
      peak_ = optimizer.lr();
  }
  start_ = optimizer.lr_scaling() == OptimizerConfig::NONE ? 0.0 : peak_ / world_size;
  warmup_steps_ = static_cast<int64_t>(std::llround(optimizer.warmup_epochs() * steps_per_epoch_));
}

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps_) return start_ + (peak_ - start_) * (step + 1) / warmup_steps_;
  switch (optimizer_.schedule()) {
    case OptimizerConfig::STEP: {
      const double epoch = static_cast<double>(step) / steps_per_epoch_;
      double lr = peak_;
      for (int e : optimizer_.step_epochs()) {
        if (epoch >= e) lr *= optimizer_.step_gamma();
      }
      return lr;
    }
    case OptimizerConfig::COSINE: {
      const double t = static_cast<double>(step - warmup_steps_) /
                       std::max<int64_t>(1, total_steps_ - warmup_steps_);
      return 0.5 * peak_ * (1 + std::cos(M_PI * std::min(1.0, t)));
    }
    default:
      return peak_;
  }
}

}  // namespace train
}  // namespace hvx
