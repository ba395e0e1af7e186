// Runs on two ranks (hvx_mpi_test): every test case executes on each rank at once.
#include "hvx/train/sharded_checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/torch/optimizer_state.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/checkpoint.h"
#include "hvx/train/checkpoint_format.h"

namespace hvx {
namespace train {
namespace {

// Linear layers and BatchNorm: parameters of a few sizes, Adam's state and running statistics.
// Built from one seed: the same parameters on every rank, as a trainer's broadcast leaves them.
class Net : public Classifier {
 public:
  Net() {
    torch::manual_seed(7);
    fc_ = register_module("fc", torch::nn::Linear(5, 7));
    bn_ = register_module("bn", torch::nn::BatchNorm1d(7));
    out_ = register_module("out", torch::nn::Linear(7, 3));
  }
  at::Tensor forward(const at::Tensor& x) override { return out_(bn_(fc_(x))); }
  torch::nn::BatchNorm1d& bn() { return bn_; }

 private:
  torch::nn::Linear fc_{nullptr}, out_{nullptr};
  torch::nn::BatchNorm1d bn_{nullptr};
};

std::unique_ptr<torch::optim::Adam> MakeAdam(Net& net) {
  return std::make_unique<torch::optim::Adam>(net.parameters(), torch::optim::AdamOptions(0.01));
}

// `steps` steps on the same data on every rank (parameters and state agree between ranks), then
// running statistics of this rank's own.
void Train(Net& net, torch::optim::Optimizer& optimizer, int steps) {
  net.train();
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    net.forward(torch::arange(20, torch::kFloat32).reshape({4, 5}) / (i + 1))
        .pow(2)
        .sum()
        .backward();
    optimizer.step();
  }
  torch::NoGradGuard no_grad;
  net.bn()->running_mean.fill_(0.5 + Rank());
  net.bn()->running_var.fill_(2.0 + Rank());
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

CheckpointConfig Sharded(const std::string& dir, int keep = 3) {
  CheckpointConfig c;
  c.set_dir(dir);
  c.set_keep(keep);
  c.set_format(CheckpointConfig::SHARDED);
  return c;
}

TrainingPosition At(int64_t global_step) {
  TrainingPosition p;
  p.epoch = 1;
  p.steps_in_epoch = 3;
  p.global_step = global_step;
  p.world_size = Size();
  p.batch_size = 4;
  p.samples_in_epoch = 3 * 4 * Size();
  return p;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Each state tensor of `optimizer` for `param`, by field, and its step.
StateFields FieldsOf(torch::optim::Optimizer& optimizer, const torch::Tensor& key) {
  auto found = optimizer.state().find(StateKeyOf(key));
  EXPECT_NE(found, optimizer.state().end());
  if (found == optimizer.state().end()) return {};
  auto fields = GetStateFields(*found->second, "test");
  EXPECT_TRUE(fields.ok());
  return *fields;
}

// `to` takes `from`'s parameters (a snapshot of a model that trains on).
void CopyParameters(Net& from, Net& to) {
  torch::NoGradGuard no_grad;
  auto source = from.named_parameters();
  for (auto& item : to.named_parameters()) item.value().copy_(source[item.key()]);
}

void ExpectSameModel(Net& a, Net& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
}

TEST(ShardedCheckpointTest, EveryRankWritesItsShardTheIndexLastAndAResumeIsExact) {
  const std::string dir = TestDir("exact");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 3);
  const CheckpointConfig c = Sharded(dir);
  ASSERT_TRUE(SaveCheckpoint(c, net, *adam, At(12)).ok());
  EXPECT_EQ(CheckpointPath(c, 12), dir + "/ckpt-12");
  const std::vector<std::string> files = Names(dir + "/ckpt-12");
  ASSERT_EQ(files.size(), 3u) << ::testing::PrintToString(files);  // 2 shards, the index
  EXPECT_EQ(files.back(), "index.json");
  EXPECT_TRUE(absl::EndsWith(files[0], "-shard-0-of-2.safetensors")) << files[0];
  EXPECT_TRUE(absl::EndsWith(files[1], "-shard-1-of-2.safetensors")) << files[1];

  Net again;
  {
    torch::NoGradGuard no_grad;  // another start: everything must come from the checkpoint
    for (auto& p : again.parameters()) p.uniform_();
  }
  auto again_adam = MakeAdam(again);
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, again, *again_adam, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(*resumed);
  EXPECT_EQ(position.global_step, 12);
  EXPECT_EQ(position.samples_in_epoch, 3 * 4 * Size());
  ExpectSameModel(net, again);
  EXPECT_TRUE(torch::equal(again.bn()->running_mean, net.bn()->running_mean));  // its own
  EXPECT_TRUE(torch::equal(again.bn()->running_var, net.bn()->running_var));
  for (const auto& item : net.named_parameters()) {
    const StateFields want = FieldsOf(*adam, item.value());
    const StateFields got = FieldsOf(*again_adam, again.named_parameters()[item.key()]);
    EXPECT_EQ(got.step, want.step) << item.key();
    ASSERT_EQ(got.tensors.size(), want.tensors.size()) << item.key();
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      EXPECT_EQ(got.tensors[i].first, want.tensors[i].first);
      EXPECT_TRUE(torch::equal(got.tensors[i].second, want.tensors[i].second)) << item.key();
    }
  }
  // Both go on alike: the next step is the same.
  Train(net, *adam, 1);
  Train(again, *again_adam, 1);
  ExpectSameModel(net, again);
}

TEST(ShardedCheckpointTest, EachRankWritesAboutHalfAndNothingTwice) {
  const std::string dir = TestDir("halves");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 1);
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir), net, *adam, At(1)).ok());
  auto index = ReadIndex(dir + "/ckpt-1");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->files.size(), 2u);
  const double a = index->files[0].bytes, b = index->files[1].bytes;
  EXPECT_GT(std::min(a, b) / std::max(a, b), 0.5) << a << " and " << b << " bytes";
  // Model, Adam's two moments and step of every parameter, each buffer and its rows.
  EXPECT_EQ(index->tensors.count("model/fc.weight"), 1u);
  EXPECT_EQ(index->tensors.count("optimizer/fc.weight/exp_avg"), 1u);
  EXPECT_EQ(index->tensors.count("optimizer/fc.weight/step"), 1u);
  EXPECT_EQ(index->tensors.count("rank_buffers/bn.running_mean"), 1u);
  EXPECT_EQ(index->tensors.at("rank_buffers/bn.running_mean").pieces.size(), 2u);
  EXPECT_EQ(index->metadata["world_size"], 2);
  // The model's buffers there are the ranks' average.
  IndexReader reader(dir + "/ckpt-1", *index);
  std::vector<float> mean(7);
  ASSERT_TRUE(reader.Read("model/bn.running_mean", 0, 7, mean.data()).ok());
  EXPECT_FLOAT_EQ(mean[0], 1.0f);  // (0.5 + 1.5) / 2
}

