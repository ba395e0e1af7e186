// RunTraining's loop, kept in one file because its parts share one state, the Run below: the model,
// optimizer, data, schedule and position that every step reads and changes, and the agreement
// between ranks at each step (a checkpoint request, a stop) that the train, evaluation and
// checkpoint steps must see alike. What stands alone lives beside it: checkpoint.cc (files),
// epoch_position.cc (where an epoch resumes), data_identity.cc, run_records.cc (what rank 0
// writes of the run, and where), sample_log.cc, recipes.cc, models.cc, dataset_setup.cc.
#include "hvx/train/trainer.h"

#include <signal.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/data/dataset.h"
#include "hvx/data/decoder.h"
#include "hvx/data/pipeline.h"
#include "hvx/data/shard_plan.h"
#include "hvx/torch/distributed_optimizer.h"
#include "hvx/torch/gradient_sync.h"
#include "hvx/torch/optimizer_state.h"
#include "hvx/torch/sharded_optimizer.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/checkpoint.h"
#include "hvx/train/config.h"
#include "hvx/train/data_identity.h"
#include "hvx/train/dataset_setup.h"
#include "hvx/train/device.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/lr_schedule.h"
#include "hvx/train/metrics_log.h"
#include "hvx/train/models.h"
#include "hvx/train/recipes.h"
#include "hvx/train/report.h"
#include "hvx/train/run_records.h"
#include "hvx/train/sample_log.h"
#include "hvx/train/summary_writer.h"

namespace hvx {
namespace train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string ModelDescription(const TrainConfig& config) {
  return config.model().torchscript().empty()
             ? config.model().name()
             : absl::StrCat("the TorchScript model ", config.model().torchscript());
}

// One sample's input shape, as the data format's decoder makes it.
absl::StatusOr<std::vector<int64_t>> InputShape(const TrainConfig& config) {
  HVX_ASSIGN_OR_RETURN(auto decoder, MakeDecoder(config, /*train=*/false));
  std::vector<int64_t> dims = decoder->sample_shape().dims();
  // Channels-last images come out [H, W, C]; the model takes them as [C, H, W].
  if (DecodesChannelsLast(config)) dims = {dims[2], dims[0], dims[1]};
  return dims;
}

// The model of `config` on `device`; a TorchScript model, or any model on format EXAMPLE, is first
// run on a zero batch to check that it fits the data's inputs and model.num_classes.
absl::StatusOr<std::shared_ptr<Classifier>> CreateModelOn(const TrainConfig& config,
                                                          const torch::Device& device) {
  HVX_ASSIGN_OR_RETURN(std::shared_ptr<Classifier> model, CreateModel(config.model()));
  model->to(device);
  if (config.model().channels_last()) {
    const int moved = ToChannelsLast(*model);
    HVX_LOG_RANK0(INFO) << "channels_last: " << moved
                        << " 4-D weights and the 4-D inputs in NHWC memory layout";
  }
  // A model or dataset from outside: check that they fit before anything is trained.
  if (ScriptedModule(*model) != nullptr || config.data().format() == EXAMPLE) {
    HVX_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, InputShape(config));
    HVX_RETURN_IF_ERROR(
        CheckModelFits(*model, shape, config.model().num_classes(), ModelDescription(config)));
  }
  return model;
}

std::string FormatDuration(double s) {
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  return absl::StrFormat("%dm%02ds", t / 60, t % 60);
}

void SetLr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// Running statistics (BatchNorm) drift apart between ranks; evaluation uses their average so every
// rank evaluates the same model.
absl::Status AverageBuffers(Classifier& model) {
  torch::NoGradGuard no_grad;
  std::vector<Handle> handles;
  for (const auto& [name, buffer] : FloatBuffers(model)) {
    HVX_ASSIGN_OR_RETURN(Handle h, AllreduceAsync("buffer." + name, buffer));
    handles.push_back(h);
  }
  return WaitAll(handles);
}

// Wraps a pipeline batch as a tensor without copying; the tensor owns the batch.
torch::Tensor RawImagesOf(std::unique_ptr<data::Batch>& batch) {
  data::Batch* raw = batch.release();
  return torch::from_blob(
      raw->data(), raw->shape().dims(), [raw](void*) { delete raw; },
      torch::TensorOptions().dtype(ToScalarType(raw->dtype())));
}

// The batch's labels plus data.label_offset, checked against the model's classes (an unchecked
// label out of range would abort inside cross_entropy instead of naming the sample).
absl::StatusOr<torch::Tensor> LabelsOf(const data::Batch& batch, const TrainConfig& config) {
  const int64_t offset = config.data().label_offset();
  const int64_t classes = config.model().num_classes();
  std::vector<int64_t> labels(batch.labels().begin(), batch.labels().end());
  for (size_t i = 0; i < labels.size(); ++i) {
    // A label near int64's ends (a corrupt record) wraps with the offset: out of range too.
    const bool wrapped = __builtin_add_overflow(labels[i], offset, &labels[i]);
    if (wrapped || labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", Rank(), ": sample ", batch.sample_ids()[i], " has label ", batch.labels()[i],
          ", which with ", "data.label_offset ", offset, " is ",
          wrapped ? std::string("out of int64's range") : absl::StrCat(labels[i]), ", outside [0, ",
          classes, ") of model.num_classes; ",
          "check data.label_offset (-1 for ImageNet's 1-based labels) and model.num_classes"));
    }
  }
  return torch::tensor(labels, torch::kInt64);
}

