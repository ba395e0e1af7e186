// What one negotiation cycle costs the coordinator as the job grows: rank 0's CPU time and the
// bytes each cycle moves, for R simulated ranks and T tensors per cycle, on the two paths a cycle
// takes (hvx/core/SCALING.md reads the numbers):
//
//   bazel run -c opt //hvx/core:scale_bench
//
//   miss  every rank sends a RequestList of T allreduce requests; rank 0 decodes all R, adds them
//         to the Coordinator, builds the response list and encodes it for the broadcast. Bytes:
//         gathered at rank 0, and broadcast to every rank.
//   hit   every rank marks its T cached tensors in a CacheVote, the votes are ANDed (the transport
//         does this in log2(R) exchanges; here the R-way AND on one core, an upper bound of the
//         work any one rank does), and every rank reads the agreed bits and their responses.
//         Bytes: the vote each rank sends per exchange.
//
// Then the same two paths through whole engines over the in-process transport (one thread per
// rank) for small R, to check that the coordinator's share is what the engine spends per cycle.
//
//   init  Init's agreement exchange: every rank's verdict and settings (EncodeSettings),
//         allgathered; each rank decodes all R and compares them (CompareSettings). Per rank: its
//         CPU time and the bytes it receives; then whole engines started over the in-process
//         transport.
//
//   host  the miss path as the engine runs it when ranks share hosts (8 per host): rank 0 merges
//         its host's lists, then decodes the hosts' merged lists. "names": a name's first miss,
//         every request by name; "ids": later misses, every request as the id rank 0 announced.
//         Bytes: what arrives at rank 0 (its host's other ranks' lists, the other hosts' lists).
//
//   allgather  the host section's first miss for 10 allgathers whose first dimension differs on
//         every rank: every rank's request is a distinct submission.
//
// Arguments name the sections to run (miss host allgather hit engines init); none runs them all.
// --ranks=R and --tensors=T keep only the rows of that size (e.g. host --ranks=4096
// --tensors=1000). A miss row whose R x T exceeds kMaxFlatRequests is not run: the coordinator
// would hold that many requests.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "hvx/common/clock.h"
#include "hvx/core/agreement.h"
#include "hvx/core/coordinator.h"
#include "hvx/core/in_process_ranks.h"
#include "hvx/core/message.h"
#include "hvx/core/response_cache.h"

