// Runs on two ranks (hvx_mpi_test): every test case executes on each rank at once.
#include "hvx/train/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/export.h"

namespace hvx {
namespace train {
namespace {

// What the other ranks' errors start with where rank 0's failure is every rank's.
std::string Rank0Prefix() {
  return Rank() == 0 ? "" : absl::StrCat("rank 0 (host ", Host(), "): ");
}

// A linear layer and BatchNorm: parameters, optimizer state and running statistics.
class TinyNet : public Classifier {
 public:
  explicit TinyNet(int inputs = 3) {
    fc_ = register_module("fc", torch::nn::Linear(inputs, 2));
    bn_ = register_module("bn", torch::nn::BatchNorm1d(2));
  }
  at::Tensor forward(const at::Tensor& x) override { return bn_(fc_(x)); }
  torch::nn::BatchNorm1d& bn() { return bn_; }

 private:
  torch::nn::Linear fc_{nullptr};
  torch::nn::BatchNorm1d bn_{nullptr};
};

// Running statistics that differ between ranks, as each rank's own batches leave them.
void GiveOwnStatistics(TinyNet& net, int rank) {
  torch::NoGradGuard no_grad;
  net.bn()->running_mean.fill_(0.5 + rank);
  net.bn()->running_var.fill_(2.0 + rank);
}

std::unique_ptr<torch::optim::SGD> MakeSgd(TinyNet& net) {
  return std::make_unique<torch::optim::SGD>(net.parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.9));
}

// One step on the same data on every rank (each rank builds its model from the same seed), so that
// parameters and optimizer state agree between ranks, then running statistics of this rank's own.
void TrainOneStep(TinyNet& net, torch::optim::Optimizer& optimizer) {
  net.train();
  optimizer.zero_grad();
  net.forward(torch::arange(12, torch::kFloat32).reshape({4, 3})).sum().backward();
  optimizer.step();
  GiveOwnStatistics(net, Rank());
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

CheckpointConfig InDir(const std::string& dir, int keep) {
  CheckpointConfig c;
  c.set_dir(dir);
  c.set_keep(keep);
  c.set_format(CheckpointConfig::SINGLE_FILE);
  return c;
}

// A checkpoint as trainers wrote them before per-rank buffers, samples_in_epoch and the
// fingerprint were stored: model, optimizer and a five-value position (step 5), into a new
// directory.
void WriteOlderCheckpoint(TinyNet& net, torch::optim::Optimizer& optimizer,
                          const std::string& path) {
  ASSERT_EQ(mkdir(path.substr(0, path.rfind('/')).c_str(), 0755), 0);
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  net.save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("position", torch::tensor(std::vector<int64_t>{1, 3, 5, Size(), 4}));
  archive.save_to(path);
}

TrainingPosition SomePosition(int64_t global_step) {
  TrainingPosition p;
  p.epoch = 1;
  p.steps_in_epoch = 3;
  p.global_step = global_step;
  p.world_size = Size();
  p.batch_size = 4;
  p.samples_in_epoch = 3 * 4 * Size();
  return p;
}

TEST(CheckpointTest, AMidEpochCheckpointOfAnotherDataOrderIsRefusedOneAtAnEpochStartIsNot) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const std::string written = "shuffle_seed 1, remainder DROP, 480 samples in 2 files, sizes 1";
  const std::string other = "shuffle_seed 2, remainder DROP, 480 samples in 2 files, sizes 1";
  CheckpointExtras extras;
  extras.data_order = &written;
  const CheckpointConfig mid = InDir(TestDir("order_mid"), 3);
  ASSERT_TRUE(SaveCheckpoint(mid, net, *optimizer, SomePosition(7), extras).ok());
  TinyNet again;
  auto again_optimizer = MakeSgd(again);
  TrainingPosition position;
  CheckpointExtras resumed_extras;
  resumed_extras.data_order = &other;
  auto refused = ResumeFromNewestCheckpoint(mid, false, torch::kCPU, again, *again_optimizer,
                                            &position, resumed_extras);
  ASSERT_FALSE(refused.ok());  // every rank; rank 0 says why
  if (Rank() == 0) {
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    const std::string why(refused.status().message());
    EXPECT_TRUE(absl::StrContains(why, "written mid-epoch 2")) << why;
    EXPECT_TRUE(absl::StrContains(why, "in the data order '" + written + "'")) << why;
    EXPECT_TRUE(absl::StrContains(why, "this run's is '" + other + "'")) << why;
  }
  // The same order resumes.
  resumed_extras.data_order = &written;
  auto same = ResumeFromNewestCheckpoint(mid, false, torch::kCPU, again, *again_optimizer,
                                         &position, resumed_extras);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(*same);
  // At the start of an epoch no sample of it was trained: another order resumes.
  TrainingPosition start = SomePosition(9);
  start.epoch = 2;
  start.steps_in_epoch = 0;
  start.samples_in_epoch = 0;
  const CheckpointConfig boundary = InDir(TestDir("order_start"), 3);
  ASSERT_TRUE(SaveCheckpoint(boundary, net, *optimizer, start, extras).ok());
  resumed_extras.data_order = &other;
  auto changed = ResumeFromNewestCheckpoint(boundary, false, torch::kCPU, again, *again_optimizer,
                                            &position, resumed_extras);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(position.epoch, 2);
}

TEST(CheckpointTest, ResumeRestoresModelOptimizerPositionAndEachRanksStatistics) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  TrainOneStep(net, *optimizer);
  const torch::Tensor own_mean = net.bn()->running_mean.clone();
  const CheckpointConfig c = InDir(TestDir("resume"), 3);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(7)).ok());
  // Saving leaves the live statistics as they were.
  EXPECT_TRUE(torch::equal(net.bn()->running_mean, own_mean));
  if (Rank() == 0) {
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-7.pt"));
  }

  torch::manual_seed(2);
  TinyNet other;
  auto other_optimizer = MakeSgd(other);
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(c, false, torch::kCPU, other, *other_optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(*resumed);
  EXPECT_EQ(EncodePosition(position), EncodePosition(SomePosition(7)));
  const auto want = net.named_parameters();
  const auto got = other.named_parameters();
  for (const auto& item : want)
    EXPECT_TRUE(torch::equal(got[item.key()], item.value())) << item.key();
  EXPECT_TRUE(torch::equal(other.bn()->running_mean, own_mean)) << "rank " << Rank();
  // The optimizer continues where it stood: the same step from both gives the same parameters.
  TrainOneStep(net, *optimizer);
  TrainOneStep(other, *other_optimizer);
  for (const auto& item : net.named_parameters())
    EXPECT_TRUE(torch::allclose(other.named_parameters()[item.key()], item.value())) << item.key();
}