struct Run {
  const TrainConfig& config;
  const RunOptions& options;
  torch::Device device{torch::kCPU};
  std::shared_ptr<const data::Dataset> train_data;
  // What decides the order of an epoch's samples (DataOrder), kept in checkpoints.
  std::string data_order;
  // The run this training is part of (hvx/train/run_dir.h): the resumed checkpoint's, else a new
  // one; the same on every rank, kept in checkpoints.
  std::string run_name;
  // The checkpoint this run resumed from, "" when it started afresh.
  std::string resumed_from;
  std::shared_ptr<const data::Dataset> eval_data;
  std::shared_ptr<const data::Decoder> train_decoder;
  std::shared_ptr<const data::Decoder> eval_decoder;
  std::shared_ptr<Classifier> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // How a step's gradients meet across ranks and reach `optimizer`: a DistributedOptimizer
  // (optimizer.shard NONE: gradients averaged, `optimizer` steps the whole parameters) or a
  // ShardedOptimizer (`optimizer` steps this rank's slices of them). The step asks only this.
  std::unique_ptr<GradientSync> sync;
  // With a ShardedOptimizer, that one (owned by `sync`), and `replicated`, the same optimizer over
  // the whole parameters, which checkpoints hold: state is gathered into it to save and scattered
  // from it after loading, and dropped in between.
  ShardedOptimizer* sharded = nullptr;
  std::unique_ptr<torch::optim::Optimizer> replicated;
  // The run's checkpoints (checkpoint.dir), one in progress at a time.
  std::unique_ptr<Checkpointer> checkpointer;
  // TrainConfig.ema_decay > 0: the parameters' moving average, what evaluation and export use.
  std::unique_ptr<WeightAverage> average;
  // precision: what autocast computes in (kFloat: nothing is cast), and the loss scaling of
  // mixed precision on CUDA.
  at::ScalarType autocast_dtype = at::kFloat;
  std::unique_ptr<LossScaler> scaler;
  // Rank 0, once the run is named (OpenRun): its metrics records, TensorBoard scalars and report.
  std::unique_ptr<RunRecords> records;
  // Set by PlanEpochs before the first epoch.
  EpochShape shape;
  int64_t steps_per_epoch = 0;
  std::optional<LrSchedule> schedule;
  // A rank got the launcher's checkpoint request (a preemption notice): every rank stops after
  // the step at which they agreed on it.
  bool preempted = false;
  // When this rank last wrote (rank 0) or took part in a checkpoint: checkpoint.every_seconds.
  Clock::time_point last_checkpoint = Clock::now();
};

// The batch's images as the model takes them, [N, C, H, W]: a channels-last batch ([N, H, W, C]
// from the decoder) is the permuted view, whose memory is already NHWC.
torch::Tensor ImagesOf(const Run& run, std::unique_ptr<data::Batch>& batch) {
  torch::Tensor images = RawImagesOf(batch);
  return DecodesChannelsLast(run.config) ? images.permute({0, 3, 1, 2}) : images;
}

// SIGUSR1: hvxrun forwards a preemption notice (SIGTERM or SIGINT to it) as this request.
// SIGTERM to a rank itself is one too (a process manager that signals every process of a job, a
// trainer run without a launcher). Every SIGTERM only sets the request: one sent to a whole
// process tree reaches a rank twice, once from its wrapper, and whoever sends it follows with
// SIGKILL if the rank does not end.
std::atomic<bool> g_checkpoint_request{false};
void OnCheckpointRequest(int) { g_checkpoint_request.store(true); }

// The request's handlers for as long as training runs; the previous actions come back after.
class CheckpointRequestHandlers {
 public:
  CheckpointRequestHandlers() {
    struct sigaction request {};
    request.sa_handler = OnCheckpointRequest;
    sigemptyset(&request.sa_mask);
    request.sa_flags = SA_RESTART;
    for (int k = 0; k < 2; ++k) sigaction(kSignals[k], &request, &previous_[k]);
  }
  ~CheckpointRequestHandlers() { Restore(); }
  void Restore() {
    if (restored_) return;
    restored_ = true;
    for (int k = 0; k < 2; ++k) sigaction(kSignals[k], &previous_[k], nullptr);
  }
  CheckpointRequestHandlers(const CheckpointRequestHandlers&) = delete;
  CheckpointRequestHandlers& operator=(const CheckpointRequestHandlers&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGUSR1, SIGTERM};
  struct sigaction previous_[2];
  bool restored_ = false;
};

// What the ranks agreed after a step, in one 12-byte allreduce (max), so that all act on the same
// step: some rank has the launcher's checkpoint request; rank 0's checkpoint.every_seconds is due;
// some rank is still writing its share of a checkpoint in the background.
struct AfterStep {
  bool preempt = false;
  bool checkpoint_due = false;
  bool still_writing = false;
};
absl::StatusOr<AfterStep> AgreeAfterStep(const Run& run);

data::RemainderPolicy TrainRemainder(const TrainConfig& config) {
  return config.data().remainder() == PAD ? data::RemainderPolicy::kPad
                                          : data::RemainderPolicy::kDrop;
}

// How this run's epochs fall into steps.
EpochShape TrainShape(const TrainConfig& config, int64_t num_samples, int size) {
  return EpochShape{num_samples, size, config.data().batch_size(), TrainRemainder(config),
                    config.logging().max_steps_per_epoch()};
}

// The model's float32 logits for `images`, under the run's autocast precision.
torch::Tensor Forward(Run& run, const torch::Tensor& images) {
  AutocastGuard autocast(run.device.type(), run.autocast_dtype);
  if (run.config.model().channels_last() && images.dim() == 4) {
    return run.model->forward(images.contiguous(at::MemoryFormat::ChannelsLast)).to(torch::kFloat);
  }
  return run.model->forward(images).to(torch::kFloat);
}

// What checkpoints keep for this run beyond model, optimizer and position.
CheckpointExtras Extras(Run& run) {
  return {run.average ? &run.average->averages() : nullptr,
          run.scaler ? &run.scaler->state() : nullptr, &run.data_order, &run.run_name};
}

