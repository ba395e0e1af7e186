// Runs on several ranks (hvx_mpi_test): every test case executes on each rank at once.
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/torch/distributed_optimizer.h"
#include "hvx/torch/tensor.h"

namespace hvx {
namespace {

// Two layers plus a branch that only some ranks use.
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 3));
    fc2 = register_module("fc2", torch::nn::Linear(3, 2));
    side = register_module("side", torch::nn::Linear(4, 2));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_side) {
    torch::Tensor y = fc2(torch::tanh(fc1(x)));
    return use_side ? y + side(x) : y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, side{nullptr};
};

torch::Tensor InputFor(int rank) {
  return torch::arange(8, torch::kFloat32).reshape({2, 4}) * (rank + 1) / 10.0;
}

// Rows = every rank's flattened parameters; equal rows mean equal models.
torch::Tensor GatherParams(const torch::nn::Module& m, const std::string& name) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : m.parameters()) flat.push_back(p.detach().reshape({-1}));
  auto all = Allgather(name, torch::cat(flat).unsqueeze(0));
  EXPECT_TRUE(all.ok()) << all.status();
  return *all;
}

void ExpectRowsEqual(const torch::Tensor& rows) {
  for (int64_t r = 1; r < rows.size(0); ++r)
    EXPECT_TRUE(torch::equal(rows[0], rows[r])) << "rank " << r;
}

// The average over ranks of each parameter's gradient, computed locally from every rank's input.
std::vector<torch::Tensor> ExpectedAverage(Net& net, bool (*uses_side)(int), int passes = 1) {
  std::vector<torch::Tensor> sum;
  for (int r = 0; r < Size(); ++r) {
    net.zero_grad();
    for (int i = 0; i < passes; ++i) net.forward(InputFor(r), uses_side(r)).pow(2).sum().backward();
    int k = 0;
    for (const auto& p : net.parameters()) {
      torch::Tensor g = p.grad().defined() ? p.grad().clone() : torch::zeros_like(p);
      if (r == 0)
        sum.push_back(g);
      else
        sum[k] += g;
      ++k;
    }
  }
  for (auto& s : sum) s /= Size();
  net.zero_grad();
  return sum;
}

bool AllUseSide(int) { return true; }
bool OddUseSide(int r) { return r % 2 == 1; }

std::shared_ptr<Net> SameNetEverywhere(int seed) {
  torch::manual_seed(seed + Rank());  // different on purpose: the broadcast must fix it
  auto net = std::make_shared<Net>();
  EXPECT_TRUE(BroadcastParameters(*net, 0).ok());
  return net;
}

TEST(TorchTest, BroadcastParametersMakesEveryRankEqualToRoot) {
  torch::manual_seed(100 + Rank());
  Net net;
  torch::Tensor before = GatherParams(net, "bp.before");
  EXPECT_FALSE(torch::equal(before[0], before[Size() - 1]));
  const int root = Size() - 1;
  ASSERT_TRUE(BroadcastParameters(net, root).ok());
  torch::Tensor after = GatherParams(net, "bp.after");
  ExpectRowsEqual(after);
  EXPECT_TRUE(torch::equal(after[0], before[root]));
}

// Channels-last weights on some ranks and not others: the values still come from the root, each
// rank keeping its own layout.
TEST(TorchTest, BroadcastTensorsCarriesValuesAcrossMemoryLayouts) {
  torch::manual_seed(200 + Rank());
  at::Tensor w = torch::randn({4, 3, 3, 3});
  const at::Tensor root_value = w.clone();
  if (Rank() % 2 == 1) w = w.contiguous(at::MemoryFormat::ChannelsLast);
  ASSERT_TRUE(BroadcastTensors({{"w", w}}, 0, "layouts.").ok());
  EXPECT_EQ(w.is_contiguous(at::MemoryFormat::ChannelsLast), Rank() % 2 == 1);
  at::Tensor all = *Allgather("layouts.check", w.contiguous().reshape({1, -1}));
  ExpectRowsEqual(all);
  if (Rank() == 0) {
    EXPECT_TRUE(torch::equal(all[0].view_as(w), root_value));
  }
}

TEST(TorchTest, GradientsAfterSynchronizeAreTheAverageOverRanks) {
  auto net = SameNetEverywhere(1);
  const auto expected = ExpectedAverage(*net, AllUseSide);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  auto opt = DistributedOptimizer::Create(sgd, net->named_parameters(), {});
  ASSERT_TRUE(opt.ok()) << opt.status();
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE((*opt)->ZeroGrad().ok());
    net->forward(InputFor(Rank()), true).pow(2).sum().backward();
    if (step == 0) {
      ASSERT_TRUE((*opt)->Synchronize().ok());
      int k = 0;
      for (const auto& p : net->parameters()) {
        EXPECT_TRUE(torch::allclose(p.grad(), expected[k], 1e-5, 1e-6)) << p.grad() << expected[k];
        ++k;
      }
      ASSERT_TRUE((*opt)->Step(/*synchronize=*/false).ok());
    } else {
      ASSERT_TRUE((*opt)->Step().ok());
    }
  }
  ExpectRowsEqual(GatherParams(*net, "avg.after"));
}

TEST(TorchTest, ParameterWithoutGradientOnSomeRanksDoesNotDeadlock) {
  auto net = SameNetEverywhere(2);
  const auto expected = ExpectedAverage(*net, OddUseSide);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  auto opt = DistributedOptimizer::Create(sgd, net->named_parameters(), {});
  ASSERT_TRUE(opt.ok());
  net->forward(InputFor(Rank()), OddUseSide(Rank())).pow(2).sum().backward();
  ASSERT_TRUE((*opt)->Synchronize().ok());
  int k = 0;
  for (const auto& p : net->parameters()) {
    EXPECT_TRUE(torch::allclose(p.grad(), expected[k], 1e-5, 1e-6)) << "parameter " << k;
    ++k;
  }
}