// The archive's entries, as older and newer trainers read them.
TEST(CheckpointTest, TheFileHoldsAveragedModelEveryRanksBuffersAndTheSixPositionValues) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  TrainOneStep(net, *optimizer);
  const CheckpointConfig c = InDir(TestDir("format"), 3);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(9)).ok());
  auto means = Allgather("test.means", net.bn()->running_mean.reshape({1, -1}));
  ASSERT_TRUE(means.ok());
  if (Rank() != 0) return;
  torch::serialize::InputArchive archive, model_archive, buffer_archive, optimizer_archive;
  archive.load_from(c.dir() + "/ckpt-9.pt");
  torch::Tensor position;
  archive.read("position", position);
  EXPECT_EQ(position.scalar_type(), torch::kInt64);
  const std::vector<int64_t> stored(position.data_ptr<int64_t>(),
                                    position.data_ptr<int64_t>() + position.numel());
  EXPECT_EQ(stored, (std::vector<int64_t>{1, 3, 9, Size(), 4, 3 * 4 * Size()}));
  ASSERT_TRUE(archive.try_read("rank_buffers", buffer_archive));
  // FloatBuffers order: bn.running_mean, then bn.running_var.
  ASSERT_EQ(FloatBuffers(net).front().first, "bn.running_mean");
  torch::Tensor b0;
  ASSERT_TRUE(buffer_archive.try_read("b0", b0));
  EXPECT_TRUE(torch::equal(b0, *means));
  ASSERT_TRUE(archive.try_read("optimizer", optimizer_archive));
  archive.read("model", model_archive);
  TinyNet loaded;
  loaded.load(model_archive);
  EXPECT_TRUE(torch::allclose(loaded.bn()->running_mean, means->mean(0)));
}

