#include "hvx/train/trainer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/data/dataset.h"
#include "hvx/data/decoder.h"
#include "hvx/data/pipeline.h"
#include "hvx/data/shard_plan.h"
#include "hvx/torch/distributed_optimizer.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/config.h"
#include "hvx/train/dataset_setup.h"
#include "hvx/train/device.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/lr_schedule.h"
#include "hvx/train/models.h"
#include "hvx/train/summary_writer.h"

namespace hvx {
namespace train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Fashion-MNIST pixel statistics over the training set, for input normalisation.
constexpr float kFashionMean = 0.2860f;
constexpr float kFashionStd = 0.3530f;

absl::StatusOr<std::shared_ptr<const data::Decoder>> MakeDecoder(const TrainConfig& config,
                                                                 bool train) {
  switch (config.data().format()) {
    case FASHION_MNIST: {
      data::RawImageDecoderOptions o;
      o.dtype = DataType::kFloat32;
      o.mean = {kFashionMean};
      o.stddev = {kFashionStd};
      return std::shared_ptr<const data::Decoder>(std::make_shared<data::RawImageDecoder>(o));
    }
    case IMAGENET:
      return MakeImageNetDecoder(config, train);
    default:
      return absl::InvalidArgumentError("data.format: set FASHION_MNIST or IMAGENET");
  }
}

std::string FormatDuration(double s) {
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  return absl::StrFormat("%dm%02ds", t / 60, t % 60);
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerConfig& o,
                                                       torch::nn::Module& model) {
  if (o.kind() == OptimizerConfig::ADAM) {
    return std::make_unique<torch::optim::Adam>(model.parameters(),
                                                torch::optim::AdamOptions(o.lr())
                                                    .betas({o.beta1(), o.beta2()})
                                                    .eps(o.eps())
                                                    .weight_decay(o.weight_decay()));
  }
  return std::make_unique<torch::optim::SGD>(model.parameters(),
                                             torch::optim::SGDOptions(o.lr())
                                                 .momentum(o.momentum())
                                                 .nesterov(o.nesterov())
                                                 .weight_decay(o.weight_decay()));
}

void SetLr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// ---------------------------------------------------------------------------------- checkpoints

constexpr char kCheckpointPrefix[] = "ckpt-";
constexpr char kCheckpointSuffix[] = ".pt";

// Checkpoint files in `dir`, oldest first (by the global step in the name).
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return found;
  while (dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    int64_t step = 0;
    if (absl::ConsumePrefix(&name, kCheckpointPrefix) &&
        absl::ConsumeSuffix(&name, kCheckpointSuffix) && absl::SimpleAtoi(name, &step)) {
      found.emplace_back(step, absl::StrCat(dir, "/", e->d_name));
    }
  }
  closedir(d);
  std::sort(found.begin(), found.end());
  return found;
}

absl::Status FsyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoToStatus(err, absl::StrCat("fsync ", path));
}

// Floating-point buffers (BatchNorm running statistics) in a fixed order, the same on every rank.
std::vector<std::pair<std::string, torch::Tensor>> FloatBuffers(Classifier& model) {
  std::vector<std::pair<std::string, torch::Tensor>> buffers;
  for (const auto& item : model.named_buffers()) {
    if (item.value().is_floating_point()) buffers.emplace_back(item.key(), item.value());
  }
  return buffers;
}

// Every rank's floating-point buffers, each as [size, numel] on the CPU, in FloatBuffers order.
// Running statistics differ between ranks (each sees its own batches); a checkpoint keeps all of
// them so that a resumed run continues with exactly the statistics an uninterrupted run has.
absl::StatusOr<std::vector<torch::Tensor>> GatherBuffers(Classifier& model) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> gathered;
  for (const auto& [name, buffer] : FloatBuffers(model)) {
    HVX_ASSIGN_OR_RETURN(torch::Tensor all, Allgather("checkpoint.buffer." + name,
                                                      buffer.reshape({1, -1}).contiguous()));
    gathered.push_back(all.cpu());
  }
  return gathered;
}

