#include "hvx/train/recipes.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>

namespace hvx {
namespace train {
namespace {

OptimizerConfig Config(OptimizerConfig::Kind kind, double lr, double weight_decay) {
  OptimizerConfig o;
  o.set_kind(kind);
  o.set_lr(lr);
  o.set_weight_decay(weight_decay);
  o.set_beta1(0.9);
  o.set_beta2(0.999);
  o.set_eps(1e-8);
  return o;
}

// One parameter, for driving optimizers by hand.
struct OneParam : torch::nn::Module {
  explicit OneParam(at::Tensor init) { w = register_parameter("w", init); }
  at::Tensor w;
};

TEST(LambTest, FollowsTheLayerwiseTrustRatioFormula) {
  auto model = std::make_shared<OneParam>(torch::tensor({3.0, -4.0, 1.0}, torch::kDouble));
  auto opt = MakeOptimizer(Config(OptimizerConfig::LAMB, 0.1, 0.01), *model);
  ASSERT_TRUE(opt.ok()) << opt.status();
  at::Tensor w = model->w.detach().clone(), m = torch::zeros_like(w), v = torch::zeros_like(w);
  const std::vector<at::Tensor> grads = {torch::tensor({0.5, 0.1, -2.0}, torch::kDouble),
                                         torch::tensor({-1.0, 0.3, 0.2}, torch::kDouble)};
  for (int t = 1; t <= 2; ++t) {
    model->w.mutable_grad() = grads[t - 1].clone();
    (*opt)->step();
    m = 0.9 * m + 0.1 * grads[t - 1];
    v = 0.999 * v + 0.001 * grads[t - 1] * grads[t - 1];
    at::Tensor r =
        (m / (1 - std::pow(0.9, t))) / ((v / (1 - std::pow(0.999, t))).sqrt() + 1e-8) + 0.01 * w;
    w = w - 0.1 * (w.norm() / r.norm()) * r;
    EXPECT_TRUE(torch::allclose(model->w.detach(), w, 1e-12, 1e-12))
        << "step " << t << ": " << model->w << " vs " << w;
  }
}

TEST(LambTest, StepGrowsWithTheParameterNormUnlikeAdamW) {
  // Same gradient, parameters 10x apart: LAMB's step is 10x larger, AdamW's is the same.
  auto step_size = [](OptimizerConfig::Kind kind, double scale) {
    auto model = std::make_shared<OneParam>(torch::tensor({1.0, 2.0}, torch::kDouble) * scale);
    auto opt = *MakeOptimizer(Config(kind, 0.01, 0.0), *model);
    const at::Tensor before = model->w.detach().clone();
    model->w.mutable_grad() = torch::tensor({0.3, -0.7}, torch::kDouble);
    opt->step();
    return (model->w.detach() - before).norm().item<double>();
  };
  EXPECT_NEAR(step_size(OptimizerConfig::LAMB, 10) / step_size(OptimizerConfig::LAMB, 1), 10, 1e-9);
  EXPECT_NEAR(step_size(OptimizerConfig::ADAMW, 10) / step_size(OptimizerConfig::ADAMW, 1), 1,
              1e-9);
}

TEST(LambTest, StateSavesAndLoadsLikeAdamW) {
  auto run = [](bool reload) {
    auto model = std::make_shared<OneParam>(torch::tensor({1.0, -2.0, 0.5}, torch::kDouble));
    auto opt = *MakeOptimizer(Config(OptimizerConfig::LAMB, 0.05, 0.1), *model);
    for (int t = 0; t < 4; ++t) {
      if (t == 2 && reload) {
        torch::serialize::OutputArchive out;
        opt->save(out);
        std::ostringstream bytes;
        out.save_to(bytes);
        opt = *MakeOptimizer(Config(OptimizerConfig::LAMB, 0.05, 0.1), *model);
        torch::serialize::InputArchive in;
        std::istringstream read(bytes.str());
        in.load_from(read);
        opt->load(in);
      }
      model->w.mutable_grad() = torch::tensor({0.1, 0.2, -0.3}, torch::kDouble) * (t + 1);
      opt->step();
    }
    return model->w.detach().clone();
  };
  EXPECT_TRUE(torch::equal(run(false), run(true)));
}

struct LinearAndNorm : torch::nn::Module {
  LinearAndNorm() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({2})));
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};

TEST(MakeOptimizerTest, BiasesAndNormsSkipWeightDecayWhenAsked) {
  for (const bool exclude : {false, true}) {
    for (const auto kind : {OptimizerConfig::SGD, OptimizerConfig::ADAMW, OptimizerConfig::LAMB}) {
      auto model = std::make_shared<LinearAndNorm>();
      OptimizerConfig o = Config(kind, 0.1, 0.5);
      o.set_no_decay_on_bias_and_norm(exclude);
      auto opt = *MakeOptimizer(o, *model);
      EXPECT_EQ(opt->param_groups().size(), exclude ? 2u : 1u);
      std::map<std::string, at::Tensor> before;
      for (const auto& p : model->named_parameters()) {
        before[p.key()] = p.value().detach().clone();
        p.value().mutable_grad() = torch::zeros_like(p.value());
      }
      {
        torch::NoGradGuard no_grad;
        model->norm->weight.fill_(2.0);  // away from zero, so decay would show
        model->norm->bias.fill_(1.0);
        model->fc->bias.fill_(1.0);
        before["norm.weight"] = model->norm->weight.detach().clone();
        before["norm.bias"] = model->norm->bias.detach().clone();
        before["fc.bias"] = model->fc->bias.detach().clone();
      }
      opt->step();  // zero gradients: only weight decay moves anything
      for (const auto& p : model->named_parameters()) {
        const bool moved = !torch::equal(p.value().detach(), before[p.key()]);
        const bool should_move = !(exclude && p.key() != "fc.weight");
        EXPECT_EQ(moved, should_move) << p.key() << " exclude=" << exclude << " kind=" << kind;
      }
    }
  }
}

TEST(MakeOptimizerTest, NamesBiasesAndNorms) {
  EXPECT_TRUE(IsBiasOrNorm("features.1.weight", 1));
  EXPECT_TRUE(IsBiasOrNorm("fc.bias", 1));
  EXPECT_TRUE(IsBiasOrNorm("bias", 2));
  EXPECT_FALSE(IsBiasOrNorm("fc.weight", 2));
  EXPECT_FALSE(IsBiasOrNorm("conv.weight", 4));
}

TEST(MicroBatchesTest, SplitsRowsAsEvenlyAsTheyGo) {
  using Parts = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(MicroBatches(10, 3), (Parts{{0, 4}, {4, 3}, {7, 3}}));
  EXPECT_EQ(MicroBatches(12, 1), (Parts{{0, 12}}));
  EXPECT_EQ(MicroBatches(2, 4), (Parts{{0, 1}, {1, 1}}));  // no more passes than rows
}

TEST(ClipGradientsTest, BoundsTheGlobalNormAndReportsItBefore) {
  auto model = std::make_shared<LinearAndNorm>();
  auto params = model->parameters();
  params[0].mutable_grad() = torch::full_like(params[0], 1.0);  // 6 entries
  params[1].mutable_grad() = torch::full_like(params[1], 1.0);  // 2 entries; norm sqrt(8)
  const double norm = ClipGradients(*model, 1.0);
  EXPECT_NEAR(norm, std::sqrt(8.0), 1e-6);
  double after = 0;
  for (const auto& p : params) {
    if (p.grad().defined()) after += p.grad().pow(2).sum().item<double>();
  }
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-5);
  // Below the bound, or with no bound: measured, untouched.
  EXPECT_NEAR(ClipGradients(*model, 10.0), 1.0, 1e-5);
  EXPECT_NEAR(ClipGradients(*model, 0.0), 1.0, 1e-5);
  EXPECT_TRUE(torch::allclose(params[0].grad(), torch::full_like(params[0], 1.0 / std::sqrt(8.0)),
                              1e-5, 1e-6));
}