// precision: BF16 autocasts on either device; FP16 needs CUDA. On CUDA both scale the loss
// (LossScaler), so that small float16 gradients do not underflow.
absl::Status SetUpPrecision(const TrainConfig& config, Run* run) {
  const bool cuda = run->device.is_cuda();
  switch (config.precision()) {
    case FP32:
      return absl::OkStatus();
    case BF16:
      run->autocast_dtype = at::kBFloat16;
      break;
    case FP16:
      if (!cuda) {
        return absl::FailedPreconditionError(
            "precision: FP16 autocast needs CUDA; training runs on the CPU, where BF16 is the "
            "mixed precision: --override='precision: BF16'");
      }
      run->autocast_dtype = at::kHalf;
      break;
    default:
      return absl::InvalidArgumentError("precision: set FP32, BF16 or FP16");
  }
  if (cuda) run->scaler = std::make_unique<LossScaler>();
  HVX_LOG_RANK0(INFO) << "mixed precision: autocast to "
                      << (run->autocast_dtype == at::kHalf ? "float16" : "bfloat16") << " on "
                      << run->device.str()
                      << (cuda ? ", dynamic loss scaling (initial scale 65536)" : "");
  return absl::OkStatus();
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
    HVX_ASSIGN_OR_RETURN(torch::Tensor labels, LabelsOf(**batch, config));
    labels = labels.to(run.device);
    torch::Tensor images = ImagesOf(run, *batch).to(run.device);
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

// What every rank must share: each rank's number of samples decides its steps per epoch, so a
// rank that sees another dataset or config would wait in a collective the others never run.
std::vector<std::pair<std::string, std::string>> SettingsEveryRankShares(const Run& run) {
  return {
      {"training config (hash of the effective config)",
       absl::StrCat(absl::Hex(Fingerprint(run.config.DebugString()), absl::kZeroPad16))},
      {"training samples", absl::StrCat(run.train_data->num_samples())},
      {"training files", FilesFingerprint(*run.train_data)},
      {"evaluation samples", absl::StrCat(run.eval_data->num_samples())},
      {"evaluation files", FilesFingerprint(*run.eval_data)},
  };
}

absl::Status OpenData(Run& run) {
  const TrainConfig& config = run.config;
  HVX_RETURN_IF_ERROR(PrepareDataset(config));
  HVX_ASSIGN_OR_RETURN(auto train,
                       data::Dataset::Open(SplitFilePatterns(config.data().train_files()), {}));
  run.train_data = std::move(train);
  run.data_order = DataOrder(config, *run.train_data);
  const std::string& eval_pattern =
      config.data().eval_files().empty() ? config.data().train_files() : config.data().eval_files();
  HVX_ASSIGN_OR_RETURN(auto eval, data::Dataset::Open(SplitFilePatterns(eval_pattern), {}));
  run.eval_data = std::move(eval);
  const int cuda_device = run.device.is_cuda() ? run.device.index() : -1;
  HVX_ASSIGN_OR_RETURN(run.train_decoder, MakeDecoder(config, /*train=*/true,
                                                      GpuJpegDecoders(config, true, cuda_device)));
  HVX_ASSIGN_OR_RETURN(run.eval_decoder, MakeDecoder(config, /*train=*/false,
                                                     GpuJpegDecoders(config, false, cuda_device)));
  return absl::OkStatus();
}

// Where the config puts rank 0's records (RunRecords), and the report's title (with the number of
// samples once the data is open), config and world size.
RunRecords::Options RecordsOptions(const Run& run) {
  const TrainConfig& config = run.config;
  RunRecords::Options o;
  o.summaries_dir = config.summaries_dir();
  o.metrics_file = config.logging().metrics_file();
  o.model = run.train_data == nullptr ? ModelDescription(config)
                                      : absl::StrCat(ModelDescription(config), " on ",
                                                     run.train_data->num_samples(), " samples");
  o.config_text = config.DebugString();
  o.world_size = Size();
  return o;
}

// Names the run once the checkpoint to resume (if any) is known: the one it belongs to, else a new
// name; rank 0 opens its records (RunRecords). Every rank calls it.
absl::Status OpenRun(Run& run, int64_t resumed_from_step) {
  if (Rank() == 0) {
    RunRecords::Options o = RecordsOptions(run);
    o.run = run.run_name;
    o.resumed_from_step = resumed_from_step;
    absl::StatusOr<std::unique_ptr<RunRecords>> records = RunRecords::Open(o);
    // A run name never starts with '!': that marks rank 0's failure, which every rank returns.
    if (records.ok()) {
      run.records = std::move(*records);
      run.run_name = run.records->run();
    } else {
      run.run_name = absl::StrCat("!", records.status().message());
    }
  }
  HVX_RETURN_IF_ERROR(BroadcastBytes("trainer.run", &run.run_name, 0));
  if (!run.run_name.empty() && run.run_name[0] == '!') {
    return absl::FailedPreconditionError(absl::StrCat(
        Rank() == 0 ? "" : "rank 0: ", "opening the run's records: ", run.run_name.substr(1)));
  }
  return absl::OkStatus();
}

// The optimizer whose state checkpoints hold: with a sharded optimizer, its slices, and the
// whole-parameter `replicated` a single file gathers them into.
CheckpointOptimizer CheckpointedOptimizer(Run& run) {
  if (run.sharded != nullptr) return {run.replicated.get(), run.sharded};
  return {run.optimizer.get(), nullptr};
}

bool CheckpointsOn(const TrainConfig& config) { return !config.checkpoint().dir().empty(); }

bool MaxStepsReached(const Run& run, const TrainingPosition& pos) {
  return run.options.max_steps > 0 && pos.global_step >= run.options.max_steps;
}

absl::StatusOr<AfterStep> AgreeAfterStep(const Run& run) {
  const double every_s = run.config.checkpoint().every_seconds();
  int32_t flags[3] = {
      g_checkpoint_request.load() ? 1 : 0,
      Rank() == 0 && every_s > 0 && Seconds(Clock::now() - run.last_checkpoint) >= every_s,
      run.checkpointer != nullptr && run.checkpointer->Writing() ? 1 : 0,
  };
  TensorRef t(DataType::kInt32, {3}, flags);
  AllreduceOptions o;
  o.op = ReduceOp::kMax;
  HVX_RETURN_IF_ERROR(Wait(Allreduce("trainer.after_step", t, t, o)));
  return AfterStep{flags[0] != 0, flags[1] != 0, flags[2] != 0};
}

// Whether the run ends after this step: RunOptions::max_steps, or an agreed checkpoint request.
bool StopAfterThisStep(const Run& run, const TrainingPosition& pos) {
  return run.preempted || MaxStepsReached(run, pos);
}

// How this run's epochs fall into steps, and its learning-rate schedule; logs what will be trained.
absl::Status PlanEpochs(Run& run) {
  const TrainConfig& config = run.config;
  const int size = Size();
  run.shape = TrainShape(config, run.train_data->num_samples(), size);
  run.steps_per_epoch = StepsPerEpoch(run.shape);
  if (run.steps_per_epoch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.batch_size: ", config.data().batch_size(), " per rank x ", size,
                     " ranks is more than the ", run.train_data->num_samples(),
                     " training samples; lower batch_size or use fewer processes"));
  }
  HVX_LOG_RANK0(INFO) << "training " << ModelDescription(config) << " ("
                      << CountParameters(*run.model) << " parameters) on "
                      << run.train_data->num_samples() << " samples, "
                      << run.eval_data->num_samples() << " for evaluation; " << size
                      << " ranks x batch " << config.data().batch_size() << ", "
                      << run.steps_per_epoch << " steps per epoch";
  run.schedule.emplace(config.optimizer(), size, config.data().batch_size(), run.steps_per_epoch,
                       config.epochs());
  return absl::OkStatus();
}