// Writes to a temporary name, syncs, then renames: a crash leaves the old set of checkpoints or
// the new one, never a torn file under a checkpoint's name. The model part holds the buffers
// averaged over ranks (what evaluation uses: the checkpoint alone is a usable model);
// "rank_buffers" holds each rank's own. The live buffers are left as they were.
absl::Status WriteCheckpoint(const CheckpointConfig& c, Classifier& model,
                             torch::optim::Optimizer& optimizer, const TrainingPosition& p,
                             const std::vector<torch::Tensor>& rank_buffers) {
  HVX_RETURN_IF_ERROR(MakeDirs(c.dir()));
  const std::string final_path =
      absl::StrCat(c.dir(), "/", kCheckpointPrefix, p.global_step, kCheckpointSuffix);
  const std::string tmp_path = absl::StrCat(final_path, ".tmp.", getpid());
  torch::NoGradGuard no_grad;
  const auto buffers = FloatBuffers(model);
  std::vector<torch::Tensor> live;
  for (size_t i = 0; i < buffers.size(); ++i) {
    live.push_back(buffers[i].second.clone());
    buffers[i].second.copy_(rank_buffers[i].mean(0).view_as(buffers[i].second));
  }
  absl::Status status;
  try {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive, buffer_archive;
    model.save(model_archive);
    optimizer.save(optimizer_archive);
    for (size_t i = 0; i < rank_buffers.size(); ++i)
      buffer_archive.write(absl::StrCat("b", i), rank_buffers[i]);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("rank_buffers", buffer_archive);
    archive.write("position", torch::tensor(EncodePosition(p), torch::kInt64));
    archive.save_to(tmp_path);
  } catch (const c10::Error& e) {
    status = absl::InternalError(
        absl::StrCat("writing checkpoint ", tmp_path, ": ", e.what_without_backtrace()));
  }
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second.copy_(live[i]);
  HVX_RETURN_IF_ERROR(status);
  HVX_RETURN_IF_ERROR(FsyncPath(tmp_path));
  Failpoint("checkpoint");
  if (rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("rename ", tmp_path, " -> ", final_path));
  }
  HVX_RETURN_IF_ERROR(FsyncPath(c.dir()));
  auto all = ListCheckpoints(c.dir());
  for (size_t i = 0; i + c.keep() < all.size(); ++i) unlink(all[i].second.c_str());
  return absl::OkStatus();
}

