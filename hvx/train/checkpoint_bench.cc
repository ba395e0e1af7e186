// What a checkpoint costs training, in both formats, in one run: ResNet-50 (or --model) with Adam
// (its state made by one step), every rank at once.
//
//   bazel build //hvx/train:checkpoint_bench
//   mpiexec -n 2 bazel-bin/hvx/train/checkpoint_bench [--model=resnet50] [--rounds=3]
//       [--dir=/tmp/hvx-checkpoint-bench] [--steps=4] [--image=64] [--batch=4] [--shard]
//
// --shard: the optimizer state sharded (optimizer.shard STATE, a ShardedOptimizer): the single
// file gathers it to rank 0 first, the sharded checkpoint writes and reads each rank's slices.
// Rank 0's log lines say what each rank wrote and read.
//
// Each round, alternating the formats so a busy machine slows each alike:
//   single file   SaveCheckpoint SINGLE_FILE: every rank waits until rank 0 wrote the whole file
//                 (a sharded optimizer would add the gather), and the resume (rank 0 reads,
//                 broadcasts)
//   sharded, sync every rank writes its share, then the index; the resume (every rank reads what
//                 it needs)
//   sharded, background  the pause: Checkpointer::Save (the small copies) and the next step's wait
//                 before its optimizer step for the thread's copy of the parameters and state
//                 (AwaitSnapshot), and the time until Finish committed it; one Checkpointer for
//                 every round, as in training: the first round's pause (its copy buffer new) is
//                 printed apart from the best later
// Then the steps: --steps training steps (--image px, --batch per rank) with no write going on,
// and as many with a background write started just before them (the first step's wait for the
// copy included), alternating, best of --rounds.
// Prints each figure (best of the rounds, the slowest rank's) and the ratios the issue asks for:
// pause / synchronous save, and step time during a background write / without one.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "hvx/common/files.h"
#include "hvx/core/api.h"
#include "hvx/torch/sharded_optimizer.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/checkpoint.h"
#include "hvx/train/models.h"
#include "hvx/train/recipes.h"

