// Several GPUs per host, simulated: 2 hosts x 4 ranks, each submitting tensors on
// cuda:<local_rank> through the real coordinator, fusion, response cache and process sets. A test
// data plane registered for DeviceType::kCuda records which device each rank's plane was built for
// and checks every tensor it is handed; it moves the bytes (host memory here) through the rank's
// host plane. The real GPU path is tests/gpu/run.sh on a GPU machine.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/core/in_process_ranks.h"

namespace hvx {
namespace {

constexpr int kHosts = 2;
constexpr int kPerHost = 4;
constexpr int kRanks = kHosts * kPerHost;

std::vector<std::string> Hosts() {
  std::vector<std::string> h;
  for (int r = 0; r < kRanks; ++r) h.push_back(absl::StrCat("gpuhost", r / kPerHost));
  return h;
}

// What the simulated GPU planes saw, shared by all in-process ranks.
struct Record {
  std::mutex mu;
  std::map<int, DataPlaneContext> built;  // by global rank
  std::vector<std::string> violations;
  std::map<int, int> fused_calls;  // by global rank: allreduces with more than one tensor
  std::map<int, std::set<const void*>> ready_seen;  // by global rank: tensors' ready events
  void Violation(std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    violations.push_back(std::move(what));
  }
};
Record* const g_record = new Record();

class SimulatedGpuPlane : public DataPlane {
 public:
  explicit SimulatedGpuPlane(DataPlaneContext ctx) : ctx_(std::move(ctx)) {}

  absl::Status Allreduce(const AllreduceWork& work) override {
    if (work.device != ctx_.device) Bad("work", work.device);
    for (const auto& t : work.inputs) Check(t);
    for (const auto& t : work.outputs) Check(t);
    if (work.inputs.size() > 1) {
      std::lock_guard<std::mutex> lock(g_record->mu);
      ++g_record->fused_calls[ctx_.global_rank];
    }
    AllreduceWork host = work;
    for (auto& t : host.inputs) t = OnHost(t);
    for (auto& t : host.outputs) t = OnHost(t);
    host.device = Device::Cpu();
    return ctx_.comm->cpu().Allreduce(host);
  }
  absl::Status Allgather(const AllgatherWork& work) override {
    Check(work.input);
    Check(work.output);
    AllgatherWork host = work;
    host.input = OnHost(work.input);
    host.output = OnHost(work.output);
    return ctx_.comm->cpu().Allgather(host);
  }
  absl::Status Broadcast(const BroadcastWork& work) override {
    Check(work.tensor);
    BroadcastWork host = work;
    host.tensor = OnHost(work.tensor);
    return ctx_.comm->cpu().Broadcast(host);
  }
  absl::Status Alltoall(const AlltoallWork&) override {
    return absl::UnimplementedError("not simulated");
  }
  absl::Status ReduceScatter(const ReduceScatterWork&) override {
    return absl::UnimplementedError("not simulated");
  }