// ZeRO's slices written and read where they live, in both directions against a replicated run.
TEST(ShardedCheckpointTest, ASlicedOptimizerAndAReplicatedOneReadEachOthersCheckpoints) {
  const std::string dir = TestDir("slices");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 2);
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir), net, *adam, At(2)).ok());

  // Replicated -> sliced: each rank takes its own elements of each moment.
  Net sliced_net;
  auto slice_adam = MakeAdam(sliced_net);
  auto whole_adam = MakeAdam(sliced_net);
  ShardedOptimizerOptions options;
  auto sharded = ShardedOptimizer::Create(*slice_adam, sliced_net.named_parameters(), options);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(Sharded(dir), false, torch::kCPU, sliced_net,
                                 CheckpointOptimizer(whole_adam.get(), sharded->get()), &position);
  ASSERT_TRUE(resumed.ok() && *resumed) << resumed.status();
  for (const auto& s : (*sharded)->Slices()) {
    const StateFields want = FieldsOf(*adam, net.named_parameters()[s.name]);
    const StateFields got = FieldsOf(*slice_adam, s.slice);
    EXPECT_EQ(got.step, want.step);
    ASSERT_EQ(got.tensors.size(), want.tensors.size());
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      EXPECT_TRUE(torch::equal(got.tensors[i].second, want.tensors[i].second.flatten().narrow(
                                                          0, s.range.begin, s.range.size)))
          << s.name << " " << got.tensors[i].first;
    }
  }
  EXPECT_TRUE(whole_adam->state().empty());

  // Sliced -> its own directory -> replicated: the whole moments again.
  const std::string dir2 = TestDir("slices_back");
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir2), sliced_net,
                             CheckpointOptimizer(whole_adam.get(), sharded->get()), At(3))
                  .ok());
  auto index = ReadIndex(dir2 + "/ckpt-3");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->tensors.at("optimizer/fc.weight/exp_avg").pieces.size(), 2u);  // one a rank
  Net back;
  auto back_adam = MakeAdam(back);
  resumed =
      ResumeFromNewestCheckpoint(Sharded(dir2), false, torch::kCPU, back, *back_adam, &position);
  ASSERT_TRUE(resumed.ok() && *resumed) << resumed.status();
  EXPECT_EQ(position.global_step, 3);
  for (const auto& item : net.named_parameters()) {
    const StateFields want = FieldsOf(*adam, item.value());
    const StateFields got = FieldsOf(*back_adam, back.named_parameters()[item.key()]);
    ASSERT_EQ(got.tensors.size(), want.tensors.size());
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      EXPECT_TRUE(torch::equal(got.tensors[i].second, want.tensors[i].second)) << item.key();
    }
  }
}