namespace hvx {
namespace train {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The slowest rank's `seconds`: what every rank waits for.
double Slowest(double seconds, const std::string& name) {
  torch::Tensor mine = torch::full({1}, seconds, torch::kFloat64);
  auto gathered = Allgather(name, mine);
  return gathered.ok() ? gathered->max().item<double>() : seconds;
}

struct Options {
  std::string model = "resnet50";
  std::string dir = "/tmp/hvx-checkpoint-bench";
  int rounds = 3;
  int steps = 4;
  int image = 64;
  int batch = 4;
  bool shard = false;
};

bool ParseFlags(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--model=")) {
      o->model = std::string(a);
    } else if (absl::ConsumePrefix(&a, "--dir=")) {
      o->dir = std::string(a);
    } else if (absl::ConsumePrefix(&a, "--rounds=")) {
      if (!absl::SimpleAtoi(a, &o->rounds) || o->rounds < 1) return false;
    } else if (absl::ConsumePrefix(&a, "--steps=")) {
      if (!absl::SimpleAtoi(a, &o->steps) || o->steps < 1) return false;
    } else if (absl::ConsumePrefix(&a, "--image=")) {
      if (!absl::SimpleAtoi(a, &o->image) || o->image < 32) return false;
    } else if (a == "--shard") {
      o->shard = true;
    } else if (absl::ConsumePrefix(&a, "--batch=")) {
      if (!absl::SimpleAtoi(a, &o->batch) || o->batch < 1) return false;
    } else {
      return false;
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseFlags(argc, argv, &o)) {
    fprintf(stderr,
            "usage: checkpoint_bench [--model=resnet50] [--dir=D] [--rounds=3] [--steps=4] "
            "[--image=64] [--batch=4]\n");
    return 2;
  }
  if (!Init().ok()) return 1;
  torch::set_num_threads(1);
  torch::manual_seed(1);
  ModelConfig mc;
  mc.set_name(o.model);
  mc.set_num_classes(1000);
  auto created = CreateModel(mc);
  if (!created.ok()) {
    fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<Classifier> model = *created;
  OptimizerConfig oc;
  oc.set_kind(OptimizerConfig::ADAM);
  oc.set_lr(1e-4);
  // With --shard, `optimizer` steps this rank's slices and `whole` is the whole-parameter one a
  // single file gathers the state into.
  auto optimizer = *MakeOptimizer(oc, *model);
  auto whole = *MakeOptimizer(oc, *model);
  std::unique_ptr<ShardedOptimizer> sharded;
  if (o.shard) {
    auto made = ShardedOptimizer::Create(*optimizer, model->named_parameters(), {});
    if (!made.ok()) {
      fprintf(stderr, "%s\n", made.status().ToString().c_str());
      return 1;
    }
    sharded = *std::move(made);
  }
  const CheckpointOptimizer held =
      o.shard ? CheckpointOptimizer(whole.get(), sharded.get()) : CheckpointOptimizer(*optimizer);
  const int channels = o.model == "resnet18" || o.model == "resnet50" ? 3 : 1;
  const int side = channels == 3 ? o.image : 28;
  torch::Tensor images = torch::randn({o.batch, channels, side, side});
  torch::Tensor labels = torch::randint(0, mc.num_classes(), {o.batch}, torch::kInt64);
  // A step, as the trainer's: forward, backward, gradients averaged, then (once a background
  // checkpoint has its copy: `snapshot`) the optimizer's step.
  auto step = [&](const std::function<void()>& snapshot) {
    if (sharded) {
      (void)sharded->ZeroGrad();
      torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
      snapshot();
      (void)sharded->Step();
      return;
    }
    optimizer->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
    for (auto& p : model->parameters()) {
      if (p.grad().defined()) (void)AllreduceInPlace("bench.grad", p.grad());
    }
    snapshot();
    optimizer->step();
  };
  const std::function<void()> no_checkpoint = [] {};
  model->train();
  step(no_checkpoint);  // Adam's state
  int64_t state_bytes = 0, param_bytes = 0;
  for (const auto& p : model->parameters()) param_bytes += p.numel() * p.element_size();
  state_bytes = 2 * param_bytes;
  if (Rank() == 0) {
    printf(
        "checkpoint_bench: %s with Adam, %d ranks, %.1f MB of parameters and %.1f MB of state "
        "(%s)\n",
        o.model.c_str(), Size(), param_bytes / 1e6, state_bytes / 1e6,
        o.shard ? "sharded: optimizer.shard STATE" : "replicated");
  }
  const std::string dir = absl::StrCat(o.dir, "/", Size(), "ranks");
  if (Rank() == 0) (void)MakeDirs(dir);
  TrainingPosition pos;
  pos.world_size = Size();
  pos.batch_size = o.batch;
  double best_file = 1e9, best_sync = 1e9, best_pause = 1e9, best_commit = 1e9;
  double best_file_resume = 1e9, best_dir_resume = 1e9;
  double best_plain = 1e9, best_during = 1e9, first_pause = 0;
  CheckpointConfig file;
  file.set_dir(dir);
  file.set_keep(2);
  file.set_format(CheckpointConfig::SINGLE_FILE);
  CheckpointConfig dir_config = file;
  dir_config.set_format(CheckpointConfig::SHARDED);
  // One Checkpointer for the run, as the trainer has: its background writes copy into a buffer it
  // keeps, so the first pause (fresh memory) is reported apart from the later ones.
  Checkpointer checkpointer(dir_config);
  for (int round = 0; round < o.rounds; ++round) {
    pos.global_step = 10 * round + 1;
    double t = Now();
    if (!SaveCheckpoint(file, *model, held, pos).ok()) return 1;
    (void)WaitAll({Barrier()});
    best_file = std::min(best_file, Slowest(Now() - t, "bench.file"));
    pos.global_step += 1;
    t = Now();
    if (!SaveCheckpoint(dir_config, *model, held, pos).ok()) return 1;
    best_sync = std::min(best_sync, Slowest(Now() - t, "bench.sync"));
    // Resume from each: the file is the older one, so it is moved away while the directory is
    // read and vice versa: each resume finds only its own format.
    TrainingPosition got;
    {
      CheckpointConfig only_file = file;
      only_file.set_dir(dir + "/file_only");
      if (Rank() == 0) {
        (void)MakeDirs(only_file.dir());
        rename(CheckpointPath(file, pos.global_step - 1).c_str(),
               CheckpointPath(only_file, pos.global_step - 1).c_str());
      }
      (void)WaitAll({Barrier()});
      t = Now();
      if (!ResumeFromNewestCheckpoint(only_file, false, torch::kCPU, *model, held, &got).ok()) {
        return 1;
      }
      best_file_resume = std::min(best_file_resume, Slowest(Now() - t, "bench.file_resume"));
      t = Now();
      if (!ResumeFromNewestCheckpoint(dir_config, false, torch::kCPU, *model, held, &got).ok()) {
        return 1;
      }
      best_dir_resume = std::min(best_dir_resume, Slowest(Now() - t, "bench.dir_resume"));
    }
    // Steps without a write, then a background write and as many steps during it.
    t = Now();
    for (int i = 0; i < o.steps; ++i) step(no_checkpoint);
    best_plain = std::min(best_plain, Slowest((Now() - t) / o.steps, "bench.plain"));
    pos.global_step += 1;
    t = Now();
    if (!checkpointer.Save(*model, held, pos).ok()) return 1;
    for (int i = 0; i < o.steps; ++i) step([&checkpointer] { checkpointer.AwaitSnapshot(); });
    const double during = (Now() - t) / o.steps;
    best_during = std::min(best_during, Slowest(during, "bench.during"));
    t = Now();
    if (!checkpointer.Finish().ok()) return 1;
    best_commit = std::min(best_commit, Slowest(Now() - t, "bench.commit"));
    // The pause: Save's own time and the first step's wait for the copy (the checkpoint's record).
    const std::vector<Checkpointer::Committed> committed = checkpointer.TakeCommitted();
    if (committed.empty()) return 1;
    const double pause = Slowest(committed.back().pause_s, "bench.pause");
    if (round == 0) {
      first_pause = pause;
    } else {
      best_pause = std::min(best_pause, pause);
    }
  }
  if (Rank() == 0) {
    printf("save, single file (rank 0 writes)     %8.3f s\n", best_file);
    printf("save, sharded, every rank waits       %8.3f s\n", best_sync);
    printf(
        "save, sharded, background: pause      %8.3f s = %.3f of the single file's save "
        "(the first, into fresh memory)\n",
        first_pause, first_pause / best_file);
    if (o.rounds > 1) {
      printf("                                      %8.3f s = %.3f (later ones, the buffer kept)\n",
             best_pause, best_pause / best_file);
    }
    printf("      the write's rest at Finish      %8.3f s\n", best_commit);
    printf("resume, single file (rank 0 reads)    %8.3f s\n", best_file_resume);
    printf("resume, sharded (each rank its part)  %8.3f s\n", best_dir_resume);
    printf("step, no write                        %8.3f s\n", best_plain);
    printf("step, during a background write       %8.3f s = %.3f of a step without one\n",
           best_during, best_during / best_plain);
  }
  (void)Shutdown();
  return 0;
}

}  // namespace
}  // namespace train
}  // namespace hvx

int main(int argc, char** argv) { return hvx::train::Main(argc, argv); }
