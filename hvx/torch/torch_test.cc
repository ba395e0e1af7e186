// Runs on several ranks (hvx_mpi_test): every test case executes on each rank at once.
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/torch/distributed_optimizer.h"
#include "hvx/torch/gradient_sync.h"
#include "hvx/torch/optimizer_state.h"
#include "hvx/torch/sharded_optimizer.h"
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

// Two copies of one model, one with the replicated optimizer, one sharded, trained on the same
// batches: the sharded copy's parameters equal the replicated one's after every step (fc2's bias
// has 2 elements: at 3 ranks one rank's slice of it is empty), and so does its gathered state.
void CheckShardedEqualsReplicated(ShardStage stage, bool adam) {
  SCOPED_TRACE(absl::StrCat("stage ", static_cast<int>(stage), adam ? " Adam" : " SGD"));
  auto replicated_net = SameNetEverywhere(11);
  auto sharded_net = std::make_shared<Net>();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < sharded_net->parameters().size(); ++i)
      sharded_net->parameters()[i].copy_(replicated_net->parameters()[i]);
  }
  auto make = [adam](Net& net) -> std::unique_ptr<torch::optim::Optimizer> {
    if (adam) {
      return std::make_unique<torch::optim::Adam>(
          net.parameters(), torch::optim::AdamOptions(0.01).weight_decay(0.001));
    }
    return std::make_unique<torch::optim::SGD>(net.parameters(),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  auto replicated_opt = make(*replicated_net);
  auto sharded_opt = make(*sharded_net);
  auto distributed =
      DistributedOptimizer::Create(*replicated_opt, replicated_net->named_parameters(), {});
  ASSERT_TRUE(distributed.ok()) << distributed.status();
  ShardedOptimizerOptions options;
  options.stage = stage;
  auto sharded = ShardedOptimizer::Create(*sharded_opt, sharded_net->named_parameters(), options);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  for (int step = 0; step < 4; ++step) {
    // One after the other: both exchange gradients named "grad.<parameter>".
    const bool side = OddUseSide(Rank()) || step == 2;  // some ranks skip a branch
    ASSERT_TRUE((*distributed)->ZeroGrad().ok());
    replicated_net->forward(InputFor(Rank()) + step, side).pow(2).sum().backward();
    ASSERT_TRUE((*distributed)->Step().ok());
    ASSERT_TRUE((*sharded)->ZeroGrad().ok());
    sharded_net->forward(InputFor(Rank()) + step, side).pow(2).sum().backward();
    absl::Status stepped = (*sharded)->Step();
    ASSERT_TRUE(stepped.ok()) << stepped;
    for (size_t i = 0; i < sharded_net->parameters().size(); ++i) {
      EXPECT_TRUE(torch::equal(sharded_net->parameters()[i], replicated_net->parameters()[i]))
          << "step " << step << " parameter " << i;
    }
  }
  if (stage == ShardStage::kGradients) {
    for (const auto& p : sharded_net->parameters()) EXPECT_FALSE(p.grad().defined());
  }
  // The gathered state is the replicated optimizer's, tensor for tensor.
  auto gathered = make(*sharded_net);
  ASSERT_TRUE((*sharded)->GatherState(*gathered).ok());
  ASSERT_EQ(gathered->state().size(), replicated_opt->state().size());
  for (size_t i = 0; i < sharded_net->parameters().size(); ++i) {
    const auto& mine = gathered->state().at(StateKeyOf(sharded_net->parameters()[i]));
    const auto& theirs = replicated_opt->state().at(StateKeyOf(replicated_net->parameters()[i]));
    std::vector<at::Tensor> a, b;
    ASSERT_TRUE(ForEachStateTensor(
                    *mine, [&](const at::Tensor& t) { a.push_back(t); }, "")
                    .ok());
    ASSERT_TRUE(ForEachStateTensor(
                    *theirs, [&](const at::Tensor& t) { b.push_back(t); }, "")
                    .ok());
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::equal(a[k], b[k])) << i << "." << k;
  }
  // This rank keeps about 1/size of the state.
  const int64_t whole = OptimizerStateBytes(*replicated_opt);
  const int64_t mine = OptimizerStateBytes(*sharded_opt);
  EXPECT_GT(whole, 0);
  // Each tensor's slice holds at most one element more than 1/size of it: 6 tensors, 2 moments.
  EXPECT_LE(mine, whole / Size() + 6 * 2 * 4);
  EXPECT_GE(mine, whole / Size() - 6 * 2 * 4);
}