namespace hvx {
namespace {

// 4096 ranks x 1000 tensors: about 2 GB of requests held by the coordinator at once.
constexpr int64_t kMaxFlatRequests = int64_t{4096} * 1000;

// Microseconds per call of fn, over at least 50 ms of calls.
double MicrosPerCall(const std::function<void()>& fn) {
  fn();
  int64_t calls = 0;
  const absl::Time start = MonotonicNow();
  absl::Duration spent;
  do {
    fn();
    ++calls;
    spent = MonotonicNow() - start;
  } while (spent < absl::Milliseconds(50));
  return absl::ToDoubleMicroseconds(spent) / static_cast<double>(calls);
}

RequestList Requests(int rank, int tensors) {
  RequestList list;
  for (int i = 0; i < tensors; ++i) {
    Request r;
    r.rank = rank;
    r.name = absl::StrCat("model.layer", i / 4, ".grad", i % 4);
    r.shape = {256, 64 + i % 7};
    r.reduce_op = ReduceOp::kAverage;
    list.requests.push_back(std::move(r));
  }
  return list;
}

void Miss(int ranks, int tensors) {
  if (int64_t{ranks} * tensors > kMaxFlatRequests) {
    std::printf("miss  ranks %5d  tensors %5d  not run: more than %lld requests\n", ranks, tensors,
                static_cast<long long>(kMaxFlatRequests));
    return;
  }
  std::vector<std::string> sent;
  size_t gathered = 0;
  for (int r = 0; r < ranks; ++r) {
    sent.push_back(EncodeRequestList(Requests(r, tensors)));
    gathered += sent.back().size();
  }
  CoordinatorOptions options;
  options.stall_check_time_s = 0;
  for (int r = 0; r < ranks; ++r) {
    options.global_ranks.push_back(r);
    options.hosts.push_back(absl::StrCat("host", r / 8));
  }
  size_t broadcast = 0;
  const double us = MicrosPerCall([&] {
    Coordinator coordinator(ranks, options);
    const absl::Time now = MonotonicNow();
    for (int r = 0; r < ranks; ++r) (void)coordinator.Add(r, *DecodeRequestList(sent[r]), now);
    broadcast = EncodeResponseList(coordinator.Build(now)).size();
  });
  std::printf(
      "miss  ranks %5d  tensors %5d  rank 0: %10.1f us/cycle  gathered %9zu B  "
      "broadcast %7zu B\n",
      ranks, tensors, us, gathered, broadcast);
}

constexpr int kRanksPerHost = 8;

// Rank `rank`'s requests by id, once the coordinator announced `ids`.
RequestList RequestsById(int rank, int tensors, const std::vector<uint32_t>& ids) {
  RequestList list;
  for (int i = 0; i < tensors; ++i) {
    Request r;
    r.rank = rank;
    r.id = ids[i];
    r.waited_s = 0.001;
    list.requests.push_back(r);
  }
  return list;
}

// Rank 0's cycle when requests are gathered per host (kRanksPerHost ranks each): it merges its
// own host's lists (leader of host 0), then decodes every host's merged list, adds them, builds
// and encodes the response list. Returns the response list's size.
size_t PerHostCycle(Coordinator& coordinator, const std::vector<int32_t>& members0,
                    const std::vector<std::string>& local0, const std::vector<std::string>& hosts) {
  std::vector<RequestList> lists;
  for (const std::string& bytes : local0) lists.push_back(*DecodeRequestList(bytes));
  const std::string mine = EncodeHostRequestList(*MergeHostRequests(members0, lists));
  const absl::Time now = MonotonicNow();
  for (size_t h = 0; h < hosts.size(); ++h) {
    // As the engine reads them (GatherAtCoordinator).
    if (!coordinator.AddEncodedHostList(h == 0 ? mine : hosts[h], h, now).ok()) std::abort();
  }
  return EncodeResponseList(coordinator.Build(now)).size();
}

// What each host's first rank sends: host h's ranks' lists, made by make_list(rank), merged.
// local0: host 0's lists as its first rank receives them.
std::vector<std::string> HostLists(int ranks, const std::function<RequestList(int)>& make_list,
                                   std::vector<int32_t>* members0,
                                   std::vector<std::string>* local0) {
  std::vector<std::string> hosts;
  for (int first = 0; first < ranks; first += kRanksPerHost) {
    std::vector<int32_t> members;
    std::vector<RequestList> lists;
    for (int r = first; r < std::min(ranks, first + kRanksPerHost); ++r) {
      members.push_back(r);
      lists.push_back(make_list(r));
      if (first == 0) local0->push_back(EncodeRequestList(lists.back()));
    }
    if (first == 0) *members0 = members;
    hosts.push_back(EncodeHostRequestList(*MergeHostRequests(members, lists)));
  }
  return hosts;
}

// Bytes arriving at rank 0 in a per-host cycle: its host's other ranks' lists and the other hosts'
// merged lists.
size_t GatheredPerHost(const std::vector<std::string>& local0,
                       const std::vector<std::string>& hosts) {
  size_t n = 0;
  for (size_t i = 1; i < local0.size(); ++i) n += local0[i].size();
  for (size_t h = 1; h < hosts.size(); ++h) n += hosts[h].size();
  return n;
}

// A coordinator's options for `ranks` ranks, kRanksPerHost on each host, stall checks off.
CoordinatorOptions PerHostOptions(int ranks) {
  CoordinatorOptions options;
  options.stall_check_time_s = 0;
  for (int r = 0; r < ranks; ++r) {
    options.global_ranks.push_back(r);
    options.hosts.push_back(absl::StrCat("host", r / kRanksPerHost));
  }
  return options;
}

void MissPerHost(int ranks, int tensors) {
  const CoordinatorOptions options = PerHostOptions(ranks);
  // The first miss of a name: every request by name.
  std::vector<int32_t> members0;
  std::vector<std::string> local0;
  std::vector<std::string> hosts = HostLists(
      ranks, [&](int r) { return Requests(r, tensors); }, &members0, &local0);
  const size_t names_gathered = GatheredPerHost(local0, hosts);
  size_t broadcast = 0;
  std::vector<uint32_t> ids(tensors);
  const double names_us = MicrosPerCall([&] {
    Coordinator coordinator(ranks, options);
    broadcast = PerHostCycle(coordinator, members0, local0, hosts);
  });
  // Later misses: the names the coordinator announced go as ids.
  Coordinator coordinator(ranks, options);
  {
    std::vector<RequestList> lists;
    for (const std::string& bytes : local0) lists.push_back(*DecodeRequestList(bytes));
    const absl::Time now = MonotonicNow();
    for (size_t h = 0; h < hosts.size(); ++h)
      (void)coordinator.AddEncodedHostList(hosts[h], h, now);
    const ResponseList first = coordinator.Build(now);
    if (static_cast<int>(first.assigned.size()) != tensors) std::abort();
    for (int i = 0; i < tensors; ++i) ids[i] = first.assigned[i].id;
  }
  local0.clear();
  hosts = HostLists(
      ranks, [&](int r) { return RequestsById(r, tensors, ids); }, &members0, &local0);
  const size_t ids_gathered = GatheredPerHost(local0, hosts);
  size_t ids_broadcast = 0;
  const double ids_us =
      MicrosPerCall([&] { ids_broadcast = PerHostCycle(coordinator, members0, local0, hosts); });
  std::printf(
      "host  ranks %5d  tensors %5d  rank 0, names: %10.1f us/cycle  gathered %9zu B  "
      "broadcast %7zu B;  ids: %10.1f us/cycle  gathered %9zu B  broadcast %7zu B\n",
      ranks, tensors, names_us, names_gathered, broadcast, ids_us, ids_gathered, ids_broadcast);
}

// T allgathers per rank whose first dimension differs on every rank (rank + 1 rows), as a
// gather of per-rank batches does: each rank's request is its own submission at the coordinator.
RequestList Allgathers(int rank, int tensors) {
  RequestList list;
  for (int i = 0; i < tensors; ++i) {
    Request r;
    r.rank = rank;
    r.type = OpType::kAllgather;
    r.name = absl::StrCat("batch.feature", i);
    r.shape = {rank + 1, 16};
    list.requests.push_back(std::move(r));
  }
  return list;
}

// The per-host miss path (as MissPerHost's first miss) for Allgathers.
void AllgatherPerHost(int ranks, int tensors) {
  const CoordinatorOptions options = PerHostOptions(ranks);
  std::vector<int32_t> members0;
  std::vector<std::string> local0;
  const std::vector<std::string> hosts = HostLists(
      ranks, [&](int r) { return Allgathers(r, tensors); }, &members0, &local0);
  size_t broadcast = 0;
  const double us = MicrosPerCall([&] {
    Coordinator coordinator(ranks, options);
    broadcast = PerHostCycle(coordinator, members0, local0, hosts);
  });
  std::printf(
      "allgather  ranks %5d  tensors %5d  rank 0: %10.1f us/cycle  gathered %9zu B  "
      "broadcast %7zu B\n",
      ranks, tensors, us, GatheredPerHost(local0, hosts), broadcast);
}

void Hit(int ranks, int tensors) {
  const int64_t capacity = std::max<int64_t>(1024, tensors);
  ResponseCache cache(capacity);
  for (int i = 0; i < tensors; ++i) {
    Response r;
    r.names = {absl::StrCat("t", i)};
    r.shapes = {{256, 64}};
    cache.Put(r);
  }
  std::vector<CacheVote> votes(ranks, CacheVote(capacity));
  const double mark = MicrosPerCall([&] {
    CacheVote v(capacity);
    for (int i = 0; i < tensors; ++i) v.Ready(i);
    votes[0] = v;
  });
  for (CacheVote& v : votes) v = votes[0];
  std::vector<uint64_t> combined;
  const double and_all = MicrosPerCall([&] {
    combined = *votes[0].words();
    for (int r = 1; r < ranks; ++r) {
      const std::vector<uint64_t>& w = *votes[r].words();
      for (size_t i = 0; i < combined.size(); ++i) combined[i] &= w[i];
    }
  });
  *votes[0].words() = combined;
  size_t agreed = 0;
  const double read = MicrosPerCall([&] {
    std::vector<Response> ready;
    for (int bit : votes[0].ReadyOnEveryRank()) ready.push_back(cache.Get(bit));
    agreed = ready.size();
  });
  int rounds = 0;
  while ((1 << rounds) < ranks) ++rounds;
  std::printf(
      "hit   ranks %5d  tensors %5d  per rank: mark %6.1f us, read %7.1f us; "
      "%d-way AND %8.1f us; vote %6zu B x %2d exchanges (%zu agreed)\n",
      ranks, tensors, mark, read, ranks, and_all, combined.size() * 8, rounds, agreed);
}

// Whole engines: `ranks` threads each allreduce `tensors` 1-element tensors per step; the time
// per step of rank 0 with the cache off (every cycle a miss) and on (every step after the first
// a hit).
void Engines(int ranks, int tensors, int64_t cache_capacity) {
  InitOptions options = InProcessOptions();
  options.cache_capacity = cache_capacity;
  options.cycle_time_ms = 0.2;
  double per_step_us = 0;
  RunInProcessRanks(
      ranks,
      [&](Engine& e, int rank) {
        std::vector<float> data(tensors, 1.0f);
        const int steps = 20;
        absl::Time start;
        for (int step = 0; step <= steps; ++step) {
          if (step == 1) start = MonotonicNow();
          std::vector<Handle> handles;
          for (int i = 0; i < tensors; ++i) {
            TensorRef t(DataType::kFloat32, {1}, &data[i]);
            handles.push_back(e.Allreduce(absl::StrCat("t", i), t, t, AllreduceOptions()));
          }
          for (Handle& h : handles) (void)h.state()->Wait();
        }
        if (rank == 0) per_step_us = absl::ToDoubleMicroseconds(MonotonicNow() - start) / steps;
      },
      options);
  std::printf("engine ranks %3d  tensors %5d  cache %s: %10.1f us per step\n", ranks, tensors,
              cache_capacity > 0 ? "on " : "off", per_step_us);
}

// What Init exchanges, in the shape Engine::SettingsThatMustAgree gives it.
std::string InitMessage() {
  const Settings settings = {
      {"hvx build",
       "wire format 5, compiler 12.2.0, GPU data plane not linked, shared-memory CPU plane linked"},
      {"transport", "mpi (MPICH Version: 4.0.2)"},
      {"HVX_FUSION_THRESHOLD", "128MiB"},
      {"HVX_CACHE_CAPACITY", "1024"},
      {"HVX_FIXED_REDUCTION_ORDER", "1"},
      {"HVX_COLLECTIVE_TIMEOUT_S", "300"},
      {"HVX_CPU_PLANE", "auto"},
      {"HVX_HIERARCHICAL_ALLREDUCE", "0"},
      {"HVX_NCCL_HALF_IN_FLOAT32", "0"},
      {"process sets", ""},
  };
  return EncodeSettings({{"verdict", ""}, {"settings", EncodeSettings(settings)}});
}

// One rank's share of Init's agreement among `ranks`: decode every rank's message, compare the
// settings. Every rank does this; the allgather brings it R messages.
void InitAgreement(int ranks) {
  const std::vector<std::string> exchanged(ranks, InitMessage());
  const double us = MicrosPerCall([&] {
    std::vector<std::string> settings;
    for (const std::string& m : exchanged) settings.push_back((*DecodeSettings(m))[1].second);
    if (!CompareSettings(settings).ok()) std::abort();
  });
  std::printf("init  ranks %5d  per rank: agreement %10.1f us  receives %9zu B\n", ranks, us,
              exchanged.size() * exchanged[0].size());
}

// Whole engines started at once over the in-process transport (one thread each, oversubscribed):
// the slowest Engine::Start, which includes the topology allgather and the agreement exchange.
void InitEngines(int ranks) {
  auto hub = std::make_shared<FakeHub>(ranks);
  std::vector<std::unique_ptr<Engine>> engines(ranks);
  std::vector<double> start_us(ranks);
  std::vector<std::thread> threads;
  const absl::Time begin = MonotonicNow();
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions eo;
      eo.hostname = absl::StrCat("host", r / 8);
      eo.command_line = "prog";
      eo.exit_on_finalize_timeout = false;
      const absl::Time t0 = MonotonicNow();
      auto engine = Engine::Start(InProcessOptions(), std::make_unique<FakeTransport>(hub, r), eo);
      start_us[r] = absl::ToDoubleMicroseconds(MonotonicNow() - t0);
      if (!engine.ok()) std::abort();
      engines[r] = std::move(*engine);
    });
  }
  for (auto& t : threads) t.join();
  const double all_us = absl::ToDoubleMicroseconds(MonotonicNow() - begin);
  threads.clear();
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] { (void)engines[r]->Shutdown(); });
  }
  for (auto& t : threads) t.join();
  std::printf("init  ranks %5d  engines: slowest Start %10.1f us, all started %10.1f us\n", ranks,
              *std::max_element(start_us.begin(), start_us.end()), all_us);
}

}  // namespace
}  // namespace hvx