// Where this run starts: the newest checkpoint's position when the config asks to resume and there
// is one (*resumed_from_step is then its global step), else the start of training.
absl::StatusOr<TrainingPosition> StartingPosition(Run& run, int64_t* resumed_from_step) {
  const TrainConfig& config = run.config;
  TrainingPosition pos;
  pos.world_size = Size();
  pos.batch_size = config.data().batch_size();
  if (CheckpointsOn(config)) HVX_RETURN_IF_ERROR(run.checkpointer->Claim(run.options.fresh_job_id));
  if (CheckpointsOn(config) && (config.checkpoint().resume() || run.options.fresh)) {
    HVX_ASSIGN_OR_RETURN(
        bool resumed,
        ResumeFromNewestCheckpoint(config.checkpoint(), run.options.fresh, run.device, *run.model,
                                   CheckpointedOptimizer(run), &pos, Extras(run),
                                   run.options.fresh_job_id, &run.resumed_from));
    if (resumed) *resumed_from_step = pos.global_step;
  }
  return pos;
}

// A resumed position continues at this run's world size and batch size: the samples of the epoch
// already trained on carry over whatever they were (see hvx/train/epoch_position.h).
void ContinueAtThisSize(const Run& run, bool resumed, TrainingPosition* pos) {
  const int size = Size();
  const int batch_size = run.config.data().batch_size();
  if (resumed && (pos->world_size != size || pos->batch_size != batch_size)) {
    HVX_LOG_RANK0(INFO) << "world size or batch size changed since the checkpoint: "
                        << DescribeGlobalBatch(pos->world_size, pos->batch_size) << ", now "
                        << DescribeGlobalBatch(size, batch_size);
  }
  pos->world_size = size;
  pos->batch_size = batch_size;
}

// The training pipeline of `epoch` from `consumed` samples on, for `steps` batches.
absl::StatusOr<std::unique_ptr<data::Pipeline>> OpenTrainPipeline(const Run& run, int64_t epoch,
                                                                  int64_t consumed, int64_t steps) {
  const TrainConfig& config = run.config;
  data::PipelineOptions po;
  po.plan.rank = Rank();
  po.plan.size = Size();
  po.plan.epoch = epoch;
  po.plan.seed = config.data().shuffle_seed();
  po.plan.remainder = TrainRemainder(config);
  po.plan.consumed = consumed;
  po.batch_size = config.data().batch_size();
  // DROP trains whole batches; PAD's shares are equal on every rank, so its short last batch is
  // the same size everywhere and every sample of the epoch is trained.
  po.drop_last_batch = po.plan.remainder == data::RemainderPolicy::kDrop;
  po.max_batches = steps;
  po.reader_threads = config.data().reader_threads();
  po.decode_threads = config.data().decode_threads();
  po.prefetch_batches = config.data().prefetch_batches();
  po.decoder = run.train_decoder;
  HVX_ASSIGN_OR_RETURN(std::unique_ptr<data::Pipeline> pipeline,
                       data::Pipeline::Create(run.train_data, po));
  if (pipeline->num_batches() != steps) {
    return absl::InternalError(absl::StrCat("rank ", Rank(), ": epoch ", epoch + 1, " from sample ",
                                            consumed, " has ", pipeline->num_batches(),
                                            " batches, expected ", steps));
  }
  return pipeline;
}

// What a stretch of steps did on this rank: since the last progress line, or since the epoch began.
struct StepWindow {
  Clock::time_point start = Clock::now();
  int64_t steps = 0;
  int64_t samples = 0;
  double loss_sum = 0;
  double grad_norm_sum = 0;  // before clipping; only measured with optimizer.clip_grad_norm
  double data_wait_s = 0;    // waiting for the pipeline's batches

  void Add(double loss, double grad_norm, int64_t batch_samples, double waited_s) {
    ++steps;
    samples += batch_samples;
    loss_sum += loss;
    grad_norm_sum += grad_norm;
    data_wait_s += waited_s;
  }
  double seconds() const { return Seconds(Clock::now() - start); }
};

struct StepOutcome {
  double loss = 0;       // this rank's mean training loss over its batch
  double grad_norm = 0;  // the averaged gradients' norm before clipping (clip_grad_norm > 0)
  bool skipped = false;  // loss scaling found inf or NaN gradients: no optimizer step
};