// A checkpoint from before per-rank buffers and samples_in_epoch were stored.
TEST(CheckpointTest, OlderCheckpointsWithoutRankBuffersStillLoad) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  TrainOneStep(net, *optimizer);
  const CheckpointConfig c = InDir(TestDir("older"), 3);
  if (Rank() == 0) {
    WriteOlderCheckpoint(net, *optimizer, c.dir() + "/ckpt-5.pt");
  }
  torch::manual_seed(2);
  TinyNet other;
  auto other_optimizer = MakeSgd(other);
  GiveOwnStatistics(other, 10 + Rank());
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(c, false, torch::kCPU, other, *other_optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(*resumed);
  EXPECT_EQ(position.global_step, 5);
  EXPECT_EQ(position.samples_in_epoch, 3 * 4 * Size());
  // Without per-rank statistics every rank takes the model's, which are rank 0's here.
  EXPECT_TRUE(torch::equal(other.bn()->running_mean, torch::full({2}, 0.5))) << "rank " << Rank();
  for (const auto& item : net.named_parameters()) {
    EXPECT_TRUE(torch::equal(other.named_parameters()[item.key()], item.value())) << item.key();
  }
}

TEST(CheckpointTest, KeepsTheNewestAndResumesFromIt) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("keep"), 2);
  for (int64_t step : {4, 8, 12})
    ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(step)).ok());
  if (Rank() == 0) {
    EXPECT_FALSE(Exists(c.dir() + "/ckpt-4.pt"));
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-8.pt"));
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-12.pt"));
  }
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, net, *optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(position.global_step, 12);
}

TEST(CheckpointTest, NoCheckpointResumesNothing) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  TrainingPosition position = SomePosition(3);
  auto resumed = ResumeFromNewestCheckpoint(InDir(TestDir("none"), 2), false, torch::kCPU, net,
                                            *optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_FALSE(*resumed);
  EXPECT_EQ(EncodePosition(position), EncodePosition(SomePosition(3)));
}

TEST(CheckpointTest, FreshMovesTheCheckpointsAsideAndResumesNothing) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("fresh"), 2);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(6)).ok());
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, true, torch::kCPU, net, *optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_FALSE(*resumed);
  if (Rank() == 0) {
    EXPECT_FALSE(Exists(c.dir() + "/ckpt-6.pt"));
  }
}

// A restarted job runs the same command, --fresh included: its first start sets the old
// checkpoints aside, its later starts resume what it wrote since. Another job sets them aside
// again; without a job id (started by hand) every start does.
TEST(CheckpointTest, FreshAppliesOncePerJob) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("fresh_once"), 2);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(6)).ok());
  TrainingPosition position;
  auto first =
      ResumeFromNewestCheckpoint(c, true, torch::kCPU, net, *optimizer, &position, {}, "job-1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(*first);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(8)).ok());
  auto restart =
      ResumeFromNewestCheckpoint(c, true, torch::kCPU, net, *optimizer, &position, {}, "job-1");
  ASSERT_TRUE(restart.ok()) << restart.status();
  EXPECT_TRUE(*restart);
  EXPECT_EQ(EncodePosition(position), EncodePosition(SomePosition(8)));
  auto other =
      ResumeFromNewestCheckpoint(c, true, torch::kCPU, net, *optimizer, &position, {}, "job-2");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(*other);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(9)).ok());
  auto by_hand = ResumeFromNewestCheckpoint(c, true, torch::kCPU, net, *optimizer, &position);
  ASSERT_TRUE(by_hand.ok()) << by_hand.status();
  EXPECT_FALSE(*by_hand);
  if (Rank() == 0) {
    // Three moves within seconds, each into a directory of its own: nothing replaced another.
    int moved = 0;
    std::vector<std::string> dirs;
    DIR* d = opendir(c.dir().c_str());
    ASSERT_NE(d, nullptr);
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("replaced-", 0) == 0) dirs.push_back(c.dir() + "/" + name);
    }
    closedir(d);
    EXPECT_EQ(dirs.size(), 3u);
    for (const std::string& dir : dirs) {
      for (int step : {6, 8, 9}) moved += Exists(dir + "/ckpt-" + std::to_string(step) + ".pt");
    }
    EXPECT_EQ(moved, 3);
  }
}

