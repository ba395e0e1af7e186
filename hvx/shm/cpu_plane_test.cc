// The engine's choice of CPU plane, in one process over the in-process transport: with this
// package linked, HVX_CPU_PLANE=auto takes shared memory where a host runs several ranks of a set
// (its allreduce, reduce-scatter and negotiation vote), "mpi" keeps the transport's own plane, and
// several hosts reduce hierarchically over the communicator's point-to-point bytes. Which plane ran
// shows in rank 0's timeline (SHM_ALLREDUCE) and in the votes the transport saw. Then the trial
// under auto, on the plane made directly over a transport plane whose speed the test sets.
#include "hvx/shm/cpu_plane.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "hvx/core/in_process_ranks.h"
#include "hvx/shm/plane_trial.h"

namespace hvx {
namespace {

struct Outcome {
  std::string timeline;  // rank 0's
  int64_t transport_votes = 0;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `fn` on ranks placed on `hosts` with HVX_CPU_PLANE=`plane`, recording a timeline.
Outcome RunRanks(const std::string& plane, const std::vector<std::string>& hosts,
                 const std::function<void(Engine&, int)>& fn) {
  static int runs = 0;
  InitOptions o = InProcessOptions();
  o.cpu_plane = plane;
  o.timeline_path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/timeline", runs++, ".json");
  auto hub = std::make_shared<FakeHub>(static_cast<int>(hosts.size()));
  RunInProcessRanks(static_cast<int>(hosts.size()), fn, o, hosts, hub);
  return Outcome{ReadFile(o.timeline_path), hub->votes()};
}

// Every rank allreduces two float tensors (rank r holds r + i in element i) and checks the sums.
void AllreduceAndCheck(Engine& e, int rank, int size) {
  std::vector<float> a(1000), b(3);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(rank + i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rank * 10 + i);
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  TensorRef ta(DataType::kFloat32, {1000}, a.data()), tb(DataType::kFloat32, {3}, b.data());
  ASSERT_TRUE(WaitAll({e.Allreduce("a", ta, ta, sum), e.Allreduce("b", tb, tb, sum)}).ok());
  const float ranks = static_cast<float>(size * (size - 1) / 2);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], ranks + size * i) << "a[" << i << "]";
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], ranks * 10 + size * i) << "b[" << i << "]";
}

TEST(CpuPlaneTest, AutoOnOneHostReducesAndVotesThroughSharedMemory) {
  const Outcome out = RunRanks("auto", {"h", "h"}, [](Engine& e, int rank) {
    AllreduceAndCheck(e, rank, 2);
    std::vector<float> x(6, static_cast<float>(rank + 1));
    ReduceScatterOptions o;
    o.op = ReduceOp::kSum;
    Handle h = e.ReduceScatter("rs", TensorRef(DataType::kFloat32, {6}, x.data()), o);
    ASSERT_TRUE(Wait(h).ok());
    ASSERT_EQ(h.output().num_elements(), 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(static_cast<const float*>(h.output().data())[i], 3.0f);
  });
  EXPECT_TRUE(absl::StrContains(out.timeline, "SHM_ALLREDUCE")) << out.timeline;
  EXPECT_TRUE(absl::StrContains(out.timeline, "SHM_REDUCE_SCATTER")) << out.timeline;
  EXPECT_EQ(out.transport_votes, 0) << "the negotiation voted through the transport";
}

TEST(CpuPlaneTest, MpiKeepsTheTransportsPlaneAndVote) {
  const Outcome out =
      RunRanks("mpi", {"h", "h"}, [](Engine& e, int rank) { AllreduceAndCheck(e, rank, 2); });
  EXPECT_FALSE(absl::StrContains(out.timeline, "SHM_")) << out.timeline;
  EXPECT_GT(out.transport_votes, 0);
}

TEST(CpuPlaneTest, TwoHostsReduceHierarchicallyOverPointToPointBytes) {
  const Outcome out = RunRanks("shm", {"a", "a", "b", "b"}, [](Engine& e, int rank) {
    for (int step = 0; step < 3; ++step) AllreduceAndCheck(e, rank, 4);
  });
  EXPECT_TRUE(absl::StrContains(out.timeline, "SHM_ALLREDUCE")) << out.timeline;
  EXPECT_GT(out.transport_votes, 0) << "ranks on two hosts share no memory to vote through";
}

TEST(CpuPlaneTest, UnevenHostsKeepTheTransportsPlaneUnderAuto) {
  const Outcome out =
      RunRanks("auto", {"a", "a", "b"}, [](Engine& e, int rank) { AllreduceAndCheck(e, rank, 3); });
  EXPECT_FALSE(absl::StrContains(out.timeline, "SHM_")) << out.timeline;
}

TEST(CpuPlaneTest, UnevenHostsFailEveryRankUnderShm) {
  RunRanks("shm", {"a", "a", "b"}, [](Engine& e, int rank) {
    std::vector<float> x(4, 1.0f);
    TensorRef t(DataType::kFloat32, {4}, x.data());
    const absl::Status s = Wait(e.Allreduce("x", t, t, {}));
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "HVX_CPU_PLANE=shm: the hosts run different numbers of ranks of "
                                  "this process set (2, 1)"))
        << "rank " << rank << ": " << s;
  });
}

