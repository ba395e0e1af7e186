// RunTraining: the run's set-up (device, data, model, optimizer, the checkpoint to resume) and its
// loop, epochs of steps with their checkpoints. The parts it drives share one state, the Run
// (run.h): the step (train_step.cc), evaluation (evaluation.cc), progress and records
// (progress.cc), the ranks' agreement after each step (preemption.cc). What stands alone lives
// beside them: checkpoint.cc (files), epoch_position.cc (where an epoch resumes),
// data_identity.cc, run_records.cc (what rank 0 writes of the run, and where), sample_log.cc,
// recipes.cc, models.cc, dataset_setup.cc.
#include "hvx/train/trainer.h"

#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/data/dataset.h"
#include "hvx/data/decoder.h"
#include "hvx/data/pipeline.h"
#include "hvx/data/shard_plan.h"
#include "hvx/torch/optimizer_state.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/checkpoint.h"
#include "hvx/train/config.h"
#include "hvx/train/data_identity.h"
#include "hvx/train/dataset_setup.h"
#include "hvx/train/device.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/evaluation.h"
#include "hvx/train/export.h"
#include "hvx/train/lr_schedule.h"
#include "hvx/train/models.h"
#include "hvx/train/preemption.h"
#include "hvx/train/progress.h"
#include "hvx/train/rank_failure.h"
#include "hvx/train/recipes.h"
#include "hvx/train/run.h"
#include "hvx/train/run_records.h"
#include "hvx/train/sample_log.h"
#include "hvx/train/train_step.h"

namespace hvx {
namespace train {
namespace {

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

data::RemainderPolicy TrainRemainder(const TrainConfig& config) {
  return config.data().remainder() == PAD ? data::RemainderPolicy::kPad
                                          : data::RemainderPolicy::kDrop;
}

// How this run's epochs fall into steps.
EpochShape TrainShape(const TrainConfig& config, int64_t num_samples, int size) {
  return EpochShape{num_samples, size, config.data().batch_size(), TrainRemainder(config),
                    config.logging().max_steps_per_epoch()};
}

// What checkpoints keep for this run beyond model, optimizer and position.
CheckpointExtras Extras(Run& run) {
  return {run.average ? &run.average->averages() : nullptr,
          run.scaler ? &run.scaler->state() : nullptr, &run.data_order, &run.run_name};
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
      run.run_name = InBandFailure(absl::FailedPreconditionError(
          absl::StrCat("opening the run's records: ", records.status().message())));
    }
  }
  HVX_RETURN_IF_ERROR(BroadcastBytes("trainer.run", &run.run_name, 0));
  return FromInBand(run.run_name);
}

// The optimizer whose state checkpoints hold: with a sharded optimizer, its slices, and the
// whole-parameter `replicated` a single file gathers them into.
CheckpointOptimizer CheckpointedOptimizer(Run& run) {
  if (run.sharded != nullptr) return {run.replicated.get(), run.sharded};
  return {run.optimizer.get(), nullptr};
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

// Writes a checkpoint at `pos` (every rank calls it), in checkpoint.format; either resumes at any
// world size and any optimizer.shard.
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
    StepOutcome step;
    {  // the batch's tensors go with the step, before the checkpoint below
      HVX_ASSIGN_OR_RETURN(const StepInputs inputs, InputsOf(run, std::move(*batch)));
      HVX_ASSIGN_OR_RETURN(step, TrainStep(run, inputs, pos->global_step, lr));
    }
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

}  // namespace

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
  HVX_RETURN_IF_ERROR(SetUpGradientSync(&run));
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
