// Engines gathering requests per host, over the in-process transport wrapped so that a test can
// see when each communicator is freed and can corrupt what a rank gathers: the split communicators
// go before the transport's Finalize, and a request list no one can read fails every rank at once
// with its cause.
#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "hvx/common/status.h"
#include "hvx/core/engine.h"
#include "hvx/core/fake_transport.h"
#include "hvx/core/in_process_ranks.h"
#include "hvx/core/message.h"

namespace hvx {
namespace {

const std::vector<std::string> kUnevenHosts = {"a", "a", "a", "b", "c", "c", "c"};

// What happened to one rank's communicators and transport, in order.
class EventLog {
 public:
  void Add(std::string event) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

// Rewrites what rank `rank` gathers through communicator `comm` ("world", "world.split0" for
// its host, "world.split1" for the hosts' first ranks).
using GatherHook = std::function<void(const std::string& comm, int rank, std::string* mine)>;

// A communicator that forwards to another, logs "free <name>" when destroyed, passes its Gathers
// through a hook, and optionally fails Subset.
class WrappedCommunicator : public Communicator {
 public:
  WrappedCommunicator(std::unique_ptr<Communicator> inner, std::string name,
                      std::shared_ptr<EventLog> log, int world_rank, GatherHook hook,
                      bool fail_subset)
      : inner_(std::move(inner)),
        name_(std::move(name)),
        log_(std::move(log)),
        world_rank_(world_rank),
        hook_(std::move(hook)),
        fail_subset_(fail_subset) {}
  ~WrappedCommunicator() override { log_->Add(absl::StrCat("free ", name_)); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status Gather(const std::string& mine, std::vector<std::string>* all) override {
    std::string sent = mine;
    if (hook_) hook_(name_, world_rank_, &sent);
    return inner_->Gather(sent, all);
  }
  absl::Status Broadcast(std::string* message) override { return inner_->Broadcast(message); }
  absl::Status Allgather(const std::string& mine, std::vector<std::string>* all) override {
    return inner_->Allgather(mine, all);
  }
  absl::Status BitwiseAnd(std::vector<uint64_t>* bits) override { return inner_->BitwiseAnd(bits); }
  absl::Status Barrier() override { return inner_->Barrier(); }
  DataPlane& cpu() override { return inner_->cpu(); }
  absl::Status Send(int to, const char* data, size_t n) override {
    return inner_->Send(to, data, n);
  }
  absl::Status Recv(int from, char* data, size_t n) override { return inner_->Recv(from, data, n); }
  absl::Status Flush() override { return inner_->Flush(); }
  absl::StatusOr<std::unique_ptr<Communicator>> Subset(const std::vector<int>& ranks) override {
    if (fail_subset_) return absl::InternalError("this transport makes no subsets");
    return Wrap(inner_->Subset(ranks), absl::StrCat(name_, ".subset", children_++));
  }
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override {
    return Wrap(inner_->Split(color, key), absl::StrCat(name_, ".split", children_++));
  }

 private:
  absl::StatusOr<std::unique_ptr<Communicator>> Wrap(
      absl::StatusOr<std::unique_ptr<Communicator>> made, std::string name) {
    if (!made.ok() || *made == nullptr) return made;
    return std::unique_ptr<Communicator>(new WrappedCommunicator(
        std::move(*made), std::move(name), log_, world_rank_, hook_, fail_subset_));
  }

  std::unique_ptr<Communicator> inner_;
  const std::string name_;
  std::shared_ptr<EventLog> log_;
  const int world_rank_;
  GatherHook hook_;
  const bool fail_subset_;
  int children_ = 0;
};

class WrappedTransport : public Transport {
 public:
  WrappedTransport(std::shared_ptr<FakeHub> hub, int rank, std::shared_ptr<EventLog> log,
                   GatherHook hook, bool fail_subset)
      : inner_(std::move(hub), rank),
        rank_(rank),
        log_(std::move(log)),
        hook_(std::move(hook)),
        fail_subset_(fail_subset) {}
  absl::StatusOr<std::unique_ptr<Communicator>> Start(const InitOptions& options) override {
    HVX_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, inner_.Start(options));
    return std::unique_ptr<Communicator>(
        new WrappedCommunicator(std::move(world), "world", log_, rank_, hook_, fail_subset_));
  }
  absl::Status Finalize(absl::Time deadline) override {
    log_->Add("finalize");
    return inner_.Finalize(deadline);
  }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  FakeTransport inner_;
  const int rank_;
  std::shared_ptr<EventLog> log_;
  GatherHook hook_;
  const bool fail_subset_;
};

struct WrappedRun {
  GatherHook hook;
  bool fail_subset = false;
  // Called with each rank's engine once it started; not called when Start fails.
  std::function<void(Engine&, int)> fn;
};

// Runs n engines on hosts `hosts` over wrapped transports; returns each rank's Start status and
// event log (after the engine was destroyed).
std::vector<std::pair<absl::Status, std::vector<std::string>>> RunWrapped(
    int n, const std::vector<std::string>& hosts, InitOptions options, const WrappedRun& run) {
  auto hub = std::make_shared<FakeHub>(n);
  std::vector<std::pair<absl::Status, std::vector<std::string>>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto log = std::make_shared<EventLog>();
      EngineOptions eo;
      eo.hostname = hosts[r];
      eo.command_line = "prog";
      eo.exit_on_finalize_timeout = false;
      {
        auto engine = Engine::Start(
            options, std::make_unique<WrappedTransport>(hub, r, log, run.hook, run.fail_subset),
            eo);
        out[r].first = engine.status();
        if (engine.ok()) {
          if (run.fn) run.fn(**engine, r);
          (*engine)->Shutdown().IgnoreError();
        }
      }
      out[r].second = log->events();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Whether every communicator in `events` was freed before "finalize".
void ExpectFreedBeforeFinalize(const std::vector<std::string>& events, int rank) {
  const auto finalize = std::find(events.begin(), events.end(), "finalize");
  ASSERT_NE(finalize, events.end()) << "rank " << rank;
  EXPECT_EQ(finalize + 1, events.end())
      << "rank " << rank << " freed a communicator after Finalize: " << absl::StrJoin(events, ", ");
  EXPECT_NE(std::find(events.begin(), finalize, "free world.split0"), finalize)
      << "rank " << rank << ": " << absl::StrJoin(events, ", ");
}

TEST(HostGatherTest, SplitCommunicatorsAreFreedBeforeFinalize) {
  InitOptions options = InProcessOptions();
  const auto ranks = RunWrapped(7, kUnevenHosts, options, {nullptr, false, nullptr});
  for (int r = 0; r < 7; ++r) {
    ASSERT_TRUE(ranks[r].first.ok()) << ranks[r].first;
    ExpectFreedBeforeFinalize(ranks[r].second, r);
  }
}

TEST(HostGatherTest, AStartThatFailsAfterSplittingFreesTheSplitsBeforeFinalize) {
  InitOptions options = InProcessOptions();
  options.process_sets = {{0, 3, 4}};  // AddSet's Subset fails, after the world set split
  const auto ranks = RunWrapped(7, kUnevenHosts, options, {nullptr, true, nullptr});
  for (int r = 0; r < 7; ++r) {
    EXPECT_TRUE(absl::StrContains(ranks[r].first.message(), "makes no subsets")) << ranks[r].first;
    ExpectFreedBeforeFinalize(ranks[r].second, r);
  }
}

// Runs one allreduce on 7 ranks whose gathers `hook` rewrites; expects every rank to fail at
// once with the same DataLoss message, which contains `cause`.
void ExpectEveryRankFailsWith(const std::vector<std::string>& hosts, GatherHook hook,
                              const std::string& cause) {
  InitOptions options = InProcessOptions();
  options.collective_timeout_s = 60;
  std::vector<absl::Status> got(7);
  const absl::Time start = absl::Now();
  const auto ranks =
      RunWrapped(7, hosts, options, {std::move(hook), false, [&](Engine& e, int rank) {
                                       std::vector<float> x(4, 1);
                                       TensorRef t(DataType::kFloat32, {4}, x.data());
                                       got[rank] = Wait(e.Allreduce("g", t, t, {}));
                                     }});
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  for (int r = 0; r < 7; ++r) {
    ASSERT_TRUE(ranks[r].first.ok()) << ranks[r].first;
    EXPECT_EQ(got[r].code(), absl::StatusCode::kDataLoss) << "rank " << r << ": " << got[r];
    EXPECT_EQ(got[r].message(), got[0].message()) << "rank " << r;
  }
  EXPECT_TRUE(absl::StrContains(got[0].message(), cause)) << got[0];
}

// Replaces what world rank `who` sends through communicator `comm` with `bytes`.
GatherHook Send(const std::string& comm, int who, std::string bytes) {
  return [=](const std::string& c, int rank, std::string* mine) {
    if (c == comm && rank == who) *mine = bytes;
  };
}

std::string UnknownId() {
  RequestList list;
  Request by_id;
  by_id.id = 4242;
  list.requests = {by_id};
  return EncodeRequestList(list);
}

TEST(HostGatherTest, AListTheCoordinatorCannotReadFailsEveryRankAtOnce) {
  // Flat: rank 0 cannot decode rank 2's list.
  ExpectEveryRankFailsWith(std::vector<std::string>(7, "h"), Send("world", 2, "bad"),
                           "the coordinator could not read this cycle's requests: set rank 2: "
                           "corrupt request list of 3 bytes from a peer rank");
  ExpectEveryRankFailsWith(std::vector<std::string>(7, "h"), Send("world", 2, UnknownId()),
                           "set rank 2 sent tensor id 4242, which the coordinator has not "
                           "announced");
  // Per host: host c's first rank (4) cannot decode rank 5's list.
  ExpectEveryRankFailsWith(kUnevenHosts, Send("world.split0", 5, "bad"),
                           "the coordinator could not read this cycle's requests: set rank 5, "
                           "read by its host's first rank 4: corrupt request list of 3 bytes");
  // Rank 0 cannot decode host c's merged list.
  ExpectEveryRankFailsWith(kUnevenHosts, Send("world.split1", 4, "bad"),
                           "the merged list of host 2: corrupt host request list of 3 bytes");
  // The coordinator refuses an id it never announced, from host b.
  ExpectEveryRankFailsWith(kUnevenHosts, Send("world.split0", 3, UnknownId()),
                           "the host whose first rank is set rank 3 sent tensor id 4242");
}

// Plain in-process engines on kUnevenHosts with the cache off, so that every cycle is a miss.
void RunUneven(const std::function<void(Engine&, int)>& fn, size_t max_tensor_ids = 65536) {
  InitOptions options = InProcessOptions();
  options.cache_capacity = 0;
  auto hub = std::make_shared<FakeHub>(7);
  std::vector<std::thread> threads;
  for (int r = 0; r < 7; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions eo;
      eo.hostname = kUnevenHosts[r];
      eo.command_line = "prog";
      eo.exit_on_finalize_timeout = false;
      eo.max_tensor_ids = max_tensor_ids;
      auto engine = Engine::Start(options, std::make_unique<FakeTransport>(hub, r), eo);
      ASSERT_TRUE(engine.ok()) << engine.status();
      fn(**engine, r);
      EXPECT_TRUE((*engine)->Shutdown().ok());
    });
  }
  for (auto& t : threads) t.join();
}

// Sum-allreduces `name` of n floats holding `value` and returns the result's first element.
float SumOf(Engine& e, const std::string& name, float value, int64_t n = 3,
            ProcessSet set = Engine::MakeProcessSet(0)) {
  std::vector<float> x(n, value);
  TensorRef t(DataType::kFloat32, {n}, x.data());
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  o.process_set = set;
  absl::Status s = Wait(e.Allreduce(name, t, t, o));
  EXPECT_TRUE(s.ok()) << name << ": " << s;
  return x[0];
}

TEST(HostGatherTest, JoinOnARankThatIsNotItsHostsFirst) {
  RunUneven([](Engine& e, int rank) {
    // Rank 5 (host c, whose first rank is 4) joins at once; the others allreduce twice.
    if (rank != 5) {
      for (int step = 0; step < 2; ++step) {
        EXPECT_EQ(SumOf(e, absl::StrCat("j", step), 1), 6.0f) << "step " << step;
      }
    }
    Handle j = e.Join();
    ASSERT_TRUE(Wait(j).ok());
  });
}

TEST(HostGatherTest, ProcessSetOverTwoHosts) {
  RunUneven([](Engine& e, int rank) {
    // Ranks 1 and 2 on host a, 5 and 6 on host c.
    auto set = e.AddProcessSet({1, 2, 5, 6});
    ASSERT_TRUE(set.ok()) << set.status();
    if (rank == 1 || rank == 2 || rank == 5 || rank == 6) {
      for (int step = 0; step < 3; ++step) {
        EXPECT_EQ(SumOf(e, "ps", static_cast<float>(rank), 3, *set), 14.0f) << "step " << step;
      }
    }
    ASSERT_TRUE(Wait(e.Barrier({})).ok());
  });
}

TEST(HostGatherTest, MoreNamesThanTensorIdsKeepTheirValues) {
  // 4 ids at most: 12 names per step retire and reuse ids every step.
  RunUneven(
      [](Engine& e, int rank) {
        for (int step = 0; step < 4; ++step) {
          std::vector<std::vector<float>> x(12, std::vector<float>(2));
          std::vector<Handle> hs;
          for (int i = 0; i < 12; ++i) {
            std::fill(x[i].begin(), x[i].end(), static_cast<float>(rank + i));
            TensorRef t(DataType::kFloat32, {2}, x[i].data());
            AllreduceOptions o;
            o.op = ReduceOp::kSum;
            hs.push_back(e.Allreduce(absl::StrCat("n", (i + step * 5) % 16), t, t, o));
          }
          ASSERT_TRUE(WaitAll(hs).ok()) << "step " << step;
          for (int i = 0; i < 12; ++i) {
            EXPECT_EQ(x[i][1], 21.0f + 7 * i) << "step " << step << " tensor " << i;
          }
        }
      },
      /*max_tensor_ids=*/4);
}

TEST(HostGatherTest, OneRankChangingShapeWhileOthersSendIdsFailsEveryRankAlike) {
  RunUneven([](Engine& e, int rank) {
    for (int step = 0; step < 2; ++step) EXPECT_EQ(SumOf(e, "w", 1), 7.0f);
    // Rank 5 sends w by name with another shape; the others send its id.
    std::vector<float> x(rank == 5 ? 4 : 3, 1);
    TensorRef t(DataType::kFloat32, {static_cast<int64_t>(x.size())}, x.data());
    absl::Status s = Wait(e.Allreduce("w", t, t, {}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "tensor 'w': mismatched ALLREDUCE shapes: rank 0 sent [3], rank 5 sent [4]");
    EXPECT_EQ(SumOf(e, "w", 1), 7.0f);  // unchanged again: by name, then by id
  });
}

}  // namespace
}  // namespace hvx