 private:
  void Check(const TensorRef& t) {
    if (t.device() != ctx_.device) Bad("tensor", t.device());
    if (t.ready() != nullptr) {
      std::lock_guard<std::mutex> lock(g_record->mu);
      g_record->ready_seen[ctx_.global_rank].insert(t.ready()->native());
    }
  }
  void Bad(const char* what, const Device& d) {
    g_record->Violation(absl::StrCat("rank ", ctx_.global_rank, "'s plane for ",
                                     ctx_.device.ToString(), " got a ", what, " on ",
                                     d.ToString()));
  }
  static TensorRef OnHost(const TensorRef& t) { return TensorRef(t.dtype(), t.shape(), t.data()); }
  const DataPlaneContext ctx_;
};

const bool kRegistered = RegisterDataPlane(DeviceType::kCuda, [](const DataPlaneContext& ctx) {
  {
    std::lock_guard<std::mutex> lock(g_record->mu);
    g_record->built[ctx.global_rank] = ctx;
  }
  return absl::StatusOr<std::unique_ptr<DataPlane>>(std::make_unique<SimulatedGpuPlane>(ctx));
});

class MultiDeviceTest : public testing::Test {
 protected:
  void SetUp() override {
    std::lock_guard<std::mutex> lock(g_record->mu);
    g_record->built.clear();
    g_record->violations.clear();
    g_record->fused_calls.clear();
    g_record->ready_seen.clear();
  }
  void TearDown() override {
    std::lock_guard<std::mutex> lock(g_record->mu);
    EXPECT_TRUE(g_record->violations.empty()) << g_record->violations.front();
  }
};

Device Own(const Engine& e) { return Device::Cuda(e.topology().local_rank); }

TEST_F(MultiDeviceTest, EachRanksPlaneIsItsOwnGpuAndFusedResponsesStayOnIt) {
  auto hub = std::make_shared<FakeHub>(kRanks);
  std::vector<int64_t> gathers_in_cached_steps(kRanks, -1);
  RunInProcessRanks(
      kRanks,
      [&](Engine& e, int rank) {
        std::vector<std::vector<float>> grads(12, std::vector<float>(16));
        auto step = [&] {
          std::vector<Handle> hs;
          for (size_t i = 0; i < grads.size(); ++i) {
            std::fill(grads[i].begin(), grads[i].end(), static_cast<float>(rank));
            TensorRef t(DataType::kFloat32, {16}, grads[i].data(), Own(e));
            AllreduceOptions o;
            o.op = ReduceOp::kSum;
            hs.push_back(e.Allreduce(absl::StrCat("grad", i), t, t, o));
          }
          for (auto& h : hs) ASSERT_TRUE(h.state()->Wait().ok()) << h.state()->Wait();
          for (const auto& g : grads) EXPECT_EQ(g[0], kRanks * (kRanks - 1) / 2);
        };
        step();
        ASSERT_TRUE(e.Barrier({}).state()->Wait().ok());
        const int64_t before = hub->gathers();
        step();
        step();
        const int64_t after = hub->gathers();
        step();
        gathers_in_cached_steps[rank] = after - before;
        ASSERT_TRUE(e.Barrier({}).state()->Wait().ok());
      },
      InProcessOptions(), Hosts(), hub);
  std::lock_guard<std::mutex> lock(g_record->mu);
  ASSERT_EQ(g_record->built.size(), static_cast<size_t>(kRanks));
  for (const auto& [rank, ctx] : g_record->built) {
    EXPECT_EQ(ctx.device, Device::Cuda(rank % kPerHost)) << "rank " << rank;
    EXPECT_EQ(ctx.local_rank, rank % kPerHost) << "rank " << rank;
    EXPECT_EQ(ctx.local_size, kPerHost) << "rank " << rank;
    EXPECT_EQ(ctx.cross_rank, rank / kPerHost) << "rank " << rank;
    EXPECT_EQ(ctx.cross_size, kHosts) << "rank " << rank;
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(gathers_in_cached_steps[r], 0)
        << "rank " << r << ": cached steps went through the coordinator";
    EXPECT_GT(g_record->fused_calls[r], 0) << "rank " << r << " never ran a fused allreduce";
  }
}

// What a framework recorded on its stream when it submitted a tensor (a CUDA event in hvx/torch).
class TestReadyEvent : public ReadyEvent {
 public:
  void* native() const override { return const_cast<int*>(&tag_); }