// Writes a checkpoint at `pos` (every rank calls it), in checkpoint.format; either resumes at any
// world size and any optimizer.shard.
// The "checkpoint" record of each checkpoint committed since the last: a checkpoint written in
// the background is recorded when it is whole, not when it started.
absl::Status RecordCommitted(Run& run) {
  for (const Checkpointer::Committed& c : run.checkpointer->TakeCommitted()) {
    Json record = {{"path", c.path},
                   {"global_step", c.position.global_step},
                   {"epochs_done", c.position.epoch},
                   {"steps_in_epoch", c.position.steps_in_epoch},
                   {"samples_in_epoch", c.position.samples_in_epoch}};
    if (c.bytes >= 0) {
      record["bytes"] = c.bytes;
      record["pause_s"] = c.pause_s;
      record["seconds"] = c.seconds;
    }
    if (run.records) HVX_RETURN_IF_ERROR(run.records->Checkpoint(record));
  }
  return absl::OkStatus();
}

absl::Status Checkpoint(Run& run, const TrainingPosition& pos) {
  HVX_RETURN_IF_ERROR(
      run.checkpointer->Save(*run.model, CheckpointedOptimizer(run), pos, Extras(run)));
  return RecordCommitted(run);
}

// Commits the checkpoint written in the background, if any (every rank).
absl::Status FinishCheckpoint(Run& run) {
  HVX_RETURN_IF_ERROR(run.checkpointer->Finish());
  return RecordCommitted(run);
}

// Loss scaling: unscales the averaged gradients, or says to skip the step (every rank alike). A
// sharded optimizer's ranks each hold slices, so they agree on whether all are finite.
absl::StatusOr<bool> UnscaleOrSkip(Run& run) {
  HVX_ASSIGN_OR_RETURN(const bool finite, run.sync->AllFinite());
  return run.scaler->UnscaleOrSkip(run.sync->Gradients(), finite);
}

// One optimizer step of every rank on this rank's `batch`, at learning rate `lr`, which makes
// `global_step` + 1 steps done: forward and backward in optimizer.backward_passes_per_step
// micro-batches (each loss weighted by its share of the batch, so the summed gradient is the
// whole batch's mean), the gradients averaged over ranks, clipped, the optimizer step and the
// moving average.
absl::StatusOr<StepOutcome> TrainStep(Run& run, std::unique_ptr<data::Batch> batch,
                                      int64_t global_step, double lr) {
  const TrainConfig& config = run.config;
  HVX_ASSIGN_OR_RETURN(torch::Tensor labels, LabelsOf(*batch, config));
  labels = labels.to(run.device);
  torch::Tensor images = ImagesOf(run, batch).to(run.device);
  // The random stream (dropout) depends only on where training stands, so a resumed run draws
  // exactly what the uninterrupted run drew.
  torch::manual_seed(config.seed() * 1000003 + static_cast<uint64_t>(global_step) * 131 + Rank());
  SetLr(*run.optimizer, lr);
  HVX_RETURN_IF_ERROR(run.sync->ZeroGrad());
  const int64_t rows = images.size(0);
  const auto parts = MicroBatches(rows, config.optimizer().backward_passes_per_step());
  StepOutcome outcome;
  for (const auto& [begin, n] : parts) {
    torch::Tensor loss = TrainingLoss(Forward(run, images.narrow(0, begin, n)),
                                      labels.narrow(0, begin, n), config.label_smoothing());
    if (parts.size() > 1) loss = loss * (static_cast<double>(n) / rows);
    (run.scaler ? loss * run.scaler->scale() : loss).backward();
    outcome.loss += loss.item<double>();
  }
  HVX_RETURN_IF_ERROR(run.sync->Synchronize());
  // A checkpoint being written in the background copies the parameters and the optimizer's state
  // while forward and backward ran; the step below changes them.
  if (run.checkpointer != nullptr) run.checkpointer->AwaitSnapshot();
  // Every rank sees the same averaged gradients, so every rank skips the same steps.
  if (run.scaler) {
    HVX_ASSIGN_OR_RETURN(const bool step, UnscaleOrSkip(run));
    if (!step) {
      outcome.skipped = true;
      return outcome;
    }
  }
  // The averaged gradients are the same on every rank, so is their norm and the clipped step.
  const double max_norm = config.optimizer().clip_grad_norm();
  if (max_norm > 0) {
    HVX_ASSIGN_OR_RETURN(outcome.grad_norm, run.sync->ClipGradNorm(max_norm));
  }
  HVX_RETURN_IF_ERROR(run.sync->Step(/*synchronize=*/false));
  if (run.average) run.average->Update(global_step + 1);
  return outcome;
}

// Rank 0's progress line and summaries for the steps of `window`, which end at `pos`. Every rank
// calls it: the loss is averaged over ranks.
absl::Status ReportProgress(Run& run, int64_t epoch, const TrainingPosition& pos, double lr,
                            const StepWindow& window) {
  const TrainConfig& config = run.config;
  const int size = Size();
  double mean_loss = window.loss_sum / window.steps;
  if (size > 1) {
    HVX_ASSIGN_OR_RETURN(mean_loss, AverageMetric(mean_loss, "train.loss"));
  }
  const double window_s = window.seconds();
  const double samples_per_s = window.samples * size / std::max(window_s, 1e-9);
  const double data_wait = window.data_wait_s / std::max(window_s, 1e-9);
  const int64_t epoch_steps = run.steps_per_epoch;
  const int64_t steps_left =
      (config.epochs() - epoch - 1) * epoch_steps + (epoch_steps - pos.steps_in_epoch);
  const double eta_s = steps_left * window_s / window.steps;
  if (Rank() != 0) return absl::OkStatus();
  const bool clipping = config.optimizer().clip_grad_norm() > 0;
  const double grad_norm = window.grad_norm_sum / window.steps;  // the same on every rank
  std::printf(
      "epoch %lld/%d step %lld/%lld loss %.7g lr %.6g samples/s %.0f data_wait %.1f%% eta %s%s\n",
      static_cast<long long>(epoch + 1), config.epochs(),
      static_cast<long long>(pos.steps_in_epoch), static_cast<long long>(epoch_steps), mean_loss,
      lr, samples_per_s, 100.0 * data_wait, FormatDuration(eta_s).c_str(),
      absl::StrCat(clipping ? absl::StrFormat(" grad_norm %.6g", grad_norm) : "",
                   run.scaler ? absl::StrFormat(" loss_scale %g skipped_steps %d",
                                                run.scaler->scale(), run.scaler->skipped_steps())
                              : "")
          .c_str());
  std::fflush(stdout);
  // The same on every rank; windows == 0 until collectives ran across several ranks.
  const StragglerStatus stragglers = Stragglers();
  double latest_ms = 0;
  for (double ms : stragglers.late_ms) latest_ms = std::max(latest_ms, ms);
  Json progress = {{"epoch", epoch + 1},
                   {"epochs", config.epochs()},
                   {"step", pos.steps_in_epoch},
                   {"steps_per_epoch", epoch_steps},
                   {"global_step", pos.global_step},
                   {"loss", mean_loss},
                   {"lr", lr},
                   {"samples_per_s", samples_per_s},
                   {"data_wait", data_wait},
                   {"eta_s", eta_s}};
  if (clipping) progress["grad_norm"] = grad_norm;
  if (stragglers.windows > 0) {
    progress["straggler"] = {{"rank", stragglers.rank},
                             {"late_ms", stragglers.late_ms},
                             {"wait_share", stragglers.share}};
  }
  if (run.scaler) {
    progress["loss_scale"] = run.scaler->scale();
    progress["skipped_steps"] = run.scaler->skipped_steps();
  }
  return run.records->Progress(
      {pos.global_step, mean_loss, lr, samples_per_s, data_wait, latest_ms, stragglers.rank},
      progress, clipping ? std::optional<double>(grad_norm) : std::nullopt);
}