TEST(CheckpointTest, ADamagedOnlyCheckpointFailsEveryRankAndIsKept) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("damaged"), 2);
  if (Rank() == 0) {
    ASSERT_EQ(mkdir(c.dir().c_str(), 0755), 0);
    std::ofstream(c.dir() + "/ckpt-3.pt") << "not an archive";
  }
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, net, *optimizer, &position);
  ASSERT_FALSE(resumed.ok());
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kDataLoss);
  // Every rank names the file: the others carry rank 0's message.
  const std::string want =
      absl::StrCat(Rank0Prefix(), "no checkpoint in ", c.dir(),
                   " loads (each was moved aside as .corrupt); the newest: checkpoint ", c.dir(),
                   "/ckpt-3.pt cannot be loaded");
  EXPECT_TRUE(absl::StrContains(resumed.status().message(), want)) << resumed.status();
  if (Rank() == 0) {
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-3.pt.corrupt"));
  }
}

// A TorchScript file planted as the newest checkpoint, whose __setstate__ would run inside rank 0
// while it loads (and, raising, ended the process with std::terminate on every restart): it is
// refused unloaded, set aside, and the run resumes from the checkpoint it wrote.
TEST(CheckpointTest, APlantedFileWithCodeIsSetAsideWithoutRunningIt) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  TrainOneStep(net, *optimizer);
  const CheckpointConfig c = InDir(TestDir("planted"), 2);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(3)).ok());
  const std::string planted = c.dir() + "/ckpt-999999999.pt";
  if (Rank() == 0) {
    torch::jit::Module m("__torch__.Planted");
    m.register_attribute("w", c10::TensorType::get(), torch::zeros({1}));
    m.define(R"(
def __getstate__(self) -> Tensor:
    return self.w
def __setstate__(self, state: Tensor) -> None:
    self.w = state
    assert False, "code from the checkpoint ran"
)");
    m.save(planted);
  }
  TinyNet again;
  auto again_optimizer = MakeSgd(again);
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(c, false, torch::kCPU, again, *again_optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(*resumed);
  EXPECT_EQ(EncodePosition(position), EncodePosition(SomePosition(3)));
  if (Rank() == 0) {
    EXPECT_FALSE(Exists(planted));
    EXPECT_TRUE(Exists(planted + ".corrupt"));
    const absl::Status refused = LoadCheckpointModel(planted + ".corrupt", torch::kCPU, again);
    EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), "it holds TorchScript code (code/__torch__"))
        << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), "def __getstate__")) << refused;
  }
}

// A file that cannot be read (here a directory in its place; elsewhere EACCES, EIO, a full
// memory) is not proven damaged: the run fails naming it, and it stays where it was. Before, every
// such error set every checkpoint aside as .corrupt, and the next attempt started over.
TEST(CheckpointTest, ACheckpointThatCannotBeReadFailsTheRunAndIsLeftInPlace) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("unreadable"), 2);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(2)).ok());
  if (Rank() == 0) {
    ASSERT_EQ(mkdir((c.dir() + "/ckpt-7.pt").c_str(), 0755), 0);
  }
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, net, *optimizer, &position);
  ASSERT_FALSE(resumed.ok());
  EXPECT_NE(resumed.status().code(), absl::StatusCode::kDataLoss) << resumed.status();
  EXPECT_TRUE(absl::StrContains(resumed.status().message(), c.dir() + "/ckpt-7.pt"))
      << resumed.status();
  if (Rank() == 0) {
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-7.pt"));
    EXPECT_FALSE(Exists(c.dir() + "/ckpt-7.pt.corrupt"));
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-2.pt"));
  }
}