// Loads onto `device`. *rank_buffers gets the per-rank buffers when the file has them for every
// floating-point buffer of `model` (checkpoints from before they were recorded have not). Reads
// positions of either stored form (see DecodePosition).
absl::Status LoadCheckpoint(const std::string& path, const torch::Device& device, Classifier& model,
                            torch::optim::Optimizer& optimizer, TrainingPosition* p,
                            std::vector<torch::Tensor>* rank_buffers) {
  rank_buffers->clear();
  try {
    torch::serialize::InputArchive archive, model_archive, optimizer_archive, buffer_archive;
    archive.load_from(path, device);
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model.load(model_archive);
    optimizer.load(optimizer_archive);
    torch::Tensor position;
    archive.read("position", position);
    position = position.cpu().to(torch::kInt64).contiguous().reshape({-1});
    auto decoded =
        DecodePosition({position.data_ptr<int64_t>(), static_cast<size_t>(position.numel())});
    if (!decoded.ok()) return Annotate(decoded.status(), absl::StrCat("checkpoint ", path));
    *p = *decoded;
    if (archive.try_read("rank_buffers", buffer_archive)) {
      const size_t n = FloatBuffers(model).size();
      for (size_t i = 0; i < n; ++i) {
        torch::Tensor t;
        if (!buffer_archive.try_read(absl::StrCat("b", i), t)) break;
        rank_buffers->push_back(t.cpu());
      }
      if (rank_buffers->size() != n) rank_buffers->clear();
    }
  } catch (const c10::Error& e) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " cannot be loaded: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

// Moves the checkpoints in `dir` into a new subfolder "replaced-<unix seconds>" (which
// ListCheckpoints does not look into) and returns its path, or "" when there were none.
absl::StatusOr<std::string> MoveCheckpointsAside(const std::string& dir) {
  const auto all = ListCheckpoints(dir);
  if (all.empty()) return std::string();
  const std::string aside = absl::StrCat(dir, "/replaced-", static_cast<int64_t>(time(nullptr)));
  HVX_RETURN_IF_ERROR(MakeDirs(aside));
  for (const auto& [step, path] : all) {
    const std::string to = absl::StrCat(aside, "/", path.substr(path.rfind('/') + 1));
    if (rename(path.c_str(), to.c_str()) != 0)
      return ErrnoToStatus(errno, absl::StrCat("rename ", path, " -> ", to));
  }
  return aside;
}

// Rank 0 loads the newest checkpoint (after moving the old ones aside when `fresh`) and every rank
// takes its model, optimizer and position, and, when the world size is unchanged, its own
// BatchNorm statistics. Returns false when there is none. Works without a file system shared
// between hosts.
absl::StatusOr<bool> Resume(const CheckpointConfig& c, bool fresh, const torch::Device& device,
                            Classifier& model, torch::optim::Optimizer& optimizer,
                            TrainingPosition* p) {
  // EncodePosition's values with epoch -1 (none) or -2 (error on rank 0), then whether per-rank
  // buffers follow.
  constexpr int kPositionSize = static_cast<int>(kEncodedPositionSize);
  int64_t meta[kPositionSize + 1] = {-1, 0, 0, 0, 0, 0, 0};
  absl::Status rank0_status;
  std::vector<torch::Tensor> rank_buffers;
  if (Rank() == 0) {
    if (fresh) {
      auto aside = MoveCheckpointsAside(c.dir());
      rank0_status = aside.status();
      if (aside.ok() && !aside->empty())
        HVX_LOG(INFO) << "--fresh: moved the previous checkpoints to " << *aside;
    }
    auto all = ListCheckpoints(c.dir());
    if (rank0_status.ok() && !all.empty()) {
      rank0_status = LoadCheckpoint(all.back().second, device, model, optimizer, p, &rank_buffers);
      if (rank0_status.ok()) {
        const bool own_buffers = !rank_buffers.empty() && p->world_size == Size();
        const std::vector<int64_t> stored = EncodePosition(*p);
        std::copy(stored.begin(), stored.end(), meta);
        meta[kPositionSize] = own_buffers ? 1 : 0;
        HVX_LOG(INFO) << "resuming from " << all.back().second << " (epoch " << p->epoch + 1
                      << ", step " << p->global_step << ")";
      }
    }
    if (!rank0_status.ok()) meta[0] = -2;
  }
  TensorRef ref(DataType::kInt64, TensorShape({kPositionSize + 1}), meta);
  HVX_RETURN_IF_ERROR(Wait(Broadcast("resume.position", ref, 0)));
  if (meta[0] == -2) {
    return !rank0_status.ok() ? rank0_status
                              : absl::DataLossError("rank 0 could not load the newest checkpoint");
  }
  if (meta[0] < 0) return false;
  HVX_ASSIGN_OR_RETURN(*p, DecodePosition(absl::MakeConstSpan(meta, kPositionSize)));
  HVX_RETURN_IF_ERROR(BroadcastParameters(model, 0));
  HVX_RETURN_IF_ERROR(BroadcastOptimizerState(optimizer, 0));
  if (meta[kPositionSize] == 0) return true;
  torch::NoGradGuard no_grad;
  const auto buffers = FloatBuffers(model);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const torch::Tensor& buffer = buffers[i].second;
    torch::Tensor all =
        Rank() == 0 ? rank_buffers[i].contiguous()
                    : torch::empty({Size(), buffer.numel()}, torch::dtype(buffer.scalar_type()));
    HVX_RETURN_IF_ERROR(BroadcastInPlace("resume.buffer." + buffers[i].first, all, 0));
    buffer.copy_(all[Rank()].view_as(buffer));
  }
  return true;
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

// Every rank takes part (the buffers are gathered); rank 0 writes.
absl::Status SaveCheckpoint(const CheckpointConfig& c, Classifier& model,
                            torch::optim::Optimizer& optimizer, const TrainingPosition& p) {
  HVX_ASSIGN_OR_RETURN(std::vector<torch::Tensor> rank_buffers, GatherBuffers(model));
  if (Rank() != 0) return absl::OkStatus();
  return WriteCheckpoint(c, model, optimizer, p, rank_buffers);
}

// Wraps a pipeline batch as a tensor without copying; the tensor owns the batch.
torch::Tensor ImagesOf(std::unique_ptr<data::Batch>& batch) {
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
    labels[i] += offset;
    if (labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", Rank(), ": sample ", batch.sample_ids()[i], " has label ", batch.labels()[i],
          ", which with ", "data.label_offset ", offset, " is ", labels[i], ", outside [0, ",
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
  std::shared_ptr<const data::Dataset> eval_data;
  std::shared_ptr<const data::Decoder> train_decoder;
  std::shared_ptr<const data::Decoder> eval_decoder;
  std::shared_ptr<Classifier> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<DistributedOptimizer> distributed;
  std::unique_ptr<SummaryWriter> summaries;
  int64_t steps_per_epoch = 0;
};

data::RemainderPolicy TrainRemainder(const TrainConfig& config) {
  return config.data().remainder() == PAD ? data::RemainderPolicy::kPad
                                          : data::RemainderPolicy::kDrop;
}

// How this run's epochs fall into steps.
EpochShape TrainShape(const TrainConfig& config, int64_t num_samples, int size) {
  return EpochShape{num_samples, size, config.data().batch_size(), TrainRemainder(config),
                    config.logging().max_steps_per_epoch()};
}

absl::StatusOr<EvalResult> Evaluate(Run& run, int64_t epoch) {
  const TrainConfig& config = run.config;
  HVX_RETURN_IF_ERROR(AverageBuffers(*run.model));
  data::PipelineOptions po;
  po.rank = Rank();
  po.size = Size();
  po.epoch = 0;
  po.shuffle = false;
  po.remainder = data::RemainderPolicy::kPad;
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
  // correct, loss sum, samples: summed over ranks at the end, so each sample counts once.
  std::vector<double> sums = {0, 0, 0};
  for (;;) {
    auto batch = pipeline->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    HVX_RETURN_IF_ERROR(batch.status());
    const int64_t real = (*batch)->size() - (*batch)->num_padded();
    HVX_ASSIGN_OR_RETURN(torch::Tensor labels, LabelsOf(**batch, config));
    labels = labels.to(run.device);
    torch::Tensor images = ImagesOf(*batch).to(run.device);
    if (real <= 0) continue;
    torch::Tensor logits = run.model->forward(images).narrow(0, 0, real);
    labels = labels.narrow(0, 0, real);
    sums[0] += logits.argmax(1).eq(labels).sum().item<double>();
    sums[1] +=
        torch::nn::functional::cross_entropy(
            logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    sums[2] += real;
  }
  HVX_ASSIGN_OR_RETURN(sums, SumMetrics(sums, absl::StrCat("eval.", epoch)));
  EvalResult result;
  result.samples = static_cast<int64_t>(sums[2]);
  result.accuracy = sums[2] > 0 ? sums[0] / sums[2] : 0;
  result.loss = sums[2] > 0 ? sums[1] / sums[2] : 0;
  return result;
}

// FNV-1a: a fingerprint that is the same on every rank of one build.
uint64_t Fingerprint(absl::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The dataset's files as this rank sees them: names and sizes.
std::string FilesFingerprint(const data::Dataset& d) {
  std::string text;
  for (const std::string& path : d.files()) {
    struct stat st {};
    absl::StrAppend(&text, path, " ",
                    stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1, "\n");
  }
  return absl::StrCat(d.files().size(), " files, fingerprint ",
                      absl::Hex(Fingerprint(text), absl::kZeroPad16));
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
  const std::string& eval_pattern =
      config.data().eval_files().empty() ? config.data().train_files() : config.data().eval_files();
  HVX_ASSIGN_OR_RETURN(auto eval, data::Dataset::Open(SplitFilePatterns(eval_pattern), {}));
  run.eval_data = std::move(eval);
  HVX_ASSIGN_OR_RETURN(run.train_decoder, MakeDecoder(config, /*train=*/true));
  HVX_ASSIGN_OR_RETURN(run.eval_decoder, MakeDecoder(config, /*train=*/false));
  return absl::OkStatus();
}

class SampleLog {
 public:
  absl::Status Open(const std::string& dir, int64_t epoch, bool append) {
    out_.reset();
    if (dir.empty()) return absl::OkStatus();
    HVX_RETURN_IF_ERROR(MakeDirs(dir));
    const std::string path = absl::StrCat(dir, "/rank", Rank(), "-epoch", epoch, ".txt");
    out_ = std::make_unique<std::ofstream>(path, append ? std::ios::app : std::ios::trunc);
    if (!*out_) return absl::PermissionDeniedError(absl::StrCat("cannot write sample log ", path));
    return absl::OkStatus();
  }
  void Add(const std::vector<int64_t>& ids, int64_t num_padded) {
    if (!out_) return;
    const size_t first_pad = ids.size() - static_cast<size_t>(num_padded);
    for (size_t i = 0; i < ids.size(); ++i) *out_ << ids[i] << (i >= first_pad ? " pad\n" : "\n");
  }
  absl::Status Close() {
    if (out_ && !out_->flush()) return absl::DataLossError("sample log write failed");
    out_.reset();
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<std::ofstream> out_;
};

absl::Status MaybeSummarize(Run& run, absl::string_view tag, double value, int64_t step) {
  if (run.summaries == nullptr) return absl::OkStatus();
  return run.summaries->AddScalar(tag, value, step);
}

// The training pipeline of `epoch` from `consumed` samples on, for `steps` batches.
data::PipelineOptions TrainPipelineOptions(const Run& run, int64_t epoch, int64_t consumed,
                                           int64_t steps) {
  const TrainConfig& config = run.config;
  data::PipelineOptions po;
  po.rank = Rank();
  po.size = Size();
  po.epoch = epoch;
  po.seed = config.data().shuffle_seed();
  po.remainder = TrainRemainder(config);
  po.consumed = consumed;
  po.batch_size = config.data().batch_size();
  po.drop_last_batch = true;
  po.max_batches = steps;
  po.reader_threads = config.data().reader_threads();
  po.decode_threads = config.data().decode_threads();
  po.prefetch_batches = config.data().prefetch_batches();
  po.decoder = run.train_decoder;
  return po;
}

absl::StatusOr<TrainResult> Train(Run& run) {
  const TrainConfig& config = run.config;
  const int rank = Rank(), size = Size();
  const Clock::time_point run_start = Clock::now();
  TrainResult result;
  const EpochShape shape = TrainShape(config, run.train_data->num_samples(), size);
  const int64_t global_batch = int64_t{size} * config.data().batch_size();
  run.steps_per_epoch = StepsPerEpoch(shape);
  if (run.steps_per_epoch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.batch_size: ", config.data().batch_size(), " per rank x ", size,
                     " ranks is more than the ", run.train_data->num_samples(),
                     " training samples; lower batch_size or use fewer processes"));
  }
  HVX_LOG_RANK0(INFO) << "training " << config.model().name() << " (" << CountParameters(*run.model)
                      << " parameters) on " << run.train_data->num_samples() << " samples, "
                      << run.eval_data->num_samples() << " for evaluation; " << size
                      << " ranks x batch " << config.data().batch_size() << ", "
                      << run.steps_per_epoch << " steps per epoch";
  const LrSchedule schedule(config.optimizer(), size, config.data().batch_size(),
                            run.steps_per_epoch, config.epochs());

  TrainingPosition pos;
  pos.world_size = size;
  pos.batch_size = config.data().batch_size();
  if (!config.checkpoint().dir().empty() && (config.checkpoint().resume() || run.options.fresh)) {
    HVX_ASSIGN_OR_RETURN(bool resumed, Resume(config.checkpoint(), run.options.fresh, run.device,
                                              *run.model, *run.optimizer, &pos));
    if (resumed) result.resumed_from_step = pos.global_step;
  }
  if (pos.epoch >= config.epochs()) {
    // A finished run: nothing to train. The caller says so and how to start over.
    result.already_complete = true;
    result.epochs_done = pos.epoch;
    result.global_step = pos.global_step;
    return result;
  }
  // Samples of the resumed epoch already trained on, over all ranks of the runs before: the data
  // position whatever their world size and batch size (see hvx/train/epoch_position.h).
  int64_t consumed = pos.samples_in_epoch;
  if (result.resumed_from_step >= 0 &&
      (pos.world_size != size || pos.batch_size != config.data().batch_size())) {
    HVX_LOG_RANK0(INFO) << "world size or batch size changed since the checkpoint: "
                        << DescribeGlobalBatch(pos.world_size, pos.batch_size) << ", now "
                        << DescribeGlobalBatch(size, config.data().batch_size());
  }
  pos.world_size = size;
  pos.batch_size = config.data().batch_size();
  SampleLog sample_log;
  for (int64_t epoch = pos.epoch; epoch < config.epochs(); ++epoch) {
    const EpochContinuation rest = ContinueEpoch(shape, consumed);
    if (consumed > 0) HVX_LOG_RANK0(INFO) << DescribeContinuation(shape, epoch, rest);
    pos.steps_in_epoch = rest.first_step;
    pos.samples_in_epoch = consumed;
    std::unique_ptr<data::Pipeline> pipeline;
    if (rest.steps > 0) {
      HVX_ASSIGN_OR_RETURN(
          pipeline, data::Pipeline::Create(run.train_data,
                                           TrainPipelineOptions(run, epoch, consumed, rest.steps)));
      if (pipeline->num_batches() != rest.steps) {
        return absl::InternalError(
            absl::StrCat("rank ", rank, ": epoch ", epoch + 1, " from sample ", consumed, " has ",
                         pipeline->num_batches(), " batches, expected ", rest.steps));
      }
    }
    HVX_RETURN_IF_ERROR(
        sample_log.Open(run.options.sample_log_dir, epoch, /*append=*/consumed > 0));
    const int64_t epoch_steps = run.steps_per_epoch;
    run.model->train();
    double window_loss = 0;
    int64_t window_steps = 0;
    Clock::time_point window_start = Clock::now();
    double window_wait = 0;
    const Clock::time_point epoch_start = Clock::now();
    int64_t epoch_samples = 0;
    double epoch_wait = 0;
    while (pos.steps_in_epoch < epoch_steps) {
      const Clock::time_point wait_start = Clock::now();
      auto batch = pipeline->Next();
      const double waited = Seconds(Clock::now() - wait_start);
      window_wait += waited;
      epoch_wait += waited;
      HVX_RETURN_IF_ERROR(batch.status());
      sample_log.Add((*batch)->sample_ids(), (*batch)->num_padded());
      const int64_t batch_rows = (*batch)->size();
      HVX_ASSIGN_OR_RETURN(torch::Tensor labels, LabelsOf(**batch, config));
      labels = labels.to(run.device);
      torch::Tensor images = ImagesOf(*batch).to(run.device);
      // The random stream (dropout) depends only on where training stands, so a resumed run
      // draws exactly what the uninterrupted run drew.
      torch::manual_seed(config.seed() * 1000003 + static_cast<uint64_t>(pos.global_step) * 131 +
                         rank);
      // The schedule at this run's size, where an uninterrupted run at this size stands at this
      // point of the epoch: the global step itself unless a resume changed the size.
      const double lr = schedule.At(epoch * epoch_steps + pos.steps_in_epoch);
      SetLr(*run.optimizer, lr);
      HVX_RETURN_IF_ERROR(run.distributed->ZeroGrad());
      torch::Tensor loss = torch::nn::functional::cross_entropy(run.model->forward(images), labels);
      loss.backward();
      HVX_RETURN_IF_ERROR(run.distributed->Step());
      const double local_loss = loss.item<double>();
      result.step_losses.push_back(local_loss);
      window_loss += local_loss;
      ++window_steps;
      epoch_samples += batch_rows;
      ++pos.steps_in_epoch;
      ++pos.global_step;
      pos.samples_in_epoch += global_batch;
      const bool last_step = pos.steps_in_epoch == epoch_steps;
      const bool stop = run.options.max_steps > 0 && pos.global_step >= run.options.max_steps;
      if (pos.global_step % config.logging().log_every_steps() == 0 || last_step || stop) {
        double mean_loss = window_loss / window_steps;
        if (size > 1) {
          HVX_ASSIGN_OR_RETURN(mean_loss, AverageMetric(mean_loss, "train.loss"));
        }
        const double window_s = Seconds(Clock::now() - window_start);
        const double samples_per_s =
            window_steps * config.data().batch_size() * size / std::max(window_s, 1e-9);
        const int64_t steps_left =
            (config.epochs() - epoch - 1) * epoch_steps + (epoch_steps - pos.steps_in_epoch);
        const double eta_s = steps_left * window_s / window_steps;
        if (rank == 0) {
          std::printf(
              "epoch %lld/%d step %lld/%lld loss %.7g lr %.6g samples/s %.0f data_wait %.1f%% eta "
              "%s\n",
              static_cast<long long>(epoch + 1), config.epochs(),
              static_cast<long long>(pos.steps_in_epoch), static_cast<long long>(epoch_steps),
              mean_loss, lr, samples_per_s, 100.0 * window_wait / std::max(window_s, 1e-9),
              FormatDuration(eta_s).c_str());
          std::fflush(stdout);
          HVX_RETURN_IF_ERROR(MaybeSummarize(run, "train/loss", mean_loss, pos.global_step));
          HVX_RETURN_IF_ERROR(MaybeSummarize(run, "train/lr", lr, pos.global_step));
          HVX_RETURN_IF_ERROR(
              MaybeSummarize(run, "train/samples_per_s", samples_per_s, pos.global_step));
        }
        window_loss = 0;
        window_steps = 0;
        window_wait = 0;
        window_start = Clock::now();
      }
      const bool step_checkpoint = config.checkpoint().every_steps() > 0 &&
                                   pos.global_step % config.checkpoint().every_steps() == 0 &&
                                   !last_step;
      if (!config.checkpoint().dir().empty() && (step_checkpoint || (stop && !last_step))) {
        HVX_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint(), *run.model, *run.optimizer, pos));
      }
      if (stop && !last_step) {
        HVX_RETURN_IF_ERROR(sample_log.Close());
        result.global_step = pos.global_step;
        result.wall_s = Seconds(Clock::now() - run_start);
        return result;
      }
    }
    HVX_RETURN_IF_ERROR(sample_log.Close());
    const double epoch_s = Seconds(Clock::now() - epoch_start);
    result.samples_per_s = epoch_samples * size / std::max(epoch_s, 1e-9);
    result.data_wait_fraction = epoch_wait / std::max(epoch_s, 1e-9);
    pos.epoch = epoch + 1;
    pos.steps_in_epoch = 0;
    pos.samples_in_epoch = 0;
    consumed = 0;
    const bool last_epoch = epoch + 1 == config.epochs();
    const bool stop = run.options.max_steps > 0 && pos.global_step >= run.options.max_steps;
    if ((epoch + 1) % config.logging().eval_every_epochs() == 0 || last_epoch) {
      HVX_ASSIGN_OR_RETURN(EvalResult eval, Evaluate(run, epoch));
      result.evals.push_back(eval);
      HVX_LOG_RANK0(INFO) << absl::StrFormat(
          "epoch %d/%d eval accuracy %.4f loss %.6f on %d samples (%.1f s/epoch, %.0f samples/s)",
          epoch + 1, config.epochs(), eval.accuracy, eval.loss, eval.samples, epoch_s,
          result.samples_per_s);
      if (rank == 0) {
        HVX_RETURN_IF_ERROR(MaybeSummarize(run, "eval/accuracy", eval.accuracy, pos.global_step));
        HVX_RETURN_IF_ERROR(MaybeSummarize(run, "eval/loss", eval.loss, pos.global_step));
        if (run.summaries) HVX_RETURN_IF_ERROR(run.summaries->Flush());
      }
    }
    if (!config.checkpoint().dir().empty() &&
        ((epoch + 1) % config.checkpoint().every_epochs() == 0 || last_epoch || stop)) {
      HVX_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint(), *run.model, *run.optimizer, pos));
    }
    if (stop) break;
  }
  result.global_step = pos.global_step;
  result.wall_s = Seconds(Clock::now() - run_start);
  return result;
}

}  // namespace

