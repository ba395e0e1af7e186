// Evaluation of the model on the evaluation data, every rank on its share, the sums over ranks
// so that each sample counts once; rank 0's line and records of it.
//
//   HVX_ASSIGN_OR_RETURN(EvalResult eval, Evaluate(run, epoch));
//   HVX_RETURN_IF_ERROR(ReportEvaluation(run, epoch, epoch_s, eval, result, global_step));
#ifndef HVX_TRAIN_EVALUATION_H_
#define HVX_TRAIN_EVALUATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/train/models.h"
#include "hvx/train/run.h"
#include "hvx/train/trainer.h"

namespace hvx {
namespace train {

// Running statistics (BatchNorm) drift apart between ranks; evaluation uses their average so every
// rank evaluates the same model. Every rank calls it.
absl::Status AverageBuffers(Classifier& model);

// The model (its moving average, with ema_decay) on the evaluation data: accuracy, loss and top-5
// summed over ranks. Every rank calls it; `epoch` names its collective.
absl::StatusOr<EvalResult> Evaluate(Run& run, int64_t epoch);

// Rank 0's evaluation line and summaries for `epoch`, whose steps took `epoch_s`.
absl::Status ReportEvaluation(Run& run, int64_t epoch, double epoch_s, const EvalResult& eval,
                              const TrainResult& result, int64_t global_step);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_EVALUATION_H_