TEST(TorchTest, ShardedOptimizerStepsExactlyTheReplicatedOne) {
  for (ShardStage stage : {ShardStage::kState, ShardStage::kGradients}) {
    for (bool adam : {false, true}) CheckShardedEqualsReplicated(stage, adam);
  }
}

// What a training step asks through GradientSync, answered alike by both optimizers: the same
// global norm of the averaged gradients (clipped to max_norm), and whether any is inf, on every
// rank, also when the inf reaches only one rank's slice (rank 1 puts it in fc1.weight's first
// element, which rank 0's slice holds).
TEST(TorchTest, BothOptimizersAnswerTheStepsQuestionsAlike) {
  struct Case {
    std::string name;
    std::function<std::unique_ptr<GradientSync>(torch::optim::Optimizer&, Net&)> make;
  };
  const std::vector<Case> cases = {
      {"replicated",
       [](torch::optim::Optimizer& opt, Net& net) -> std::unique_ptr<GradientSync> {
         auto d = DistributedOptimizer::Create(opt, net.named_parameters(), {});
         EXPECT_TRUE(d.ok()) << d.status();
         return d.ok() ? std::move(*d) : nullptr;
       }},
      {"sharded state",
       [](torch::optim::Optimizer& opt, Net& net) -> std::unique_ptr<GradientSync> {
         auto s = ShardedOptimizer::Create(opt, net.named_parameters(), {ShardStage::kState, {}});
         EXPECT_TRUE(s.ok()) << s.status();
         return s.ok() ? std::move(*s) : nullptr;
       }},
      {"sharded gradients",
       [](torch::optim::Optimizer& opt, Net& net) -> std::unique_ptr<GradientSync> {
         auto s =
             ShardedOptimizer::Create(opt, net.named_parameters(), {ShardStage::kGradients, {}});
         EXPECT_TRUE(s.ok()) << s.status();
         return s.ok() ? std::move(*s) : nullptr;
       }},
  };
  auto reference = SameNetEverywhere(21);
  double expected_norm = 0;
  {
    std::vector<at::Tensor> average = ExpectedAverage(*reference, AllUseSide);
    for (const auto& g : average) expected_norm += g.pow(2).sum().item<double>();
    expected_norm = std::sqrt(expected_norm);
  }
  for (const Case& c : cases) {
    for (bool poisoned : {false, true}) {
      SCOPED_TRACE(absl::StrCat(c.name, poisoned ? ", an inf on rank 1" : ""));
      auto net = std::make_shared<Net>();
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < net->parameters().size(); ++i)
          net->parameters()[i].copy_(reference->parameters()[i]);
      }
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
      std::unique_ptr<GradientSync> sync = c.make(sgd, *net);
      ASSERT_NE(sync, nullptr);
      if (poisoned && Rank() == 1) {
        net->fc1->weight.register_hook([](at::Tensor g) {
          g = g.clone();
          g.view({-1})[0] = std::numeric_limits<float>::infinity();
          return g;
        });
      }
      ASSERT_TRUE(sync->ZeroGrad().ok());
      net->forward(InputFor(Rank()), true).pow(2).sum().backward();
      ASSERT_TRUE(sync->Synchronize().ok());
      auto finite = sync->AllFinite();
      ASSERT_TRUE(finite.ok()) << finite.status();
      EXPECT_EQ(*finite, !poisoned || Size() == 1);
      if (poisoned) continue;
      auto norm = sync->ClipGradNorm(expected_norm / 2);
      ASSERT_TRUE(norm.ok()) << norm.status();
      EXPECT_NEAR(*norm, expected_norm, 1e-5 * expected_norm);
      double after = 0;
      for (const auto& g : sync->Gradients()) after += g.pow(2).sum().item<double>();
      auto total = SumMetrics({after}, "clipped." + c.name);
      ASSERT_TRUE(total.ok()) << total.status();
      // Replicated: every rank holds every gradient, so the sum over ranks counts them Size()
      // times.
      const double whole = c.name == "replicated" ? (*total)[0] / Size() : (*total)[0];
      EXPECT_NEAR(std::sqrt(whole), expected_norm / 2, 1e-4 * expected_norm);
      ASSERT_TRUE(sync->Step(/*synchronize=*/false).ok());
    }
  }
}