// A whole checkpoint in a file format newer than this LibTorch reads (one written by a newer torch)
// is not damaged: the run stops naming it, and the file stays. Here the run's own checkpoint,
// copied record by record into an archive that declares format version 99.
TEST(CheckpointTest, ACheckpointOfANewerFormatStopsTheRunAndIsLeftInPlace) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("newer_format"), 2);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(5)).ok());
  const std::string path = c.dir() + "/ckpt-5.pt";
  if (Rank() == 0) {
    caffe2::serialize::PyTorchStreamReader reader(path);
    {
      caffe2::serialize::PyTorchStreamWriter writer(path + ".newer");
      writer.setMinVersion(99);
      for (const std::string& name : reader.getAllRecords()) {
        if (name == "version" || name == ".data/version") continue;
        auto [data, size] = reader.getRecord(name);
        writer.writeRecord(name, data.get(), size);
      }
      writer.writeEndOfFile();
    }
    ASSERT_EQ(rename((path + ".newer").c_str(), path.c_str()), 0);
  }
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, net, *optimizer, &position);
  ASSERT_FALSE(resumed.ok());
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kFailedPrecondition) << resumed.status();
  EXPECT_TRUE(
      absl::StrContains(resumed.status().message(), path + " was written by another torch version"))
      << resumed.status();
  if (Rank() == 0) {
    EXPECT_TRUE(Exists(path));
    EXPECT_FALSE(Exists(path + ".corrupt"));
  }
}

// Every checkpoint was set aside as damaged in an earlier attempt: the next one must not quietly
// train from step 0. --fresh does start over, moving the damaged files aside with the rest.
TEST(CheckpointTest, OnlyDamagedCheckpointsLeftRefuseToStartOverUnlessFresh) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("only_damaged"), 2);
  if (Rank() == 0) {
    ASSERT_EQ(mkdir(c.dir().c_str(), 0755), 0);
    std::ofstream(c.dir() + "/ckpt-3.pt") << "not an archive";
  }
  TrainingPosition position;
  ASSERT_EQ(
      ResumeFromNewestCheckpoint(c, false, torch::kCPU, net, *optimizer, &position).status().code(),
      absl::StatusCode::kDataLoss);
  auto again = ResumeFromNewestCheckpoint(c, false, torch::kCPU, net, *optimizer, &position);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
  EXPECT_TRUE(absl::StrContains(
      again.status().message(),
      absl::StrCat("only 1 set aside as damaged (", c.dir(), "/ckpt-3.pt.corrupt)")))
      << again.status();
  auto fresh = ResumeFromNewestCheckpoint(c, true, torch::kCPU, net, *optimizer, &position);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE(*fresh);
  if (Rank() == 0) {
    EXPECT_FALSE(Exists(c.dir() + "/ckpt-3.pt.corrupt"));
  }
}

