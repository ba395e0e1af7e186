// One step of every rank, as the trainer takes it (2 ranks): each rank's half of a batch, its
// gradients averaged over ranks in micro-batches or whole, replicated or sharded optimizer state,
// moves the model as one SGD step on the whole batch in one process does.
#include "hvx/train/train_step.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/train/config.h"
#include "hvx/train/recipes.h"

namespace hvx {
namespace train {
namespace {

constexpr double kLr = 0.1;
constexpr int kRowsPerRank = 4;

TrainConfig ConfigWith(const std::string& optimizer) {
  absl::StatusOr<TrainConfig> config = ParseTrainConfig(
      absl::StrCat("model { name: \"mlp\" num_classes: 10 }\n"
                   "data { batch_size: ",
                   kRowsPerRank, " }\noptimizer { kind: SGD lr: ", kLr, " ", optimizer, " }\n"),
      "train_step_test");
  EXPECT_TRUE(config.ok()) << config.status();
  FillDefaults(&*config);
  return *config;
}

// The same model on every rank and in the reference: made under one seed.
std::shared_ptr<Classifier> SeededModel() {
  torch::manual_seed(7);
  absl::StatusOr<std::shared_ptr<Classifier>> model = CreateModel(ConfigWith("").model());
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// The whole batch, the same on every rank: Size() x kRowsPerRank images and labels.
StepInputs WholeBatch() {
  torch::manual_seed(11);
  const int64_t rows = static_cast<int64_t>(Size()) * kRowsPerRank;
  return {torch::randn({rows, 1, 28, 28}), torch::randint(0, 10, {rows}, torch::kInt64)};
}

// The parameters after one plain SGD step on the whole batch's mean loss, in this process alone.
std::vector<torch::Tensor> ReferenceStep() {
  std::shared_ptr<Classifier> model = SeededModel();
  const StepInputs batch = WholeBatch();
  torch::nn::functional::cross_entropy(model->forward(batch.images), batch.labels).backward();
  std::vector<torch::Tensor> after;
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : model->parameters()) after.push_back(p - kLr * p.grad());
  return after;
}

// The seeded model's mean loss on `in`, before any step.
double ReferenceLoss(const StepInputs& in) {
  std::shared_ptr<Classifier> model = SeededModel();
  torch::NoGradGuard no_grad;
  return torch::nn::functional::cross_entropy(model->forward(in.images), in.labels).item<double>();
}

class TrainStepTest : public testing::TestWithParam<std::string> {};

TEST_P(TrainStepTest, EachRanksHalfMovesTheModelAsOneStepOnTheWholeBatch) {
  const TrainConfig config = ConfigWith(GetParam());
  const RunOptions options;
  train::Run run{config, options};
  run.model = SeededModel();
  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> optimizer =
      MakeOptimizer(config.optimizer(), *run.model);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  run.optimizer = std::move(*optimizer);
  ASSERT_TRUE(SetUpPrecision(config, &run).ok());
  absl::Status sync = SetUpGradientSync(&run);
  ASSERT_TRUE(sync.ok()) << sync;
  EXPECT_EQ(run.sharded != nullptr, config.optimizer().shard() != Sharding::NONE);

  const StepInputs whole = WholeBatch();
  const StepInputs mine = {whole.images.narrow(0, Rank() * kRowsPerRank, kRowsPerRank),
                           whole.labels.narrow(0, Rank() * kRowsPerRank, kRowsPerRank)};
  absl::StatusOr<StepOutcome> step = TrainStep(run, mine, /*global_step=*/0, kLr);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_FALSE(step->skipped);
  // The loss reported is this rank's mean over its rows.
  EXPECT_NEAR(step->loss, ReferenceLoss(mine), 1e-5);

  const std::vector<torch::Tensor> expected = ReferenceStep();
  const std::vector<torch::Tensor> params = run.model->parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i], expected[i], /*rtol=*/1e-4, /*atol=*/1e-6))
        << "parameter " << i << " on rank " << Rank() << " differs by "
        << (params[i] - expected[i]).abs().max().item<double>();
  }
}

const std::string kExchanges[] = {"", "backward_passes_per_step: 2", "shard: STATE",
                                  "shard: GRADIENTS backward_passes_per_step: 4"};
const char* const kExchangeNames[] = {"Replicated", "TwoMicroBatches", "ShardedState",
                                      "ShardedGradientsFourMicroBatches"};
std::string ExchangeName(const testing::TestParamInfo<std::string>& info) {
  return kExchangeNames[info.index];
}
INSTANTIATE_TEST_SUITE_P(Exchanges, TrainStepTest, testing::ValuesIn(kExchanges), ExchangeName);

}  // namespace
}  // namespace train
}  // namespace hvx