TEST(ShardedCheckpointTest, ADamagedShardIsSetAsideAndTheNextOlderResumed) {
  const std::string dir = TestDir("damaged");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 1);
  const CheckpointConfig c = Sharded(dir);
  ASSERT_TRUE(SaveCheckpoint(c, net, *adam, At(4)).ok());
  Train(net, *adam, 1);
  ASSERT_TRUE(SaveCheckpoint(c, net, *adam, At(8)).ok());
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  if (Rank() == 1) {
    // A byte of rank 1's file, which some rank reads: every rank needs the whole model.
    const std::vector<std::string> files = Names(dir + "/ckpt-8");
    const std::string path = dir + "/ckpt-8/" + files[1];
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    struct stat st;
    ASSERT_EQ(fstat(fd, &st), 0);
    char byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, st.st_size - 3), 1);
    byte ^= 0x11;
    ASSERT_EQ(pwrite(fd, &byte, 1, st.st_size - 3), 1);
    close(fd);
  }
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  Net again;
  auto again_adam = MakeAdam(again);
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, again, *again_adam, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(*resumed);
  EXPECT_EQ(position.global_step, 4);
  struct stat st;
  EXPECT_EQ(stat((dir + "/ckpt-8.corrupt").c_str(), &st), 0);
}

TEST(ShardedCheckpointTest, AnotherModelIsRefusedOnEveryRankNamingTheTensor) {
  const std::string dir = TestDir("other_model");
  Net net;
  auto adam = MakeAdam(net);
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir), net, *adam, At(2)).ok());
  class Wider : public Classifier {
   public:
    Wider() { fc_ = register_module("fc", torch::nn::Linear(6, 7)); }
    at::Tensor forward(const at::Tensor& x) override { return fc_(x); }
    torch::nn::Linear fc_{nullptr};
  } wider;
  torch::optim::SGD sgd(wider.parameters(), torch::optim::SGDOptions(0.1));
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(Sharded(dir), false, torch::kCPU, wider, sgd, &position);
  EXPECT_TRUE(absl::IsFailedPrecondition(resumed.status())) << resumed.status();
  EXPECT_NE(resumed.status().message().find("fc.weight"), std::string::npos) << resumed.status();
  struct stat st;
  EXPECT_EQ(stat((dir + "/ckpt-2/index.json").c_str(), &st), 0);  // left in place
}