absl::StatusOr<TrainResult> RunTraining(const TrainConfig& config, const RunOptions& options) {
  if (!IsInitialized()) return absl::FailedPreconditionError("RunTraining needs hvx::Init first");
  HVX_RETURN_IF_ERROR(ValidateTrainConfig(config, "config"));
  Run run{config, options};
  HVX_ASSIGN_OR_RETURN(run.device, SelectTrainingDevice(config.device()));
  HVX_LOG_RANK0(INFO) << "training on " << run.device.str();
  const int threads = config.threads() > 0
                          ? config.threads()
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                            std::max(1, LocalSize()));
  torch::set_num_threads(threads);
  HVX_RETURN_IF_ERROR(OpenData(run));
  HVX_RETURN_IF_ERROR(
      Annotate(CheckSameOnEveryRank("trainer.settings", SettingsEveryRankShares(run)),
               "the trainer's ranks disagree"));
  torch::manual_seed(config.seed());
  HVX_ASSIGN_OR_RETURN(run.model, CreateModel(config.model()));
  run.model->to(run.device);
  HVX_RETURN_IF_ERROR(BroadcastParameters(*run.model, 0));
  run.optimizer = MakeOptimizer(config.optimizer(), *run.model);
  HVX_RETURN_IF_ERROR(BroadcastOptimizerState(*run.optimizer, 0));
  DistributedOptimizerOptions dopts;
  HVX_ASSIGN_OR_RETURN(dopts.compression, ParseGradientCompression(config.engine().compression()));
  dopts.gradient_predivide_factor = config.engine().gradient_predivide_factor();
  HVX_ASSIGN_OR_RETURN(run.distributed, DistributedOptimizer::Create(
                                            *run.optimizer, run.model->named_parameters(), dopts));
  if (Rank() == 0 && !config.summaries_dir().empty()) {
    HVX_ASSIGN_OR_RETURN(run.summaries, SummaryWriter::Create(config.summaries_dir()));
  }
  auto result = Train(run);
  if (run.summaries) run.summaries->Close().IgnoreError();
  return result;
}

}  // namespace train
}  // namespace hvx