TEST(TorchTest, BackwardPassesPerStepAccumulatesAndRejectsExtraPasses) {
  auto net = SameNetEverywhere(3);
  const auto expected = ExpectedAverage(*net, AllUseSide, /*passes=*/2);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  DistributedOptimizerOptions options;
  options.backward_passes_per_step = 2;
  auto opt = DistributedOptimizer::Create(sgd, net->named_parameters(), options);
  ASSERT_TRUE(opt.ok());
  for (int i = 0; i < 2; ++i) net->forward(InputFor(Rank()), true).pow(2).sum().backward();
  ASSERT_TRUE((*opt)->Synchronize().ok());
  int k = 0;
  for (const auto& p : net->parameters()) {
    EXPECT_TRUE(torch::allclose(p.grad(), expected[k], 1e-5, 1e-6)) << "parameter " << k;
    ++k;
  }
  ASSERT_TRUE((*opt)->Step(false).ok());
  ASSERT_TRUE((*opt)->ZeroGrad().ok());
  for (int i = 0; i < 3; ++i) net->forward(InputFor(Rank()), true).pow(2).sum().backward();
  absl::Status status = (*opt)->Step();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("more than backward_passes_per_step (2)"), std::string::npos)
      << status;
}

TEST(TorchTest, PredivideAndCompressionKeepTheAverage) {
  struct Case {
    GradientCompression compression;
    double predivide;
    double tolerance;
  };
  for (const Case& c :
       {Case{GradientCompression::kNone, 4.0, 1e-5}, Case{GradientCompression::kFloat16, 1.0, 2e-3},
        Case{GradientCompression::kBfloat16, 2.0, 2e-2}}) {
    auto net = SameNetEverywhere(4);
    const auto expected = ExpectedAverage(*net, AllUseSide);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
    DistributedOptimizerOptions options;
    options.compression = c.compression;
    options.gradient_predivide_factor = c.predivide;
    auto opt = DistributedOptimizer::Create(sgd, net->named_parameters(), options);
    ASSERT_TRUE(opt.ok());
    net->forward(InputFor(Rank()), true).pow(2).sum().backward();
    ASSERT_TRUE((*opt)->Synchronize().ok());
    int k = 0;
    for (const auto& p : net->parameters()) {
      EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);
      EXPECT_TRUE(torch::allclose(p.grad(), expected[k], c.tolerance, c.tolerance))
          << "compression " << static_cast<int>(c.compression) << " parameter " << k;
      ++k;
    }
  }
}

TEST(TorchTest, BroadcastOptimizerStateCopiesMomentumAndAdamMoments) {
  auto net = SameNetEverywhere(5);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
  // Only the root steps, so only the root has state; each rank's gradient differs.
  if (Rank() == 0) {
    for (auto* opt : std::vector<torch::optim::Optimizer*>{&sgd, &adam}) {
      opt->zero_grad();
      net->forward(InputFor(7), true).pow(2).sum().backward();
      opt->step();
    }
  }
  ASSERT_TRUE(BroadcastParameters(*net, 0).ok());
  sgd.param_groups()[0].options().set_lr(Rank() == 0 ? 0.5 : 0.1);
  ASSERT_TRUE(BroadcastOptimizerState(sgd, 0).ok());
  ASSERT_TRUE(BroadcastOptimizerState(adam, 0).ok());
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options().get_lr(), 0.5);
  // Stepping with equal gradients must now give equal parameters everywhere.
  for (auto* opt : std::vector<torch::optim::Optimizer*>{&sgd, &adam}) {
    opt->zero_grad();
    net->forward(InputFor(0), true).pow(2).sum().backward();
    opt->step();
  }
  ExpectRowsEqual(GatherParams(*net, "optstate.after"));
  EXPECT_EQ(sgd.state().size(), net->parameters().size());
  EXPECT_EQ(adam.state().size(), net->parameters().size());
}

TEST(TorchTest, AllgatherConcatenatesRowsOfDifferentCounts) {
  torch::Tensor mine = torch::full({Rank() + 1, 2}, static_cast<float>(Rank()));
  auto all = Allgather("rows", mine);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(0), Size() * (Size() + 1) / 2);
  int64_t row = 0;
  for (int r = 0; r < Size(); ++r) {
    for (int i = 0; i <= r; ++i, ++row) EXPECT_EQ((*all)[row][1].item<float>(), r);
  }
}

TEST(TorchTest, MetricsAverageAndSum) {
  auto avg = AverageMetric(Rank(), "rank");
  ASSERT_TRUE(avg.ok());
  EXPECT_DOUBLE_EQ(*avg, (Size() - 1) / 2.0);
  auto sums = SumMetrics({1.0, static_cast<double>(Rank())}, "counts");
  ASSERT_TRUE(sums.ok());
  EXPECT_EQ(*sums, (std::vector<double>{static_cast<double>(Size()), Size() * (Size() - 1) / 2.0}));
}

TEST(TorchTest, NonContiguousTensorIsRejectedWithItsName) {
  torch::Tensor t = torch::zeros({3, 4}).t();
  auto ref = AsTensorRef(t, "grad.w");
  EXPECT_EQ(ref.status().message(), "grad.w: tensor is not contiguous; call .contiguous() first");
  EXPECT_EQ(ToDataType(torch::kComplexFloat).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hvx
