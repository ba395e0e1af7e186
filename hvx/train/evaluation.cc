#include "hvx/train/evaluation.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/data/pipeline.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/model_state.h"
#include "hvx/train/train_step.h"

namespace hvx {
namespace train {

absl::Status AverageBuffers(Classifier& model) {
  torch::NoGradGuard no_grad;
  std::vector<Handle> handles;
  for (const auto& [name, buffer] : FloatBuffers(model)) {
    HVX_ASSIGN_OR_RETURN(Handle h, AllreduceAsync("buffer." + name, buffer));
    handles.push_back(h);
  }
  return WaitAll(handles);
}

absl::StatusOr<EvalResult> Evaluate(Run& run, int64_t epoch) {
  const TrainConfig& config = run.config;
  // Evaluating with the moving averages swaps them into the parameters: a checkpoint being
  // written in the background must have its copy of both first.
  if (run.checkpointer != nullptr) run.checkpointer->AwaitSnapshot();
  HVX_RETURN_IF_ERROR(AverageBuffers(*run.model));
  data::PipelineOptions po;
  po.plan.rank = Rank();
  po.plan.size = Size();
  po.plan.epoch = 0;
  po.plan.shuffle = false;
  po.plan.remainder = data::RemainderPolicy::kPad;
  po.batch_size = config.data().eval_batch_size();
  po.reader_threads = config.data().reader_threads();
  po.decode_threads = config.data().decode_threads();
  po.prefetch_batches = config.data().prefetch_batches();
  po.decoder = run.eval_decoder;
  // Every rank has as many evaluation batches as the others (kPad), so every rank stops after the
  // same number and reaches the one collective below, SumMetrics, together.
  po.max_batches = config.logging().max_eval_batches();
  HVX_ASSIGN_OR_RETURN(auto pipeline, data::Pipeline::Create(run.eval_data, po));
  run.model->eval();
  torch::NoGradGuard no_grad;
  UseAveragedWeights averaged(run.average.get());
  // correct, loss sum, samples, top-5 correct: summed over ranks at the end, so each sample
  // counts once.
  std::vector<double> sums = {0, 0, 0, 0};
  for (;;) {
    auto batch = pipeline->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    HVX_RETURN_IF_ERROR(batch.status());
    const int64_t real = (*batch)->size() - (*batch)->num_padded();
    HVX_ASSIGN_OR_RETURN(StepInputs in, InputsOf(run, std::move(*batch)));
    torch::Tensor labels = in.labels;
    const torch::Tensor& images = in.images;
    if (real <= 0) continue;
    torch::Tensor logits = Forward(run, images).narrow(0, 0, real);
    labels = labels.narrow(0, 0, real);
    sums[0] += logits.argmax(1).eq(labels).sum().item<double>();
    sums[1] +=
        torch::nn::functional::cross_entropy(
            logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    sums[2] += real;
    sums[3] += CountTopK(logits, labels, 5);
  }
  HVX_ASSIGN_OR_RETURN(sums, SumMetrics(sums, absl::StrCat("eval.", epoch)));
  EvalResult result;
  result.samples = static_cast<int64_t>(sums[2]);
  result.accuracy = sums[2] > 0 ? sums[0] / sums[2] : 0;
  result.loss = sums[2] > 0 ? sums[1] / sums[2] : 0;
  result.top5_accuracy = sums[2] > 0 ? sums[3] / sums[2] : 0;
  return result;
}

absl::Status ReportEvaluation(Run& run, int64_t epoch, double epoch_s, const EvalResult& eval,
                              const TrainResult& result, int64_t global_step) {
  HVX_LOG_RANK0(INFO) << absl::StrFormat(
      "epoch %d/%d eval accuracy %.4f loss %.6f on %d samples, top5 %.4f%s (%.1f s/epoch, %.0f "
      "samples/s)",
      epoch + 1, run.config.epochs(), eval.accuracy, eval.loss, eval.samples, eval.top5_accuracy,
      run.average ? ", moving average of the weights" : "", epoch_s, result.samples_per_s);
  if (Rank() != 0) return absl::OkStatus();
  return run.records->Eval(
      {epoch + 1, global_step, eval.accuracy, eval.top5_accuracy, eval.loss, eval.samples},
      {{"epoch", epoch + 1},
       {"global_step", global_step},
       {"accuracy", eval.accuracy},
       {"top5", eval.top5_accuracy},
       {"loss", eval.loss},
       {"samples", eval.samples},
       {"averaged_weights", run.average != nullptr},
       {"epoch_s", epoch_s},
       {"samples_per_s", result.samples_per_s}});
}

}  // namespace train
}  // namespace hvx