 private:
  int tag_ = 0;
};

TEST_F(MultiDeviceTest, EveryTensorsReadyEventReachesItsPlaneFusedOrNotAndIsReleased) {
  auto hub = std::make_shared<FakeHub>(kRanks);
  std::vector<std::vector<const void*>> submitted(kRanks);
  std::vector<int> still_held(kRanks, -1);
  RunInProcessRanks(
      kRanks,
      [&](Engine& e, int rank) {
        std::vector<std::shared_ptr<const ReadyEvent>> events;
        auto with_event = [&](TensorRef t) {
          events.push_back(std::make_shared<TestReadyEvent>());
          submitted[rank].push_back(events.back()->native());
          t.set_ready(events.back());
          return t;
        };
        std::vector<std::vector<float>> grads(6, std::vector<float>(16, 1.0f));
        std::vector<float> weights(8, static_cast<float>(rank));
        {
          std::vector<Handle> hs;
          // Four tensors fused (one grouped op), two alone.
          std::vector<TensorRef> group;
          for (size_t i = 0; i < grads.size(); ++i) {
            TensorRef t = with_event(TensorRef(DataType::kFloat32, {16}, grads[i].data(), Own(e)));
            if (i < 4) {
              group.push_back(t);
            } else {
              hs.push_back(e.Allreduce(absl::StrCat("grad", i), t, t, AllreduceOptions()));
            }
          }
          hs.push_back(e.GroupedAllreduce("grads", group, group, AllreduceOptions()));
          hs.push_back(e.Broadcast(
              "weights", with_event(TensorRef(DataType::kFloat32, {8}, weights.data(), Own(e))), 0,
              CollectiveOptions()));
          for (auto& h : hs) ASSERT_TRUE(h.state()->Wait().ok()) << h.state()->Wait();
        }
        ASSERT_TRUE(e.Barrier({}).state()->Wait().ok());
        EXPECT_EQ(weights[0], 0.0f);
        still_held[rank] = static_cast<int>(std::count_if(
            events.begin(), events.end(), [](const auto& ev) { return ev.use_count() > 1; }));
      },
      InProcessOptions(), Hosts(), hub);
  std::lock_guard<std::mutex> lock(g_record->mu);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(submitted[r].size(), 7u);
    for (const void* ev : submitted[r]) {
      EXPECT_EQ(g_record->ready_seen[r].count(ev), 1u) << "rank " << r << ": an event was lost";
    }
    EXPECT_EQ(g_record->ready_seen[r].size(), 7u) << "rank " << r;
    EXPECT_EQ(still_held[r], 0) << "rank " << r << ": the engine kept events after the ops ended";
    EXPECT_GT(g_record->fused_calls[r], 0) << "rank " << r << " never ran a fused allreduce";
  }
}

TEST_F(MultiDeviceTest, ProcessSetOfOneLocalRankPerHostRunsOnEachMembersGpu) {
  // Local rank 1 of each host (global 1 and 5): a cross-host set, as hierarchical allreduce uses.
  InitOptions o = InProcessOptions();
  o.process_sets = {{1, 5}};
  RunInProcessRanks(
      kRanks,
      [&](Engine& e, int rank) {
        if (rank == 1 || rank == 5) {
          std::vector<float> x(8, static_cast<float>(rank));
          TensorRef t(DataType::kFloat32, {8}, x.data(), Own(e));
          AllreduceOptions ao;
          ao.op = ReduceOp::kSum;
          ao.process_set = Engine::MakeProcessSet(1);
          absl::Status s = e.Allreduce("set.grad", t, t, ao).state()->Wait();
          ASSERT_TRUE(s.ok()) << s;
          EXPECT_EQ(x[0], 6.0f);
        }
        // One rank's shutdown ends the job for all: the others wait here for the set's members.
        ASSERT_TRUE(e.Barrier({}).state()->Wait().ok());
      },
      o, Hosts());
  std::lock_guard<std::mutex> lock(g_record->mu);
  ASSERT_EQ(g_record->built.size(), 2u);
  for (int rank : {1, 5}) {
    const DataPlaneContext& ctx = g_record->built.at(rank);
    EXPECT_EQ(ctx.device, Device::Cuda(1));
    EXPECT_EQ(ctx.global_ranks, (std::vector<int>{1, 5}));
  }
}

TEST_F(MultiDeviceTest, CpuTensorOnOneRankFailsOnEveryRankNamingRankHostAndDevices) {
  RunInProcessRanks(
      kRanks,
      [&](Engine& e, int rank) {
        std::vector<float> x(4, 1.0f);
        const Device d = rank == 6 ? Device::Cpu() : Own(e);
        TensorRef t(DataType::kFloat32, {4}, x.data(), d);
        absl::Status s = e.Allreduce("mixed", t, t, {}).state()->Wait();
        EXPECT_TRUE(absl::StrContains(s.message(),
                                      "mismatched devices: rank 0 (host gpuhost0) used cuda:0, "
                                      "rank 6 (host gpuhost1) used cpu"))
            << "rank " << rank << ": " << s;
      },
      InProcessOptions(), Hosts());
}

TEST_F(MultiDeviceTest, OneRanksTensorsOnTwoGpusFailOnEveryRank) {
  RunInProcessRanks(
      kRanks,
      [&](Engine& e, int rank) {
        std::vector<float> x(4, 1.0f), y(4, 1.0f);
        TensorRef a(DataType::kFloat32, {4}, x.data(), Own(e));
        ASSERT_TRUE(e.Allreduce("first", a, a, {}).state()->Wait().ok());
        ASSERT_TRUE(e.Allreduce("first", a, a, {}).state()->Wait().ok());  // now cached
        // Rank 5 (local rank 1 of gpuhost1) puts its next tensor on cuda:2.
        const Device d = rank == 5 ? Device::Cuda(2) : Own(e);
        TensorRef b(DataType::kFloat32, {4}, y.data(), d);
        absl::Status s = e.Allreduce("second", b, b, {}).state()->Wait();
        EXPECT_TRUE(
            absl::StrContains(s.message(),
                              "tensor 'second': rank 5 (host gpuhost1) put it on cuda:2 but "
                              "its earlier tensors on cuda:1"))
            << "rank " << rank << ": " << s;
        // A cached name moved to another GPU is caught too.
        TensorRef moved(DataType::kFloat32, {4}, x.data(), rank == 5 ? Device::Cuda(2) : Own(e));
        s = e.Allreduce("first", moved, moved, {}).state()->Wait();
        EXPECT_TRUE(absl::StrContains(s.message(),
                                      "tensor 'first': rank 5 (host gpuhost1) put it on cuda:2"))
            << "rank " << rank << ": " << s;
      },
      InProcessOptions(), Hosts());
}

}  // namespace
}  // namespace hvx