TEST(ShardedCheckpointTest, KeepCountsBothFormatsAndTheNewestOfEitherResumes) {
  const std::string dir = TestDir("mixed");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 1);
  CheckpointConfig file = Sharded(dir, 2);
  file.set_format(CheckpointConfig::SINGLE_FILE);
  ASSERT_TRUE(SaveCheckpoint(file, net, *adam, At(1)).ok());
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir, 2), net, *adam, At(2)).ok());
  TrainingPosition position;
  {
    Net again;
    auto again_adam = MakeAdam(again);
    auto resumed =
        ResumeFromNewestCheckpoint(file, false, torch::kCPU, again, *again_adam, &position);
    ASSERT_TRUE(resumed.ok() && *resumed) << resumed.status();
    EXPECT_EQ(position.global_step, 2);  // the directory, though this config writes files
  }
  ASSERT_TRUE(SaveCheckpoint(file, net, *adam, At(3)).ok());
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"ckpt-2", "ckpt-3.pt"}));
  Net again;
  auto again_adam = MakeAdam(again);
  auto resumed =
      ResumeFromNewestCheckpoint(Sharded(dir), false, torch::kCPU, again, *again_adam, &position);
  ASSERT_TRUE(resumed.ok() && *resumed) << resumed.status();
  EXPECT_EQ(position.global_step, 3);
  ExpectSameModel(net, again);
  // And --fresh moves both kinds aside.
  resumed =
      ResumeFromNewestCheckpoint(Sharded(dir), true, torch::kCPU, again, *again_adam, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_FALSE(*resumed);
}

TEST(ShardedCheckpointTest, TheModelAloneLoadsFromADirectoryForExport) {
  const std::string dir = TestDir("export");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 2);
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir), net, *adam, At(5)).ok());
  Net loaded;
  ASSERT_TRUE(LoadCheckpointModel(dir + "/ckpt-5", torch::kCPU, loaded).ok());
  ExpectSameModel(net, loaded);
  EXPECT_FLOAT_EQ(loaded.bn()->running_mean[0].item<float>(), 1.0f);  // the average
  const absl::Status no_averages = LoadCheckpointModel(dir + "/ckpt-5", torch::kCPU, loaded, true);
  EXPECT_TRUE(absl::IsFailedPrecondition(no_averages)) << no_averages;
}

TEST(ShardedCheckpointTest, ABackgroundWriteKeepsTheModelAsItWasAndHasNoIndexUntilFinished) {
  const std::string dir = TestDir("background");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 2);
  Net snapshot;
  CopyParameters(net, snapshot);
  CheckpointConfig c = Sharded(dir);  // background by default
  Checkpointer checkpointer(c);
  ASSERT_TRUE(checkpointer.Save(net, *adam, At(6)).ok());
  checkpointer.AwaitSnapshot();  // as the trainer does before its optimizer step
  Train(net, *adam, 2);          // training goes on while the shards are written
  while (checkpointer.Writing()) usleep(1000);
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  struct stat st;
  EXPECT_NE(stat((dir + "/ckpt-6/index.json").c_str(), &st), 0) << "committed before Finish";
  ASSERT_TRUE(checkpointer.Finish().ok());
  EXPECT_EQ(stat((dir + "/ckpt-6/index.json").c_str(), &st), 0);
  EXPECT_FALSE(checkpointer.Writing());
  ASSERT_TRUE(checkpointer.Finish().ok());  // nothing pending: nothing to do

  Net again;
  auto again_adam = MakeAdam(again);
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, again, *again_adam, &position);
  ASSERT_TRUE(resumed.ok() && *resumed) << resumed.status();
  ExpectSameModel(snapshot, again);  // the model when Save was called, not after
}