TEST(TrainingLossTest, LabelSmoothingMixesInTheMeanOverClasses) {
  const at::Tensor logits = torch::tensor({{2.0, 0.5, -1.0}, {0.1, 0.2, 3.0}});
  const at::Tensor labels = torch::tensor({0, 1}, torch::kInt64);
  const at::Tensor logp = torch::log_softmax(logits, 1);
  const double nll =
      -(logp[0][0].item<double>() + logp[1][1].item<double>()) / 2;  // plain cross-entropy
  const double uniform = -logp.mean(1).mean().item<double>();
  EXPECT_NEAR(TrainingLoss(logits, labels, 0).item<double>(), nll, 1e-6);
  EXPECT_NEAR(TrainingLoss(logits, labels, 0.2).item<double>(), 0.8 * nll + 0.2 * uniform, 1e-6);
}

TEST(CountTopKTest, CountsLabelsAmongTheLargestLogits) {
  const at::Tensor logits = torch::tensor({{5.0, 4.0, 3.0, 2.0, 1.0, 0.0},
                                           {0.0, 1.0, 2.0, 3.0, 4.0, 5.0},
                                           {5.0, 4.0, 3.0, -1.0, 2.0, 1.0}});
  const at::Tensor labels = torch::tensor({4, 5, 3}, torch::kInt64);
  EXPECT_EQ(CountTopK(logits, labels, 1), 1);  // row 1
  EXPECT_EQ(CountTopK(logits, labels, 5), 2);  // rows 0 and 1; row 2's label is the smallest
  EXPECT_EQ(CountTopK(logits, labels, 6), 3);
  EXPECT_EQ(CountTopK(logits, labels, 100), 3);  // k past the classes: every row
}