// A transport plane whose speed the test sets: each allreduce waits `delay`, then runs on the
// in-process transport's own plane, or, when `skip` is set, returns at once without reducing.
class PacedPlane : public DataPlane {
 public:
  PacedPlane(DataPlane* inner, absl::Duration delay, bool skip)
      : inner_(inner), delay_(delay), skip_(skip) {}
  absl::Status Allreduce(const AllreduceWork& w) override {
    ++allreduces;
    absl::SleepFor(delay_);
    return skip_ ? absl::OkStatus() : inner_->Allreduce(w);
  }
  absl::Status Allgather(const AllgatherWork& w) override { return inner_->Allgather(w); }
  absl::Status Broadcast(const BroadcastWork& w) override { return inner_->Broadcast(w); }
  absl::Status Alltoall(const AlltoallWork& w) override { return inner_->Alltoall(w); }
  absl::Status ReduceScatter(const ReduceScatterWork& w) override {
    return inner_->ReduceScatter(w);
  }
  int allreduces = 0;

 private:
  DataPlane* inner_;
  absl::Duration delay_;
  bool skip_;
};

class NoActivity : public ActivityRecorder {
 public:
  void Start(absl::string_view) override {}
  void End() override {}
};

// Two ranks on one host under HVX_CPU_PLANE=auto, each with the plane made over a transport plane
// paced as given; `fn(rank, plane, transport)` runs on each.
void OnTwoRanks(absl::Duration delay, bool skip,
                const std::function<void(int, DataPlane&, PacedPlane&)>& fn) {
  auto hub = std::make_shared<FakeHub>(2);
  static const InitOptions options;  // cpu_plane "auto"
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      FakeCommunicator comm(hub, r);
      PacedPlane transport(&comm.cpu(), delay, skip);
      DataPlaneContext ctx;
      ctx.comm = &comm;
      ctx.global_ranks = {0, 1};
      ctx.hosts = {"h", "h"};
      ctx.global_rank = r;
      ctx.options = &options;
      absl::StatusOr<std::unique_ptr<DataPlane>> plane = MakeShmCpuPlane(ctx, &transport);
      ASSERT_TRUE(plane.ok()) << plane.status();
      fn(r, **plane, transport);
    });
  }
  for (std::thread& t : threads) t.join();
}

// One fused allreduce of `n` floats (rank r holds r + 1 in each), sums checked when `check`.
void AllreduceOnPlane(DataPlane& plane, int rank, int64_t n, bool check) {
  static NoActivity none;
  std::vector<float> x(n, static_cast<float>(rank + 1));
  AllreduceWork w;
  w.names = {"x"};
  w.inputs = {TensorRef(DataType::kFloat32, {n}, x.data())};
  w.outputs = w.inputs;
  w.activity = &none;
  ASSERT_TRUE(plane.Allreduce(w).ok());
  if (check) {
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 3.0f) << "element " << i;
  }
}

// Under auto, each size class of buffers is timed on both planes (kSamples runs each, alternately)
// and then served by the faster: here the transport's plane is 50 ms slower, so shared memory.
TEST(CpuPlaneTest, AutoKeepsSharedMemoryWhereTheTransportsPlaneIsSlower) {
  OnTwoRanks(absl::Milliseconds(50), false, [](int rank, DataPlane& plane, PacedPlane& transport) {
    const int64_t mib = 1 << 18;  // floats
    for (int i = 0; i < 2 * shm::PlaneTrial::kSamples; ++i) {
      AllreduceOnPlane(plane, rank, mib, true);
    }
    EXPECT_EQ(transport.allreduces, shm::PlaneTrial::kSamples);
    for (int i = 0; i < 5; ++i) AllreduceOnPlane(plane, rank, mib, true);
    EXPECT_EQ(transport.allreduces, shm::PlaneTrial::kSamples) << "decided for the transport";
    // Buffers of another class are still on trial: the second goes to the transport.
    AllreduceOnPlane(plane, rank, 1, true);
    AllreduceOnPlane(plane, rank, 1, true);
    EXPECT_EQ(transport.allreduces, shm::PlaneTrial::kSamples + 1);
  });
}

// The same trial where the transport's plane answers at once (it does no work here, so its sums
// are not checked): from then on the class runs there.
TEST(CpuPlaneTest, AutoTakesTheTransportsPlaneWhereItIsFaster) {
  OnTwoRanks(absl::ZeroDuration(), true, [](int rank, DataPlane& plane, PacedPlane& transport) {
    const int64_t mib = 1 << 18;
    for (int i = 0; i < 2 * shm::PlaneTrial::kSamples; ++i) {
      AllreduceOnPlane(plane, rank, mib, false);
    }
    ASSERT_EQ(transport.allreduces, shm::PlaneTrial::kSamples);
    for (int i = 0; i < 5; ++i) AllreduceOnPlane(plane, rank, mib, false);
    EXPECT_EQ(transport.allreduces, shm::PlaneTrial::kSamples + 5);
  });
}

}  // namespace
}  // namespace hvx