// The parameters and Adam's state are copied by the writing thread, after Save returned; here that
// thread is held before its copy, so a step taken without waiting would be in the checkpoint.
// AwaitSnapshot waits for the copy: the checkpoint is the model and state at Save.
TEST(ShardedCheckpointTest, AwaitSnapshotWaitsUntilTheWriterCopiedTheLiveTensors) {
  const std::string dir = TestDir("snapshot");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 2);
  Net snapshot;
  CopyParameters(net, snapshot);
  std::map<std::string, std::vector<torch::Tensor>> state_at_save;
  for (const auto& item : net.named_parameters()) {
    for (const auto& [field, t] : FieldsOf(*adam, item.value()).tensors) {
      state_at_save[item.key()].push_back(t.clone());
    }
  }
  std::atomic<bool> release{false};
  SetCheckpointCopyHookForTesting([&release] {
    while (!release.load()) usleep(1000);
  });
  Checkpointer checkpointer(Sharded(dir));
  ASSERT_TRUE(checkpointer.Save(net, *adam, At(6)).ok());
  std::thread releaser([&release] {
    usleep(200 * 1000);
    release.store(true);
  });
  const auto waited_from = std::chrono::steady_clock::now();
  checkpointer.AwaitSnapshot();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count();
  releaser.join();
  SetCheckpointCopyHookForTesting(nullptr);
  EXPECT_GT(waited, 0.1) << "AwaitSnapshot returned before the copy";
  Train(net, *adam, 2);
  ASSERT_TRUE(checkpointer.Finish().ok());
  const std::vector<Checkpointer::Committed> committed = checkpointer.TakeCommitted();
  ASSERT_EQ(committed.size(), 1u);
  EXPECT_GT(committed[0].pause_s, 0.1) << "the wait is part of the pause";

  Net again;
  auto again_adam = MakeAdam(again);
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(Sharded(dir), false, torch::kCPU, again, *again_adam, &position);
  ASSERT_TRUE(resumed.ok() && *resumed) << resumed.status();
  ExpectSameModel(snapshot, again);
  for (const auto& item : again.named_parameters()) {
    const StateFields fields = FieldsOf(*again_adam, item.value());
    ASSERT_EQ(fields.tensors.size(), state_at_save[item.key()].size()) << item.key();
    for (size_t i = 0; i < fields.tensors.size(); ++i) {
      EXPECT_TRUE(torch::equal(fields.tensors[i].second, state_at_save[item.key()][i]))
          << item.key() << " " << fields.tensors[i].first << ": Adam's state at Save";
    }
  }
}

TEST(ShardedCheckpointTest, WithoutBackgroundSaveCommitsAtOnceAndSaysWhatItWrote) {
  const std::string dir = TestDir("foreground");
  Net net;
  auto adam = MakeAdam(net);
  CheckpointConfig c = Sharded(dir);
  c.set_background(false);
  Checkpointer checkpointer(c);
  ASSERT_TRUE(checkpointer.Save(net, *adam, At(4)).ok());
  struct stat st;
  EXPECT_EQ(stat((dir + "/ckpt-4/index.json").c_str(), &st), 0);
  const std::vector<Checkpointer::Committed> committed = checkpointer.TakeCommitted();
  ASSERT_EQ(committed.size(), 1u);
  EXPECT_EQ(committed[0].path, dir + "/ckpt-4");
  EXPECT_EQ(committed[0].position.global_step, 4);
  EXPECT_GT(committed[0].bytes, 0);
  EXPECT_TRUE(checkpointer.TakeCommitted().empty());
}