TEST(WeightAverageTest, AveragesWithWarmupAndSwapsBack) {
  auto model = std::make_shared<OneParam>(torch::tensor({1.0, 1.0}, torch::kDouble));
  WeightAverage ema(*model, 0.5);
  double expected = 1.0;
  for (int step = 1; step <= 3; ++step) {
    {
      torch::NoGradGuard no_grad;
      model->w.add_(1.0);  // live weight = step + 1
    }
    ema.Update(step);
    const double d = std::min(0.5, (1.0 + step) / (10.0 + step));
    expected = d * expected + (1 - d) * (step + 1);
  }
  ASSERT_EQ(ema.averages().size(), 1u);
  EXPECT_EQ(ema.averages()[0].first, "w");
  EXPECT_NEAR(ema.averages()[0].second[0].item<double>(), expected, 1e-12);
  {
    UseAveragedWeights use(&ema);
    EXPECT_NEAR(model->w[1].item<double>(), expected, 1e-12);
  }
  EXPECT_EQ(model->w[1].item<double>(), 4.0);
}

TEST(AutocastGuardTest, Bf16OnCpuWhileAliveNestedAndRestored) {
  torch::nn::Linear fc(4, 3);
  const at::Tensor x = torch::randn({2, 4});
  EXPECT_EQ(fc(x).scalar_type(), at::kFloat);
  {
    AutocastGuard outer(c10::DeviceType::CPU, at::kBFloat16);
    EXPECT_EQ(fc(x).scalar_type(), at::kBFloat16);
    {
      AutocastGuard inner(c10::DeviceType::CPU, at::kBFloat16);
      EXPECT_EQ(fc(x).scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(fc(x).scalar_type(), at::kBFloat16);  // the outer guard still holds
  }
  EXPECT_EQ(fc(x).scalar_type(), at::kFloat);
  {
    AutocastGuard fp32(c10::DeviceType::CPU, at::kFloat);
    EXPECT_EQ(fc(x).scalar_type(), at::kFloat);
  }
}

TEST(LossScalerTest, UnscalesSkipsOnOverflowAndGrows) {
  auto model = std::make_shared<OneParam>(torch::tensor({1.0f, 2.0f}));
  LossScaler scaler(8.0, /*growth_interval=*/2);
  model->w.mutable_grad() = torch::tensor({8.0f, -16.0f});
  EXPECT_TRUE(scaler.UnscaleOrSkip(*model));
  EXPECT_TRUE(torch::equal(model->w.grad(), torch::tensor({1.0f, -2.0f})));
  EXPECT_EQ(scaler.scale(), 8.0);
  model->w.mutable_grad() = torch::tensor({std::numeric_limits<float>::infinity(), 1.0f});
  EXPECT_FALSE(scaler.UnscaleOrSkip(*model));
  EXPECT_EQ(scaler.scale(), 4.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  model->w.mutable_grad() = torch::tensor({std::nanf(""), 1.0f});
  EXPECT_FALSE(scaler.UnscaleOrSkip(*model));
  EXPECT_EQ(scaler.scale(), 2.0);
  for (int i = 0; i < 2; ++i) {
    model->w.mutable_grad() = torch::tensor({2.0f, 2.0f});
    EXPECT_TRUE(scaler.UnscaleOrSkip(*model));
  }
  EXPECT_EQ(scaler.scale(), 4.0);  // 2 good steps in a row: doubled
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.state()[0].first, "loss_scale");
  EXPECT_TRUE(
      torch::equal(scaler.state()[0].second, torch::tensor({4.0, 0.0, 2.0}, torch::kFloat64)));
}

}  // namespace
}  // namespace train
}  // namespace hvx