// How the steps of an epoch went.
struct EpochSteps {
  bool stopped = false;  // max_steps was reached before the epoch's last step
  double seconds = 0;    // the steps' wall time
};

// Trains what is left of `epoch` from *pos, moving *pos along step by step, with a progress line
// every logging.log_every_steps and the checkpoints checkpoint.every_steps asks for. Appends each
// step's loss to result->step_losses, and sets the throughput of the steps it ran in *result. Every
// rank calls it and trains the same number of steps.
absl::StatusOr<EpochSteps> TrainEpoch(Run& run, int64_t epoch, TrainingPosition* pos,
                                      TrainResult* result) {
  const TrainConfig& config = run.config;
  const int64_t consumed = pos->samples_in_epoch;
  const EpochContinuation rest = ContinueEpoch(run.shape, consumed);
  if (consumed > 0) HVX_LOG_RANK0(INFO) << DescribeContinuation(run.shape, epoch, rest);
  pos->steps_in_epoch = rest.first_step;
  std::unique_ptr<data::Pipeline> pipeline;
  if (rest.steps > 0) {
    HVX_ASSIGN_OR_RETURN(pipeline, OpenTrainPipeline(run, epoch, consumed, rest.steps));
  }
  SampleLog sample_log;
  HVX_RETURN_IF_ERROR(
      sample_log.Open(run.options.sample_log_dir, Rank(), epoch, /*append=*/consumed > 0));
  run.model->train();
  StepWindow since_progress;
  StepWindow whole_epoch;
  while (pos->steps_in_epoch < run.steps_per_epoch) {
    const Clock::time_point wait_start = Clock::now();
    auto batch = pipeline->Next();
    const double waited_s = Seconds(Clock::now() - wait_start);
    HVX_RETURN_IF_ERROR(batch.status());
    HVX_RETURN_IF_ERROR(sample_log.Add((*batch)->sample_ids(), (*batch)->num_padded()));
    const int64_t batch_samples = (*batch)->size();
    // The schedule at this run's size, where an uninterrupted run at this size stands at this
    // point of the epoch: the global step itself unless a resume changed the size.
    const double lr = run.schedule->At(epoch * run.steps_per_epoch + pos->steps_in_epoch);
    HVX_ASSIGN_OR_RETURN(const StepOutcome step,
                         TrainStep(run, std::move(*batch), pos->global_step, lr));
    result->step_losses.push_back(step.loss);
    since_progress.Add(step.loss, step.grad_norm, batch_samples, waited_s);
    whole_epoch.Add(step.loss, step.grad_norm, batch_samples, waited_s);
    ++pos->steps_in_epoch;
    ++pos->global_step;
    pos->samples_in_epoch += batch_samples * Size();  // every rank's batch has as many rows
    const bool last_step = pos->steps_in_epoch == run.steps_per_epoch;
    HVX_ASSIGN_OR_RETURN(const AfterStep agreed, AgreeAfterStep(run));
    run.preempted = run.preempted || agreed.preempt;
    // A checkpoint written in the background by every rank is committed at the first step
    // boundary after the last rank finished, on every rank alike.
    if (!agreed.still_writing) HVX_RETURN_IF_ERROR(FinishCheckpoint(run));
    const bool stop = StopAfterThisStep(run, *pos);
    if (pos->global_step % config.logging().log_every_steps() == 0 || last_step || stop) {
      HVX_RETURN_IF_ERROR(ReportProgress(run, epoch, *pos, lr, since_progress));
      since_progress = StepWindow();
    }
    if (last_step) break;  // the epoch's checkpoint comes after its evaluation (EndEpoch)
    const int every_steps = config.checkpoint().every_steps();
    if (CheckpointsOn(config) && (stop || agreed.checkpoint_due ||
                                  (every_steps > 0 && pos->global_step % every_steps == 0))) {
      HVX_RETURN_IF_ERROR(Checkpoint(run, *pos));
      run.last_checkpoint = Clock::now();
    }
    if (stop) break;
  }
  HVX_RETURN_IF_ERROR(sample_log.Close());
  const double epoch_s = whole_epoch.seconds();
  result->samples_per_s = whole_epoch.samples * Size() / std::max(epoch_s, 1e-9);
  result->data_wait_fraction = whole_epoch.data_wait_s / std::max(epoch_s, 1e-9);
  if (StopAfterThisStep(run, *pos) && pos->steps_in_epoch < run.steps_per_epoch) {
    return EpochSteps{/*stopped=*/true, epoch_s};
  }
  return EpochSteps{/*stopped=*/false, epoch_s};
}