TEST(ShardedCheckpointTest, SaveWaitsForAndCommitsTheCheckpointInProgress) {
  const std::string dir = TestDir("one_at_a_time");
  Net net;
  auto adam = MakeAdam(net);
  Train(net, *adam, 1);
  Checkpointer checkpointer(Sharded(dir, 5));
  ASSERT_TRUE(checkpointer.Save(net, *adam, At(1)).ok());
  checkpointer.AwaitSnapshot();
  Train(net, *adam, 1);
  ASSERT_TRUE(checkpointer.Save(net, *adam, At(2)).ok());
  struct stat st;
  EXPECT_EQ(stat((dir + "/ckpt-1/index.json").c_str(), &st), 0);
  ASSERT_TRUE(checkpointer.Finish().ok());
  EXPECT_EQ(stat((dir + "/ckpt-2/index.json").c_str(), &st), 0);
}

TEST(ShardedCheckpointTest, ADirectoryClaimedByAnotherJobIsRefusedOnEveryRank) {
  const std::string dir = TestDir("claimed");
  auto first = std::make_unique<Checkpointer>(Sharded(dir));
  ASSERT_TRUE(first->Claim("job-a").ok());
  Checkpointer second(Sharded(dir));
  const absl::Status refused = second.Claim("job-b");
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("in use by another job (job job-a, pid "), std::string::npos)
      << refused;
  EXPECT_TRUE(second.Claim("job-a").ok());  // a restart of the same job takes it over
  first.reset();                            // the holder ends: the lock goes with it
  EXPECT_TRUE(second.Claim("job-b").ok());
}

// checkpoint.format AUTO with every rank seeing one directory: the shards (each rank writes its
// own), decided at the claim, the probe removed again; explicit formats are kept as they are.
TEST(ShardedCheckpointTest, AutoIsShardedWhereEveryRankSeesTheDirectory) {
  const std::string dir = TestDir("auto_shared");
  CheckpointConfig c = Sharded(dir);
  c.set_format(CheckpointConfig::AUTO);
  Checkpointer checkpointer(c);
  ASSERT_TRUE(checkpointer.Claim("").ok());
  EXPECT_EQ(checkpointer.format(), CheckpointConfig::SHARDED);
  EXPECT_EQ(checkpointer.Path(6), dir + "/ckpt-6");
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  EXPECT_EQ(Names(dir), std::vector<std::string>{"hvx-job.lock"});  // no probe left
  Net net;
  auto adam = MakeAdam(net);
  ASSERT_TRUE(checkpointer.Save(net, *adam, At(6)).ok());
  ASSERT_TRUE(checkpointer.Finish().ok());
  struct stat st;
  EXPECT_EQ(stat((dir + "/ckpt-6/index.json").c_str(), &st), 0);

  for (const auto format : {CheckpointConfig::SHARDED, CheckpointConfig::SINGLE_FILE}) {
    c.set_format(format);
    absl::StatusOr<CheckpointConfig::Format> kept = ChooseCheckpointFormat(c);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(*kept, format);
  }
}

// Hosts whose checkpoint.dir is a directory of their own (here: rank 1's config names another
// folder, as a host with its own disk mounted at the same path would see): one file that rank 0
// writes, decided alike on every rank, naming the rank that could not see rank 0's files.
TEST(ShardedCheckpointTest, AutoIsOneFileWhereARankDoesNotSeeRankZerosFiles) {
  const std::string own = TestDir(absl::StrCat("auto_own_", Rank()));
  CheckpointConfig c = Sharded(own);
  c.set_format(CheckpointConfig::AUTO);
  Checkpointer checkpointer(c);
  ASSERT_TRUE(checkpointer.Claim("").ok());
  EXPECT_EQ(checkpointer.format(), CheckpointConfig::SINGLE_FILE);
  EXPECT_EQ(checkpointer.Path(6), own + "/ckpt-6.pt");
  Net net;
  auto adam = MakeAdam(net);
  ASSERT_TRUE(checkpointer.Save(net, *adam, At(6)).ok());
  struct stat st;
  EXPECT_EQ(stat((own + "/ckpt-6.pt").c_str(), &st) == 0, Rank() == 0);
}

