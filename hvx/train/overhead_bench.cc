// Trainer overhead: samples/s of RunTraining (record pipeline, DistributedOptimizer, schedule,
// logging) against a plain LibTorch loop over the same model on in-memory tensors.
//
//   bazel run //hvx/train:overhead_bench -- --config=$PWD/data/fashion_mnist.pbtxt [--steps=300]
//       [--override='optimizer { kind: LAMB }' ...]
//   hvxrun -np 2 -- bazel-bin/hvx/train/overhead_bench --config=... --override='threads: 1'
//
// Under a launcher every rank runs its plain loop at the same time as the others (no exchange: the
// most N processes of it reach on this machine), and the trainer's samples/s over all ranks is
// compared with the plain loops' sum.
//
// With --override, both sides train the recipe it selects: the plain loop uses the same recipe
// pieces (optimizer, label smoothing, micro-batches, clipping, EMA, autocast), so the ratio is the
// trainer's own cost around them.
// The two runs alternate (plain, trainer, plain, trainer) and the best of each is compared, so a
// busy machine slows both alike. Prints "overhead ratio trainer/plain = R" (target >= 0.95).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "hvx/common/env.h"
#include "hvx/core/api.h"
#include "hvx/torch/host_allocator.h"
#include "hvx/train/config.h"
#include "hvx/train/models.h"
#include "hvx/train/recipes.h"
#include "hvx/train/trainer.h"

namespace hvx {
namespace train {
namespace {

// The same training math as the trainer's step, without the trainer: the config's optimizer,
// loss, micro-batches, clipping, moving average and autocast (hvx/train/recipes.h), on batches
// already in memory, so the loop measures compute only.
double PlainLoop(const TrainConfig& config, int steps) {
  torch::manual_seed(1);
  auto model = *CreateModel(config.model());
  if (config.model().channels_last()) ToChannelsLast(*model);
  model->train();
  auto optimizer = *MakeOptimizer(config.optimizer(), *model);
  std::unique_ptr<WeightAverage> average;
  if (config.ema_decay() > 0) average = std::make_unique<WeightAverage>(*model, config.ema_decay());
  const at::ScalarType autocast = config.precision() == BF16 ? at::kBFloat16 : at::kFloat;
  const int batch = config.data().batch_size();
  const auto parts = MicroBatches(batch, config.optimizer().backward_passes_per_step());
  torch::Tensor images = torch::randn({16, batch, 1, 28, 28});
  torch::Tensor labels = torch::randint(0, 10, {16, batch}, torch::kInt64);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    optimizer->zero_grad();
    for (const auto& [begin, n] : parts) {
      torch::Tensor logits;
      {
        AutocastGuard guard(c10::DeviceType::CPU, autocast);
        torch::Tensor x = images[i % 16].narrow(0, begin, n);
        if (config.model().channels_last()) x = x.contiguous(at::MemoryFormat::ChannelsLast);
        logits = model->forward(x).to(torch::kFloat);
      }
      torch::Tensor loss =
          TrainingLoss(logits, labels[i % 16].narrow(0, begin, n), config.label_smoothing());
      if (parts.size() > 1) loss = loss * (static_cast<double>(n) / batch);
      loss.backward();
      loss.item<double>();
    }
    if (config.optimizer().clip_grad_norm() > 0) {
      ClipGradients(*model, config.optimizer().clip_grad_norm());
    }
    optimizer->step();
    if (average) average->Update(i + 1);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return steps * batch / s;
}

int Main(int argc, char** argv) {
  // As tools/train does; both loops below share the setting.
  auto host_memory = KeepHostMemoryForReuse(Environment::Process());
  if (!host_memory.ok()) {
    std::fprintf(stderr, "%s\n", std::string(host_memory.status().message()).c_str());
    return 2;
  }
  std::printf("%s\n", host_memory->c_str());
  std::string config_path = "data/fashion_mnist.pbtxt";
  int steps = 300;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--config=")) config_path = std::string(arg);
    if (absl::ConsumePrefix(&arg, "--override=")) overrides.emplace_back(arg);
    if (absl::ConsumePrefix(&arg, "--steps=") && !absl::SimpleAtoi(arg, &steps)) return 2;
  }
  ConfigSearchPath search;
  search.home = Environment::Process().Get("HOME").value_or("");
  auto loaded = LoadTrainConfig(config_path, search, overrides);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  TrainConfig config = loaded->config;
  config.set_epochs(1);
  config.mutable_logging()->set_max_steps_per_epoch(steps);
  config.mutable_logging()->set_log_every_steps(steps);
  config.mutable_logging()->set_max_eval_batches(1);
  config.mutable_checkpoint()->set_dir("");
  config.set_summaries_dir("");
  if (!Init().ok()) return 1;
  torch::set_num_threads(config.threads() > 0 ? config.threads() : 2);
  double best_plain = 0, best_trainer = 0;
  for (int round = 0; round < 2; ++round) {
    // Every rank's plain loop at once, summed over the ranks.
    if (!Wait(Barrier()).ok()) return 1;
    double plain = PlainLoop(config, steps);
    TensorRef sum(DataType::kFloat64, {1}, &plain);
    AllreduceOptions add;
    add.op = ReduceOp::kSum;
    if (!Wait(Allreduce("overhead_bench.plain", sum, sum, add)).ok()) return 1;
    best_plain = std::max(best_plain, plain);
    auto result = RunTraining(config, {});
    if (!result.ok()) {
      std::fprintf(stderr, "%s\n", std::string(result.status().message()).c_str());
      return 1;
    }
    best_trainer = std::max(best_trainer, result->samples_per_s);
    std::printf(
        "round %d: plain %.0f samples/s, trainer %.0f samples/s over %d process(es) (data wait "
        "%.1f%%)\n",
        round + 1, plain, result->samples_per_s, Size(), 100 * result->data_wait_fraction);
  }
  std::string features;
  for (const std::string& o : overrides) features += " " + o;
  std::printf("overhead ratio trainer/plain = %.3f (model %s, batch %d, %d steps;%s)\n",
              best_trainer / best_plain, config.model().name().c_str(), config.data().batch_size(),
              steps, features.empty() ? " no overrides" : features.c_str());
  Shutdown().IgnoreError();
  return 0;
}

}  // namespace
}  // namespace train
}  // namespace hvx

int main(int argc, char** argv) { return hvx::train::Main(argc, argv); }