// Rank 0's evaluation line and summaries for `epoch`, whose steps took `epoch_s`.
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

// After the last step of `epoch`, whose steps took `epoch_s`: *pos moves to the start of the next
// epoch, then come the evaluation logging.eval_every_epochs asks for and the checkpoint
// checkpoint.every_epochs asks for (both always after the last epoch, and the checkpoint also when
// max_steps stops the run here). Every rank calls it.
absl::Status EndEpoch(Run& run, int64_t epoch, double epoch_s, TrainingPosition* pos,
                      TrainResult* result) {
  const TrainConfig& config = run.config;
  pos->epoch = epoch + 1;
  pos->steps_in_epoch = 0;
  pos->samples_in_epoch = 0;
  const bool last_epoch = epoch + 1 == config.epochs();
  if ((epoch + 1) % config.logging().eval_every_epochs() == 0 || last_epoch) {
    HVX_ASSIGN_OR_RETURN(EvalResult eval, Evaluate(run, epoch));
    result->evals.push_back(eval);
    HVX_RETURN_IF_ERROR(ReportEvaluation(run, epoch, epoch_s, eval, *result, pos->global_step));
  }
  if (CheckpointsOn(config) && ((epoch + 1) % config.checkpoint().every_epochs() == 0 ||
                                last_epoch || StopAfterThisStep(run, *pos))) {
    HVX_RETURN_IF_ERROR(Checkpoint(run, *pos));
    run.last_checkpoint = Clock::now();
  }
  return absl::OkStatus();
}

// The whole run, top down: the epochs and steps to train, where to start (a checkpoint, when
// resuming), then each epoch's steps and its end (evaluation, checkpoint), until the last epoch or
// RunOptions::max_steps.
absl::StatusOr<TrainResult> Train(Run& run) {
  const Clock::time_point run_start = Clock::now();
  HVX_RETURN_IF_ERROR(PlanEpochs(run));
  TrainResult result;
  HVX_ASSIGN_OR_RETURN(TrainingPosition pos, StartingPosition(run, &result.resumed_from_step));
  const bool resumed = result.resumed_from_step >= 0;
  HVX_RETURN_IF_ERROR(OpenRun(run, result.resumed_from_step));
  if (run.records) {
    HVX_RETURN_IF_ERROR(
        run.records->Start({{"model", ModelDescription(run.config)},
                            {"parameters", CountParameters(*run.model)},
                            {"world_size", Size()},
                            {"batch_size", run.config.data().batch_size()},
                            {"epochs", run.config.epochs()},
                            {"steps_per_epoch", run.steps_per_epoch},
                            {"train_samples", run.train_data->num_samples()},
                            {"eval_samples", run.eval_data->num_samples()},
                            {"epoch", pos.epoch + 1},
                            {"global_step", pos.global_step},
                            {"resumed_from", resumed ? Json(run.resumed_from) : Json()}}));
  }
  if (pos.epoch >= run.config.epochs()) {
    // A finished run: nothing to train. The caller says so and how to start over.
    result.already_complete = true;
    result.epochs_done = pos.epoch;
    result.global_step = pos.global_step;
    return result;
  }
  ContinueAtThisSize(run, resumed, &pos);
  for (int64_t epoch = pos.epoch; epoch < run.config.epochs(); ++epoch) {
    HVX_ASSIGN_OR_RETURN(const EpochSteps steps, TrainEpoch(run, epoch, &pos, &result));
    // Stopped inside the epoch by max_steps or a checkpoint request: its checkpoint is written.
    if (steps.stopped) break;
    HVX_RETURN_IF_ERROR(EndEpoch(run, epoch, steps.seconds, &pos, &result));
    if (StopAfterThisStep(run, pos)) break;
  }
  // The end of training and a preemption wait for the checkpoint in progress.
  HVX_RETURN_IF_ERROR(FinishCheckpoint(run));
  if (run.preempted) {
    result.preempted = true;
    HVX_LOG_RANK0(INFO) << "preempted at step " << pos.global_step << "; "
                        << (CheckpointsOn(run.config)
                                ? absl::StrCat("checkpoint ",
                                               run.checkpointer->Path(pos.global_step))
                                : std::string("no checkpoint (checkpoint.dir is empty)"));
  }
  result.global_step = pos.global_step;
  result.wall_s = Seconds(Clock::now() - run_start);
  result.optimizer_state_bytes = OptimizerStateBytes(*run.optimizer);
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  result.peak_resident_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  HVX_LOG(INFO) << absl::StrFormat(
      "optimizer state %.1f MiB (optimizer.shard %s over %d ranks), peak resident memory %.1f MiB",
      result.optimizer_state_bytes / 1048576.0, Sharding::Mode_Name(run.config.optimizer().shard()),
      Size(), result.peak_resident_bytes / 1048576.0);
  if (run.scaler) {
    result.skipped_steps = run.scaler->skipped_steps();
    HVX_LOG_RANK0(INFO) << "loss scaling skipped " << result.skipped_steps
                        << " steps with inf or NaN gradients; loss scale now "
                        << run.scaler->scale();
  }
  return result;
}

// The metrics file's last record of a run: how it ended ("state": "done", "preempted",
// "already_complete" or "failed", with "error"), its steps, time and last evaluation.
Json EndRecord(const Run& run, const absl::StatusOr<TrainResult>& result) {
  if (!result.ok()) {
    return {{"state", "failed"}, {"error", result.status().ToString()}};
  }
  const char* state = result->already_complete ? "already_complete"
                      : result->preempted      ? "preempted"
                                               : "done";
  Json end = {{"state", state},
              {"global_step", result->global_step},
              {"seconds", result->wall_s},
              {"samples_per_s", result->samples_per_s},
              {"data_wait", result->data_wait_fraction}};
  if (!result->evals.empty()) {
    end["accuracy"] = result->evals.back().accuracy;
    end["eval_samples"] = result->evals.back().samples;
  }
  if (result->preempted && CheckpointsOn(run.config)) {
    end["checkpoint"] = run.checkpointer->Path(result->global_step);
  }
  if (run.scaler) end["skipped_steps"] = result->skipped_steps;
  return end;
}

}  // namespace