// A DistributedOptimizer that reduce-scatters holds only this rank's slices: it does not answer
// what every rank must answer alike (its ShardedOptimizer does).
TEST(TorchTest, AReduceScatteringExchangeRefusesTheWholeGradientsQuestions) {
  auto net = SameNetEverywhere(22);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  DistributedOptimizerOptions options;
  options.reduce_scatter = true;
  auto d = DistributedOptimizer::Create(sgd, net->named_parameters(), options);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->AllFinite().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*d)->ClipGradNorm(1.0).status().code(), absl::StatusCode::kFailedPrecondition);
}

// State scattered from a replicated optimizer (a checkpoint's) continues as the replicated one
// does; an optimizer that has state already or a tensor nobody named is refused.
TEST(TorchTest, ShardedOptimizerTakesAReplicatedStateAndRefusesBadInput) {
  auto net = SameNetEverywhere(12);
  auto copy = std::make_shared<Net>();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < copy->parameters().size(); ++i)
      copy->parameters()[i].copy_(net->parameters()[i]);
  }
  torch::optim::Adam replicated(net->parameters(), torch::optim::AdamOptions(0.01));
  auto distributed = DistributedOptimizer::Create(replicated, net->named_parameters(), {});
  ASSERT_TRUE(distributed.ok());
  auto step = [](Net& n, auto& opt) {
    EXPECT_TRUE(opt.ZeroGrad().ok());
    n.forward(InputFor(Rank()), true).pow(2).sum().backward();
    EXPECT_TRUE(opt.Step().ok());
  };
  step(*net, **distributed);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < copy->parameters().size(); ++i)
      copy->parameters()[i].copy_(net->parameters()[i]);
  }
  // The copy's replicated state, as a checkpoint would load it.
  torch::optim::Adam loaded(copy->parameters(), torch::optim::AdamOptions(0.5));
  for (size_t i = 0; i < copy->parameters().size(); ++i) {
    const auto& st = replicated.state().at(StateKeyOf(net->parameters()[i]));
    loaded.state()[StateKeyOf(copy->parameters()[i])] = *MapStateTensors(
        *st, [](const at::Tensor& t) { return t.clone(); }, "test");
  }
  loaded.param_groups()[0].options().set_lr(0.01);
  torch::optim::Adam sharded_adam(copy->parameters(), torch::optim::AdamOptions(0.5));
  ShardedOptimizerOptions options;
  options.stage = ShardStage::kGradients;
  auto sharded = ShardedOptimizer::Create(sharded_adam, copy->named_parameters(), options);
  ASSERT_TRUE(sharded.ok());
  ASSERT_TRUE((*sharded)->ScatterState(loaded).ok());
  EXPECT_DOUBLE_EQ(sharded_adam.param_groups()[0].options().get_lr(), 0.01);
  step(*net, **distributed);
  step(*copy, **sharded);
  for (size_t i = 0; i < copy->parameters().size(); ++i)
    EXPECT_TRUE(torch::equal(copy->parameters()[i], net->parameters()[i])) << i;

  auto other = std::make_shared<Net>();
  torch::optim::SGD foreign(other->parameters(), torch::optim::SGDOptions(0.1));
  auto refused = ShardedOptimizer::Create(foreign, net->named_parameters(), {});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "is not one the optimizer owns"))
      << refused.status();
  auto with_state = ShardedOptimizer::Create(replicated, net->named_parameters(), {});
  ASSERT_FALSE(with_state.ok());
  EXPECT_TRUE(absl::StrContains(with_state.status().message(), "has state")) << with_state.status();
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