// AUTO is decided by the claim; SaveCheckpoint without it writes nothing and says so.
TEST(ShardedCheckpointTest, SavingWithAnUndecidedFormatIsRefused) {
  const std::string dir = TestDir("auto_undecided");
  CheckpointConfig c = Sharded(dir);
  c.set_format(CheckpointConfig::AUTO);
  Net net;
  auto adam = MakeAdam(net);
  const absl::Status refused = SaveCheckpoint(c, net, *adam, At(1));
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE(Names(dir).empty());
}

TEST(ShardedCheckpointTest, KeepRemovesALinkedInCheckpointsLinkNotWhatItPointsTo) {
  const std::string elsewhere = TestDir("pretrained"), dir = TestDir("linked");
  Net net;
  auto adam = MakeAdam(net);
  ASSERT_TRUE(SaveCheckpoint(Sharded(elsewhere), net, *adam, At(1)).ok());
  if (Rank() == 0) {
    ASSERT_EQ(mkdir(dir.c_str(), 0750), 0);
    ASSERT_EQ(symlink((elsewhere + "/ckpt-1").c_str(), (dir + "/ckpt-1").c_str()), 0);
  }
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir, 1), net, *adam, At(2)).ok());
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  struct stat st;
  EXPECT_NE(lstat((dir + "/ckpt-1").c_str(), &st), 0);                  // the link is gone
  EXPECT_EQ(stat((elsewhere + "/ckpt-1/index.json").c_str(), &st), 0);  // its checkpoint is not
}

TEST(ShardedCheckpointTest, ADamagedCheckpointThatCannotBeSetAsideStopsEveryRank) {
  const std::string dir = TestDir("stuck");
  Net net;
  auto adam = MakeAdam(net);
  const CheckpointConfig c = Sharded(dir);
  ASSERT_TRUE(SaveCheckpoint(c, net, *adam, At(3)).ok());
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  if (Rank() == 0) {
    // Damage: a shard file truncated; and "ckpt-3.corrupt" already taken by a directory.
    const std::vector<std::string> files = Names(dir + "/ckpt-3");
    ASSERT_EQ(truncate((dir + "/ckpt-3/" + files[0]).c_str(), 10), 0);
    ASSERT_EQ(mkdir((dir + "/ckpt-3.corrupt").c_str(), 0750), 0);
    ASSERT_EQ(mkdir((dir + "/ckpt-3.corrupt/x").c_str(), 0750), 0);
  }
  ASSERT_TRUE(WaitAll({Barrier()}).ok());
  Net again;
  auto again_adam = MakeAdam(again);
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, again, *again_adam, &position);
  EXPECT_TRUE(absl::IsFailedPrecondition(resumed.status())) << resumed.status();
  EXPECT_NE(
      resumed.status().message().find("setting it aside as " + dir + "/ckpt-3.corrupt failed"),
      std::string::npos)
      << resumed.status();
}

TEST(ShardedCheckpointTest, ExportRefusesADirectoryOfAnotherModel) {
  const std::string dir = TestDir("export_other");
  Net net;
  auto adam = MakeAdam(net);
  ASSERT_TRUE(SaveCheckpoint(Sharded(dir), net, *adam, At(1)).ok());
  class Transposed : public Classifier {
   public:
    Transposed() { fc_ = register_module("fc", torch::nn::Linear(7, 5)); }
    at::Tensor forward(const at::Tensor& x) override { return fc_(x); }
    torch::nn::Linear fc_{nullptr};
  } other;
  const absl::Status refused = LoadCheckpointModel(dir + "/ckpt-1", torch::kCPU, other);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("another model"), std::string::npos) << refused;
}

}  // namespace
}  // namespace train
}  // namespace hvx