std::string DescribeResult(const TrainResult& result) {
  if (result.already_complete) {
    return absl::StrFormat("already complete (%d epochs, %d steps)", result.epochs_done,
                           result.global_step);
  }
  std::string line =
      absl::StrFormat("%s: %d steps in %.1f s", result.preempted ? "preempted" : "done",
                      result.global_step, result.wall_s);
  if (!result.evals.empty()) {
    absl::StrAppendFormat(&line, ", eval accuracy %.4f on %d samples", result.evals.back().accuracy,
                          result.evals.back().samples);
  }
  absl::StrAppendFormat(&line, ", %.0f samples/s", result.samples_per_s);
  return line;
}

absl::StatusOr<TrainResult> RunTraining(const TrainConfig& config, const RunOptions& options) {
  if (!IsInitialized()) return absl::FailedPreconditionError("RunTraining needs hvx::Init first");
  HVX_RETURN_IF_ERROR(ValidateTrainConfig(config, "config"));
  CheckpointRequestHandlers handlers;
  Run run{config, options};
  run.checkpointer = std::make_unique<Checkpointer>(config.checkpoint());
  HVX_ASSIGN_OR_RETURN(run.device, SelectTrainingDevice(config.device()));
  HVX_LOG_RANK0(INFO) << "training on " << run.device.str();
  HVX_RETURN_IF_ERROR(SetUpPrecision(config, &run));
  const int threads = config.threads() > 0
                          ? config.threads()
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                            std::max(1, LocalSize()));
  torch::set_num_threads(threads);
  if (!options.export_from.empty()) {
    // No data and no training: the checkpoint's model, written as a state dict by rank 0.
    handlers.Restore();  // nothing to checkpoint: a signal ends the export
    TrainResult result;
    if (Rank() == 0) {
      HVX_ASSIGN_OR_RETURN(run.model, CreateModelOn(config, run.device));
      HVX_RETURN_IF_ERROR(LoadCheckpointModel(options.export_from, run.device, *run.model,
                                              /*use_averages=*/config.ema_decay() > 0));
      HVX_ASSIGN_OR_RETURN(result.exported_to, ExportModel(*run.model, options.export_path));
    }
    return result;
  }
  HVX_RETURN_IF_ERROR(OpenData(run));
  HVX_RETURN_IF_ERROR(
      Annotate(CheckSameOnEveryRank("trainer.settings", SettingsEveryRankShares(run)),
               "the trainer's ranks disagree"));
  torch::manual_seed(config.seed());
  HVX_ASSIGN_OR_RETURN(run.model, CreateModelOn(config, run.device));
  HVX_RETURN_IF_ERROR(BroadcastParameters(*run.model, 0));
  HVX_ASSIGN_OR_RETURN(run.optimizer, MakeOptimizer(config.optimizer(), *run.model));
  HVX_RETURN_IF_ERROR(BroadcastOptimizerState(*run.optimizer, 0));
  if (config.ema_decay() > 0) {
    run.average = std::make_unique<WeightAverage>(*run.model, config.ema_decay());
  }
  DistributedOptimizerOptions dopts;
  dopts.backward_passes_per_step = config.optimizer().backward_passes_per_step();
  HVX_ASSIGN_OR_RETURN(dopts.compression, ParseGradientCompression(config.engine().compression()));
  dopts.gradient_predivide_factor = config.engine().gradient_predivide_factor();
  if (config.optimizer().shard() == Sharding::NONE) {
    HVX_ASSIGN_OR_RETURN(run.sync, DistributedOptimizer::Create(
                                       *run.optimizer, run.model->named_parameters(), dopts));
  } else {
    HVX_ASSIGN_OR_RETURN(run.replicated, MakeOptimizer(config.optimizer(), *run.model));
    ShardedOptimizerOptions sopts;
    sopts.stage = config.optimizer().shard() == Sharding::GRADIENTS ? ShardStage::kGradients
                                                                    : ShardStage::kState;
    sopts.exchange = dopts;
    HVX_ASSIGN_OR_RETURN(
        std::unique_ptr<ShardedOptimizer> sharded,
        ShardedOptimizer::Create(*run.optimizer, run.model->named_parameters(), sopts));
    run.sharded = sharded.get();
    if (auto* lamb = dynamic_cast<Lamb*>(run.optimizer.get())) {
      lamb->set_norm_sum([sharded = run.sharded](std::vector<double>* squares) {
        return sharded->SumOverRanks(squares, "lamb");
      });
    }
    run.sync = std::move(sharded);
  }
  auto result = Train(run);
  if (!result.ok() && Rank() == 0 && run.records == nullptr) {
    // Failed before the run was named (a checkpoint refused, the data's shape): its records say
    // so all the same, in a folder of their own.
    RunRecords::Options o = RecordsOptions(run);
    o.failed = true;
    absl::StatusOr<std::unique_ptr<RunRecords>> records = RunRecords::Open(o);
    if (records.ok()) run.records = std::move(*records);
  }
  if (run.records) {
    run.records->End(EndRecord(run, result),
                     result.ok() ? DescribeResult(*result)
                                 : absl::StrCat("failed: ", result.status().ToString()));
  }
  if (result.ok() && !result->preempted && !options.export_path.empty()) {
    // A run already complete holds each rank's own statistics from its checkpoint.
    HVX_RETURN_IF_ERROR(AverageBuffers(*run.model));
    if (Rank() == 0) {
      UseAveragedWeights averaged(run.average.get());
      HVX_ASSIGN_OR_RETURN(result->exported_to, ExportModel(*run.model, options.export_path));
    }
  }
  return result;
}

}  // namespace train
}  // namespace hvx