// A corrupt newest checkpoint (a disk that filled, a copy cut short) once stopped every restart:
// --max-restarts burnt its attempts on the same file. The next older one is taken, the bad one
// kept beside it under another name.
TEST(CheckpointTest, ACorruptNewestCheckpointFallsBackToTheNextOlder) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  TrainOneStep(net, *optimizer);
  const CheckpointConfig c = InDir(TestDir("fallback"), 3);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(8)).ok());
  const auto at_8 = net.named_parameters();
  std::vector<torch::Tensor> want;
  for (const auto& item : at_8) want.push_back(item.value().clone());
  TrainOneStep(net, *optimizer);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(12)).ok());
  if (Rank() == 0) {
    const std::string newest = c.dir() + "/ckpt-12.pt";
    struct stat st;
    ASSERT_EQ(stat(newest.c_str(), &st), 0);
    ASSERT_EQ(truncate(newest.c_str(), st.st_size / 2), 0);
  }
  torch::manual_seed(2);
  TinyNet other;
  auto other_optimizer = MakeSgd(other);
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(c, false, torch::kCPU, other, *other_optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(*resumed);
  EXPECT_EQ(position.global_step, 8);
  size_t i = 0;
  for (const auto& item : other.named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), want[i++])) << item.key();
  }
  if (Rank() == 0) {
    EXPECT_FALSE(Exists(c.dir() + "/ckpt-12.pt"));
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-12.pt.corrupt"));
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-8.pt"));
  }
}

// LibTorch's load resizes parameters in place: a checkpoint of another model loaded "fine" and
// failed far away. It is refused before anything is loaded, naming the first differing tensor.
TEST(CheckpointTest, ACheckpointOfAnotherModelIsRefusedNamingTheTensor) {
  torch::manual_seed(1);
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("other_model"), 2);
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(4)).ok());
  TinyNet wider(5);
  auto wider_optimizer = MakeSgd(wider);
  const torch::Tensor before = wider.named_parameters()["fc.weight"].clone();
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(c, false, torch::kCPU, wider, *wider_optimizer, &position);
  ASSERT_FALSE(resumed.ok());
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(resumed.status().message(),
                                absl::StrCat(Rank0Prefix(), "checkpoint ", c.dir(),
                                             "/ckpt-4.pt was written for another model")))
      << resumed.status();
  if (Rank() == 0) {
    EXPECT_TRUE(absl::StrContains(resumed.status().message(),
                                  absl::StrCat("checkpoint ", c.dir(),
                                               "/ckpt-4.pt was written for another model: its "
                                               "tensor 1 is 'fc.weight Float [2, 3]', this "
                                               "model's 'fc.weight Float [2, 5]'")))
        << resumed.status();
    // Nothing was loaded, and the checkpoint is where it was.
    EXPECT_TRUE(torch::equal(wider.named_parameters()["fc.weight"], before));
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-4.pt"));
    EXPECT_EQ(LoadCheckpointModel(c.dir() + "/ckpt-4.pt", torch::kCPU, wider).code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

// Checkpoints written before the fingerprint was stored have their model archive's shapes checked.
TEST(CheckpointTest, AnOlderCheckpointOfAnotherModelIsRefusedToo) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("older_other"), 2);
  if (Rank() == 0) {
    WriteOlderCheckpoint(net, *optimizer, c.dir() + "/ckpt-5.pt");
  }
  TinyNet wider(5);
  auto wider_optimizer = MakeSgd(wider);
  TrainingPosition position;
  auto resumed =
      ResumeFromNewestCheckpoint(c, false, torch::kCPU, wider, *wider_optimizer, &position);
  ASSERT_FALSE(resumed.ok());
  if (Rank() == 0) {
    EXPECT_TRUE(absl::StrContains(resumed.status().message(),
                                  "was written for another model: parameter fc.weight is [2, 3] "
                                  "there, [2, 5] here"))
        << resumed.status();
  }
}

// A model that is not TorchScript exports its state dict alone; a scripted one's module would go
// beside it, at ScriptedExportPath (the export tests in tests/train run both through the trainer).
TEST(CheckpointTest, ExportModelWritesTheStateDictOfAModelThatIsNotScripted) {
  EXPECT_EQ(ScriptedExportPath("/x/model.pt"), "/x/model.scripted.pt");
  EXPECT_EQ(ScriptedExportPath("/x/model"), "/x/model.scripted.pt");
  if (Rank() != 0) return;
  TinyNet net;
  const std::string path = TestDir("export-plain.pt");
  const absl::StatusOr<std::string> written = ExportModel(net, path);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, path);
  EXPECT_TRUE(Exists(path));
  EXPECT_FALSE(Exists(ScriptedExportPath(path)));
}