int main(int argc, char** argv) {
  std::vector<absl::string_view> sections;
  int only_ranks = 0, only_tensors = 0;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    int* number = absl::ConsumePrefix(&arg, "--ranks=")     ? &only_ranks
                  : absl::ConsumePrefix(&arg, "--tensors=") ? &only_tensors
                                                            : nullptr;
    if (number != nullptr ? !absl::SimpleAtoi(arg, number) : absl::StartsWith(arg, "-")) {
      std::fprintf(stderr, "scale_bench: bad argument %s\n", argv[i]);
      return 2;
    }
    if (number == nullptr) sections.push_back(arg);
  }
  const auto wanted = [&](absl::string_view section) {
    return sections.empty() ||
           std::find(sections.begin(), sections.end(), section) != sections.end();
  };
  // Whether the row of `ranks` and `tensors` (0: the section has no such column) is run.
  const auto row = [&](int ranks, int tensors) {
    return (only_ranks == 0 || ranks == only_ranks) &&
           (only_tensors == 0 || tensors == 0 || tensors == only_tensors);
  };
  if (wanted("miss")) {
    for (int tensors : {10, 100, 1000}) {
      for (int ranks : {8, 64, 256, 1024, 4096, 16384}) {
        if (row(ranks, tensors)) hvx::Miss(ranks, tensors);
      }
    }
  }
  if (wanted("host")) {
    for (int tensors : {10, 100, 1000}) {
      for (int ranks : {8, 64, 256, 1024, 4096, 16384}) {
        if (row(ranks, tensors)) hvx::MissPerHost(ranks, tensors);
      }
    }
  }
  if (wanted("allgather")) {
    for (int ranks : {64, 256, 1024, 4096}) {
      if (row(ranks, 10)) hvx::AllgatherPerHost(ranks, 10);
    }
  }
  if (wanted("hit")) {
    for (int tensors : {10, 100, 1000}) {
      for (int ranks : {8, 64, 256, 1024, 4096, 16384}) {
        if (row(ranks, tensors)) hvx::Hit(ranks, tensors);
      }
    }
  }
  if (wanted("engines")) {
    for (int tensors : {10, 100}) {
      for (int ranks : {2, 8}) {
        if (!row(ranks, tensors)) continue;
        hvx::Engines(ranks, tensors, 0);
        hvx::Engines(ranks, tensors, 1024);
      }
    }
  }
  if (wanted("init")) {
    for (int ranks : {64, 256, 1024, 4096, 16384}) {
      if (row(ranks, 0)) hvx::InitAgreement(ranks);
    }
    for (int ranks : {64, 256, 1024}) {
      if (row(ranks, 0)) hvx::InitEngines(ranks);
    }
  }
  return 0;
}