// An export into a folder that does not exist yet makes it; one that cannot be made is named.
TEST(CheckpointTest, ExportMakesItsFolder) {
  if (Rank() != 0) return;
  TinyNet net;
  const std::string path = TestDir("export-new/sub") + "/model.pt";
  ASSERT_TRUE(ExportModel(net, path).ok());
  EXPECT_TRUE(Exists(path));
  const absl::Status refused = PrepareExportPath("/proc/hvx-no-such/model.pt");
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.message(), "/proc/hvx-no-such")) << refused;
  EXPECT_TRUE(PrepareExportPath("model.pt").ok());  // the working directory
}

// A write that fails leaves no temporary, and what a killed writer left is removed at resume once
// it is 10 minutes old; a younger one may be another writer's in progress and stays.
TEST(CheckpointTest, NoTemporaryIsLeftBehind) {
  TinyNet net;
  auto optimizer = MakeSgd(net);
  const CheckpointConfig c = InDir(TestDir("temporaries"), 2);
  auto temporaries = [&] {
    int n = 0;
    DIR* d = opendir(c.dir().c_str());
    if (d == nullptr) return n;
    while (dirent* e = readdir(d)) n += absl::StrContains(e->d_name, ".tmp.") ? 1 : 0;
    closedir(d);
    return n;
  };
  if (Rank() == 0) {
    // A directory where the checkpoint should go: the rename fails.
    ASSERT_EQ(mkdir(c.dir().c_str(), 0755), 0);
    ASSERT_EQ(mkdir((c.dir() + "/ckpt-6.pt").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((c.dir() + "/ckpt-6.pt/in_the_way").c_str(), 0755), 0);
  }
  const absl::Status s = SaveCheckpoint(c, net, *optimizer, SomePosition(6));
  // Every rank fails with rank 0's reason.
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(c.dir() + "/ckpt-6.pt"), std::string::npos) << s;
  if (Rank() != 0) EXPECT_EQ(s.message().rfind(Rank0Prefix(), 0), 0u) << s;
  if (Rank() == 0) {
    EXPECT_EQ(temporaries(), 0);
    ASSERT_EQ(rmdir((c.dir() + "/ckpt-6.pt/in_the_way").c_str()), 0);
    ASSERT_EQ(rmdir((c.dir() + "/ckpt-6.pt").c_str()), 0);
    std::ofstream(c.dir() + "/ckpt-9.pt.tmp.123.0123456789abcdef") << "a killed writer's";
    const struct timeval eleven_minutes_ago[2] = {{time(nullptr) - 660, 0},
                                                  {time(nullptr) - 660, 0}};
    ASSERT_EQ(utimes((c.dir() + "/ckpt-9.pt.tmp.123.0123456789abcdef").c_str(), eleven_minutes_ago),
              0);
    // Written to a moment ago: perhaps another writer's in progress, which the sweep left alone
    // (it removed any, and that writer's rename failed).
    std::ofstream(c.dir() + "/ckpt-10.pt.tmp.456.0123456789abcdef") << "a writer's in progress";
    std::ofstream(c.dir() + "/notes.tmp.txt") << "not ours";
  }
  ASSERT_TRUE(SaveCheckpoint(c, net, *optimizer, SomePosition(8)).ok());
  TrainingPosition position;
  auto resumed = ResumeFromNewestCheckpoint(c, false, torch::kCPU, net, *optimizer, &position);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(position.global_step, 8);
  if (Rank() == 0) {
    EXPECT_EQ(temporaries(), 2);  // notes.tmp.txt and the one in progress stay
    EXPECT_TRUE(Exists(c.dir() + "/notes.tmp.txt"));
    EXPECT_TRUE(Exists(c.dir() + "/ckpt-10.pt.tmp.456.0123456789abcdef"));
    EXPECT_FALSE(Exists(c.dir() + "/ckpt-9.pt.tmp.123.0123456789abcdef"));
  }
}

}  // namespace
}  // namespace train
}  // namespace hvx
