// The engine over the in-process transport: several Engines in one process, one per "rank", each
// with its own background thread. Checks what a user sees: values, errors on every rank, the
// response cache's fast path, join, topology and Init's refusal of bad environments.
#include "hvx/core/engine.h"

#include <dirent.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "hvx/common/half.h"
#include "hvx/common/status.h"
#include "hvx/core/fake_transport.h"
#include "hvx/core/in_process_ranks.h"

namespace hvx {
namespace {

InitOptions Options() { return InProcessOptions(); }

void RunRanks(int n, const std::function<void(Engine&, int)>& fn, InitOptions options = Options(),
              std::vector<std::string> hosts = {}, std::shared_ptr<FakeHub> hub = nullptr) {
  RunInProcessRanks(n, fn, std::move(options), std::move(hosts), std::move(hub));
}

// HVX_CPU_PLANE=shm names a plane this binary does not link (//hvx/shm:cpu_plane): CPU ops fail on
// every rank naming what to link, while auto keeps the transport's own plane (every test here).
TEST(EngineTest, ShmCpuPlaneWithoutItsPackageFailsNamingIt) {
  InitOptions o = Options();
  o.cpu_plane = "shm";
  RunRanks(
      2,
      [](Engine& e, int rank) {
        float x = 1.0f;
        TensorRef t(DataType::kFloat32, {1}, &x);
        const absl::Status s = Wait(e.Allreduce("x", t, t, {}));
        EXPECT_TRUE(absl::StrContains(s.message(), "link //hvx/shm:cpu_plane"))
            << rank << ": " << s;
      },
      o);
}

TEST(EngineTest, AllreduceAverageFloat16OverThreeRanks) {
  RunRanks(3, [](Engine& e, int rank) {
    std::vector<uint16_t> x(5, FloatToHalf(static_cast<float>(3 * rank)));
    TensorRef t(DataType::kFloat16, {5}, x.data());
    ASSERT_TRUE(Wait(e.Allreduce("h", t, t, {})).ok());
    for (uint16_t v : x) EXPECT_EQ(HalfToFloat(v), 3.0f);  // (0 + 3 + 6) / 3
  });
}

TEST(EngineTest, SecondStepUsesTheCacheWithoutGathering) {
  auto hub = std::make_shared<FakeHub>(2);
  RunRanks(
      2,
      [&](Engine& e, int rank) {
        std::vector<std::vector<float>> grads(20, std::vector<float>(8));
        auto step = [&] {
          std::vector<Handle> hs;
          for (size_t i = 0; i < grads.size(); ++i) {
            std::fill(grads[i].begin(), grads[i].end(), static_cast<float>(rank + i));
            TensorRef t(DataType::kFloat32, {8}, grads[i].data());
            hs.push_back(e.Allreduce(absl::StrCat("g", i), t, t, {}));
          }
          ASSERT_TRUE(WaitAll(hs).ok());
          for (size_t i = 0; i < grads.size(); ++i) EXPECT_EQ(grads[i][0], i + 0.5f);
        };
        step();
        // Let both ranks pass the first step before sampling the counter.
        ASSERT_TRUE(Wait(e.Barrier({})).ok());
        const int64_t before = hub->gathers();
        step();
        step();
        // Sampled before a third cached step: the other rank can be in that step at most, never
        // at the next barrier (whose negotiation gathers), since the step needs this rank too.
        const int64_t after = hub->gathers();
        step();
        EXPECT_EQ(after, before) << "cached steps went through the coordinator";
        ASSERT_TRUE(Wait(e.Barrier({})).ok());
      },
      Options(), {}, hub);
}

TEST(EngineTest, IdleCyclesBackOffToFiveMilliseconds) {
  const absl::Duration ms = absl::Milliseconds(1);
  EXPECT_EQ(IdleCycleTime(ms, 0), ms);
  EXPECT_EQ(IdleCycleTime(ms, 8), ms);
  EXPECT_EQ(IdleCycleTime(ms, 9), 2 * ms);
  EXPECT_EQ(IdleCycleTime(ms, 10), 4 * ms);
  EXPECT_EQ(IdleCycleTime(ms, 11), 5 * ms);
  EXPECT_EQ(IdleCycleTime(ms, 1000000), 5 * ms);
  // A longer cycle chosen by the user is kept; 0 (poll) stays 0.
  EXPECT_EQ(IdleCycleTime(20 * ms, 100), 20 * ms);
  EXPECT_EQ(IdleCycleTime(absl::ZeroDuration(), 100), absl::ZeroDuration());
}

// An idle engine voted every millisecond, a wake-up of its thread each time, taken from training on
// a busy host (issue: 7-9% of a core for an idle rank). It backs off to 5 ms, and the first op
// after an idle spell still completes promptly.
TEST(EngineTest, AnIdleEngineWakesRarelyAndStillAnswersAtOnce) {
  auto hub = std::make_shared<FakeHub>(2);
  RunRanks(
      2,
      [&](Engine& e, int rank) {
        ASSERT_TRUE(Wait(e.Barrier({})).ok());
        absl::SleepFor(absl::Milliseconds(100));  // into the backed-off cycle
        const int64_t before = hub->votes();
        absl::SleepFor(absl::Milliseconds(500));
        const int64_t votes = hub->votes() - before;
        // 1 ms cycles would vote about 500 times; 5 ms ones about 100.
        EXPECT_LT(votes, 160) << "votes in 500 ms of idleness";
        std::vector<float> x(4, static_cast<float>(rank));
        TensorRef t(DataType::kFloat32, {4}, x.data());
        const absl::Time start = absl::Now();
        ASSERT_TRUE(Wait(e.Allreduce("after_idle", t, t, {})).ok());
        EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
        EXPECT_EQ(x[0], 0.5f);
      },
      Options(), {}, hub);
}

// How many threads of this process run SCHED_BATCH.
int BatchThreads() {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (const dirent* entry = readdir(dir)) {
    const int tid = std::atoi(entry->d_name);
    if (tid > 0 && sched_getscheduler(tid) == SCHED_BATCH) ++n;
  }
  closedir(dir);
  return n;
}

// A submission wakes the background thread; under SCHED_OTHER that wake-up could preempt the
// submitting thread on a busy core and finish the op before the submitter's next line, so that a
// poll right after submitting never saw an op pending (Horovod's test_horovod_allreduce_async_fused
// failed on 3 of 10 runs of its file at np 2 here). The threads wait for submissions as
// SCHED_BATCH, whose wake-ups do not preempt, and work as SCHED_OTHER (the output allocator runs
// on the engine thread); HVX_ENGINE_SCHED=normal keeps SCHED_OTHER throughout.
TEST(EngineTest, BackgroundThreadsWaitingForSubmissionsDoNotPreemptTheirSubmitters) {
  if (sched_getscheduler(0) != SCHED_OTHER) {
    GTEST_SKIP() << "this process runs under policy " << sched_getscheduler(0)
                 << ", which the engine keeps";
  }
  for (const std::string sched : {"batch", "normal"}) {
    std::atomic<int> idle_batch{-1};
    std::atomic<int> working_policy{-1};
    InitOptions options = Options();
    options.engine_sched = sched;
    RunRanks(
        2,
        [&](Engine& e, int rank) {
          ASSERT_TRUE(Wait(e.Barrier({})).ok());
          // Both engines idle (nothing submitted on either rank); each leaves its wait for a
          // moment every cycle to vote.
          if (rank == 0) {
            int most = 0;
            for (int i = 0; i < 200 && most < 2; ++i) {
              most = std::max(most, BatchThreads());
              absl::SleepFor(absl::Milliseconds(1));
            }
            idle_batch = most;
          }
          while (idle_batch.load() < 0) absl::SleepFor(absl::Milliseconds(1));
          ASSERT_TRUE(Wait(e.Barrier({})).ok());
          std::vector<float> x(2, 1.0f), out(4);
          CollectiveOptions o;
          o.allocator = [&](DataType dtype, const TensorShape& shape,
                            const Device&) -> absl::StatusOr<TensorRef> {
            if (rank == 0) working_policy = sched_getscheduler(0);
            return TensorRef(dtype, shape, out.data());
          };
          ASSERT_TRUE(
              Wait(e.Allgather("policy", TensorRef(DataType::kFloat32, {2}, x.data()), o)).ok());
        },
        options);
    EXPECT_EQ(idle_batch.load(), sched == "batch" ? 2 : 0) << "HVX_ENGINE_SCHED=" << sched;
    EXPECT_EQ(working_policy.load(), SCHED_OTHER) << "HVX_ENGINE_SCHED=" << sched;
  }
  auto bad = InitOptions::FromEnv(MapEnvironment({{"HVX_ENGINE_SCHED", "fifo"}}));
  EXPECT_EQ(bad.status().message(), "HVX_ENGINE_SCHED='fifo': must be batch or normal");
}

TEST(EngineTest, MismatchReachesEveryRank) {
  RunRanks(3, [](Engine& e, int rank) {
    std::vector<float> x(4 + (rank == 2));
    TensorRef t(DataType::kFloat32, {static_cast<int64_t>(x.size())}, x.data());
    absl::Status s = Wait(e.Allreduce("bad", t, t, {}));
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "mismatched ALLREDUCE shapes: rank 0 sent [4], rank 2 sent [5]"))
        << s;
  });
}

// The flight recorder: each rank's ring holds its ops with their set, sequence and states; an op
// one rank never submitted stays failed by the timeout on the other, naming the absent rank, and
// the absent rank's ring shows it never had it.
TEST(EngineTest, TheFlightRecorderKeepsEachRanksOpsAndTheirStates) {
  std::vector<std::vector<char>> rings(2, std::vector<char>(FlightRingBytes()));
  InitOptions options = Options();
  options.collective_timeout_s = 1;
  RunInProcessRanks(2,
                    [](Engine& e, int rank) {
                      std::vector<float> x(1024, 1.0f);
                      TensorRef t(DataType::kFloat32, {1024}, x.data());
                      ASSERT_TRUE(Wait(e.Allreduce("grad.a", t, t, {})).ok());
                      if (rank == 0) {
                        SetCallerForThisThread("train.py:7");  // as hvx.torch says it
                        const Handle h = e.Allreduce("grad.b", t, t, {});
                        SetCallerForThisThread("");
                        const absl::Status s = Wait(h);
                        EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
                      } else {
                        absl::SleepFor(absl::Seconds(2));
                      }
                    },
                    options, {}, nullptr, {rings[0].data(), rings[1].data()});
  const std::vector<FlightEvent> r0 = ReadFlightRing(rings[0].data(), rings[0].size());
  const std::vector<FlightEvent> r1 = ReadFlightRing(rings[1].data(), rings[1].size());
  ASSERT_EQ(r0.size(), 2u);
  ASSERT_EQ(r1.size(), 1u);
  for (const FlightEvent& a : {r0[0], r1[0]}) {
    EXPECT_EQ(a.name, "grad.a");
    EXPECT_EQ(a.state, FlightState::kDone);
    EXPECT_EQ(a.seq, 1u);
    EXPECT_EQ(a.set_id, 0);
    EXPECT_EQ(a.op, "ALLREDUCE");
    EXPECT_EQ(a.dtype, "float32");
    EXPECT_EQ(a.bytes, 4096);
    EXPECT_GT(a.submitted_ns, 0);
    EXPECT_GE(a.negotiated_ns, a.submitted_ns);
    EXPECT_GE(a.done_ns, a.negotiated_ns);
  }
  const FlightEvent& b = r0[1];
  EXPECT_EQ(b.name, "grad.b");
  EXPECT_EQ(b.caller, "train.py:7");
  EXPECT_EQ(r0[0].caller, "");
  EXPECT_EQ(b.seq, 2u);
  EXPECT_EQ(b.state, FlightState::kFailed);
  EXPECT_EQ(b.code, static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(absl::StrContains(b.error, "rank 1")) << b.error;
  EXPECT_EQ(b.negotiated_ns, 0);  // it never got past negotiation
  EXPECT_GE(b.done_ns - b.submitted_ns, 1000000000);
}

// HVX_FLIGHT_FD is honoured only for the rank wrapper's memfd: a program that holds another file
// open under that number (inherited the variable from a process it was started by) keeps it
// intact; the memfd gets the ops.
TEST(EngineTest, TheFlightRecorderMapsOnlyTheWrappersMemfd) {
  auto run_one_op = [] {
    RunInProcessRanks(2, [](Engine& e, int) {
      std::vector<float> x(16, 1.0f);
      TensorRef t(DataType::kFloat32, {16}, x.data());
      ASSERT_TRUE(Wait(e.Allreduce("x", t, t, {})).ok());
    });
  };
  char path[] = "/tmp/hvx-flight-test-XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(file, static_cast<off_t>(FlightRingBytes())), 0);
  setenv(kFlightFdVariable, std::to_string(file).c_str(), 1);
  run_one_op();
  std::vector<char> bytes(FlightRingBytes());
  ASSERT_EQ(pread(file, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; }));
  close(file);

  const int memfd = memfd_create(kFlightMemfdName, 0);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, static_cast<off_t>(FlightRingBytes())), 0);
  setenv(kFlightFdVariable, std::to_string(memfd).c_str(), 1);
  run_one_op();
  unsetenv(kFlightFdVariable);
  ASSERT_EQ(pread(memfd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  const std::vector<FlightEvent> events = ReadFlightRing(bytes.data(), bytes.size());
  // Both in-process ranks share the one ring here, each numbering on from the other's ops.
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].name, "x");
  EXPECT_NE(events[0].op_id, events[1].op_id);
  close(memfd);
}

// An output on another device than its input: a plane would write where the input lives through
// the output's pointer. Refused at the call, like a size or dtype that differs.
TEST(EngineTest, AnAllreduceOutputOnAnotherDeviceIsRefused) {
  RunRanks(1, [](Engine& e, int) {
    std::vector<float> x(4), y(4);
    TensorRef in(DataType::kFloat32, {4}, x.data());
    TensorRef out(DataType::kFloat32, {4}, y.data(), Device::Cuda(0));
    absl::Status s = Wait(e.Allreduce("devices", in, out, {}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "allreduce 'devices': output float32[4] cuda:0 "
                                  "does not match input float32[4] cpu"))
        << s;
  });
}

TEST(EngineTest, DuplicateNameFailsOnlyTheSecondSubmission) {
  RunRanks(2, [](Engine& e, int rank) {
    std::vector<float> x(2, 1.0f);
    TensorRef t(DataType::kFloat32, {2}, x.data());
    Handle a = e.Allreduce("same", t, t, {});
    if (rank == 0) {
      absl::Status s = Wait(e.Allreduce("same", t, t, {}));
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StrContains(s.message(), "'same'")) << s;
    }
    EXPECT_TRUE(Wait(a).ok());
  });
}

TEST(EngineTest, JoinAveragesWithZerosOverFullSize) {
  RunRanks(3, [](Engine& e, int rank) {
    std::vector<double> x(3);
    TensorRef t(DataType::kFloat64, {3}, x.data());
    if (rank == 1) {
      Handle j = e.Join();
      ASSERT_TRUE(Wait(j).ok());
      EXPECT_EQ(j.last_joined_rank(), 2);
      return;
    }
    std::fill(x.begin(), x.end(), 3.0);
    ASSERT_TRUE(Wait(e.Allreduce("jg", t, t, {})).ok());
    EXPECT_EQ(x[0], 2.0);  // (3 + 0 + 3) / 3
    if (rank == 2) usleep(50000);
    Handle j = e.Join();
    ASSERT_TRUE(Wait(j).ok());
    EXPECT_EQ(j.last_joined_rank(), 2);
  });
}

TEST(EngineTest, ProcessSetsOfEvenAndOddRanks) {
  RunRanks(4, [](Engine& e, int rank) {
    auto even = e.AddProcessSet({0, 2});
    auto odd = e.AddProcessSet({3, 1});
    ASSERT_TRUE(even.ok() && odd.ok());
    EXPECT_EQ(e.ProcessSetRanks(odd->id()), (std::vector<int>{1, 3}));
    std::vector<int32_t> x(2, rank);
    TensorRef t(DataType::kInt32, {2}, x.data());
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.process_set = rank % 2 == 0 ? *even : *odd;
    absl::Status ps = Wait(e.Allreduce("ps", t, t, o));
    ASSERT_TRUE(ps.ok()) << ps;
    EXPECT_EQ(x[0], rank % 2 == 0 ? 2 : 4);
    CollectiveOptions c;
    c.process_set = o.process_set;
    Handle g = e.Allgather("ps.gather", t, c);
    ASSERT_TRUE(Wait(g).ok());
    EXPECT_EQ(g.output().shape(), TensorShape({4}));
    // One rank's Shutdown ends the job for all: wait until the other set is done too.
    ASSERT_TRUE(Wait(e.Barrier({})).ok());
  });
}

TEST(EngineTest, TopologyOfSimulatedHosts) {
  RunRanks(4,
           [](Engine& e, int rank) {
             const Topology& t = e.topology();
             EXPECT_EQ(t.rank, rank);
             EXPECT_EQ(t.local_size, 2);
             EXPECT_EQ(t.local_rank, rank % 2);
             EXPECT_EQ(t.cross_size, 2);
             EXPECT_EQ(t.cross_rank, rank / 2);
             EXPECT_TRUE(t.homogeneous);
           },
           Options(), {"a", "a", "b", "b"});
}

// Hosts of 3, 1 and 3 ranks: requests are gathered per host, and from the second cycle on a name
// travels as its id; neither changes what any rank sees.
const std::vector<std::string> kUnevenHosts = {"a", "a", "a", "b", "c", "c", "c"};

TEST(EngineTest, UnevenHostsGatherPerHostAndSendIdsWithTheSameResults) {
  InitOptions options = Options();
  options.cache_capacity = 0;  // every cycle negotiates
  RunRanks(
      7,
      [](Engine& e, int rank) {
        for (int step = 0; step < 4; ++step) {
          // Step 2 changes every rank's shapes: the ids' requests change with them.
          const int64_t n = step == 2 ? 6 : 4;
          std::vector<std::vector<float>> grads(5, std::vector<float>(n));
          std::vector<Handle> hs;
          for (size_t i = 0; i < grads.size(); ++i) {
            std::fill(grads[i].begin(), grads[i].end(), static_cast<float>(rank * 2 + i));
            TensorRef t(DataType::kFloat32, {n}, grads[i].data());
            AllreduceOptions o;
            o.op = ReduceOp::kAverage;
            hs.push_back(e.Allreduce(absl::StrCat("g", i), t, t, o));
          }
          ASSERT_TRUE(WaitAll(hs).ok()) << "step " << step;
          for (size_t i = 0; i < grads.size(); ++i) {
            EXPECT_EQ(grads[i][n - 1], 6.0f + i) << "step " << step;  // (0 + 2 + ... + 12) / 7
          }
        }
        // A name every rank sent before, now float32 everywhere but on rank 5 (host c, not its
        // first rank): the same error on every rank as from a flat gather.
        std::vector<float> f(3, 1);
        std::vector<int32_t> i32(3, 1);
        TensorRef t = rank == 5 ? TensorRef(DataType::kInt32, {3}, i32.data())
                                : TensorRef(DataType::kFloat32, {3}, f.data());
        absl::Status s = Wait(e.Allreduce("g1", t, t, {}));
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_EQ(s.message(),
                  "tensor 'g1': mismatched data types: rank 0 sent float32, rank 5 sent int32");
      },
      options, kUnevenHosts);
}

TEST(EngineTest, StallInspectorNamesTheMissingRankOfAnotherHost) {
  InitOptions options = Options();
  options.stall_check_time_s = 0.2;
  options.stall_shutdown_time_s = 0.5;
  std::atomic<int> failed{0};
  RunRanks(
      7,
      [&](Engine& e, int rank) {
        std::vector<float> x(2, 1);
        TensorRef t(DataType::kFloat32, {2}, x.data());
        ASSERT_TRUE(Wait(e.Allreduce("warm", t, t, {})).ok());
        if (rank != 4) {
          absl::Status s = Wait(e.Allreduce("w", t, t, {}));
          EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
          EXPECT_TRUE(absl::StrContains(s.message(), "Missing ranks:\n  4: [w]\n")) << s;
          ++failed;
        } else {
          while (failed.load() < 6) absl::SleepFor(absl::Milliseconds(5));
        }
        ASSERT_TRUE(Wait(e.Barrier({})).ok());
      },
      options, kUnevenHosts);
}

TEST(EngineTest, KnobsFromTheEnvironment) {
  auto defaults = InitOptions::FromEnv(MapEnvironment({}));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_TRUE(defaults->fixed_reduction_order);
  auto off = InitOptions::FromEnv(
      MapEnvironment({{"HVX_FIXED_REDUCTION_ORDER", "0"}, {"HVX_CACHE_CAPACITY", "7"}}));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->fixed_reduction_order);
  EXPECT_EQ(off->cache_capacity, 7);
  auto bad = InitOptions::FromEnv(MapEnvironment({{"HVX_FIXED_REDUCTION_ORDER", "sometimes"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "HVX_FIXED_REDUCTION_ORDER"))
      << bad.status();
}

TEST(EngineTest, SingletonWithClusterEvidenceFailsUnlessAllowed) {
  MapEnvironment env{{"PMI_SIZE", "4"}};
  InitOptions o = Options();
  o.environment = &env;
  EngineOptions eo;
  eo.command_line = "prog --x";
  eo.exit_on_finalize_timeout = false;
  auto e = Engine::Start(o, std::make_unique<FakeTransport>(std::make_shared<FakeHub>(1), 0), eo);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(e.status().message(), "hvxrun -np 4 -H localhost:4 -- prog --x"))
      << e.status();
  o.allow_singleton = true;
  auto ok = Engine::Start(o, std::make_unique<FakeTransport>(std::make_shared<FakeHub>(1), 0), eo);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->topology().size, 1);
}

TEST(EngineTest, LauncherDisagreementFailsInitOnEveryRank) {
  auto hub = std::make_shared<FakeHub>(2);
  MapEnvironment wrong{{"HVX_RANK", "1"}};
  MapEnvironment right{{"HVX_RANK", "1"}};
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      InitOptions o = Options();
      o.environment = r == 0 ? &wrong : &right;
      EngineOptions eo;
      eo.exit_on_finalize_timeout = false;
      results[r] = Engine::Start(o, std::make_unique<FakeTransport>(hub, r), eo).status();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(absl::StrContains(results[0].message(), "HVX_RANK=1 but the transport reports 0"))
      << results[0];
  EXPECT_TRUE(absl::StrContains(results[1].message(), "failed on rank 0")) << results[1];
}

TEST(EngineTest, RegisteredInitCheckFailingOnOneRankFailsInitOnEveryRank) {
  // The check is collective (it gathers every rank's local rank first) and fails only on rank 1.
  std::atomic<int> calls{0};
  RegisterInitCheck("test_binding", [&calls](const InitCheckContext& ctx) -> absl::Status {
    ++calls;
    std::vector<std::string> all;
    HVX_RETURN_IF_ERROR(
        ctx.comm->Allgather(absl::StrCat(ctx.local_rank, "/", ctx.local_size), &all));
    if (all != std::vector<std::string>{"0/2", "1/2"})
      return absl::InternalError(absl::StrJoin(all, ","));
    if (ctx.rank == 1) return absl::FailedPreconditionError("rank 1 has no device of its own");
    return absl::OkStatus();
  });
  auto hub = std::make_shared<FakeHub>(2);
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions eo;
      eo.hostname = "host";
      eo.exit_on_finalize_timeout = false;
      results[r] = Engine::Start(Options(), std::make_unique<FakeTransport>(hub, r), eo).status();
    });
  }
  for (auto& t : threads) t.join();
  RegisterInitCheck("test_binding", nullptr);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(results[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(results[1].message(), "Init check test_binding")) << results[1];
  EXPECT_TRUE(absl::StrContains(results[1].message(), "rank 1 has no device of its own"))
      << results[1];
  EXPECT_TRUE(absl::StrContains(results[0].message(), "hvx::Init failed on rank 1")) << results[0];
  EXPECT_TRUE(absl::StrContains(results[0].message(), "rank 1 has no device of its own"))
      << results[0];
  EXPECT_TRUE(RegisteredInitChecks().empty());
}

TEST(EngineTest, PassingInitCheckLetsInitSucceed) {
  std::atomic<int> calls{0};
  RegisterInitCheck("test_ok", [&calls](const InitCheckContext& ctx) {
    ++calls;
    return ctx.size == 2 && ctx.visible_gpus == 0 ? absl::OkStatus()
                                                  : absl::InternalError("unexpected context");
  });
  RunRanks(2, [](Engine& e, int rank) { EXPECT_EQ(e.topology().rank, rank); });
  RegisterInitCheck("test_ok", nullptr);
  EXPECT_EQ(calls.load(), 2);
}

TEST(EngineTest, OpsAfterShutdownFail) {
  RunRanks(2, [](Engine& e, int) {
    ASSERT_TRUE(e.Shutdown().ok());
    std::vector<float> x(1);
    TensorRef t(DataType::kFloat32, {1}, x.data());
    EXPECT_TRUE(absl::StrContains(Wait(e.Allreduce("late", t, t, {})).message(), "shut down"));
  });
}

TEST(EngineTest, ShutdownIsBoundedWhenFinalizationHangs) {
  auto transport = std::make_unique<FakeTransport>(std::make_shared<FakeHub>(1), 0);
  transport->set_finalize_delay(absl::Seconds(2));
  InitOptions o = Options();
  o.shutdown_timeout_s = 0.2;
  EngineOptions eo;
  eo.exit_on_finalize_timeout =
      false;  // production exits with kShutdownTimeoutExitCode here instead
  auto e = Engine::Start(o, std::move(transport), eo);
  ASSERT_TRUE(e.ok()) << e.status();
  const absl::Time start = absl::Now();
  absl::Status s = (*e)->Shutdown();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(1.5));
}

// Three ranks allgather 4 floats each into an output `allocate(rank, ...)` gives; returns each
// rank's status through `check`, then checks that the job goes on: the next collective works on
// every rank.
void AllgatherWithAllocator(
    const std::string& name,
    std::function<absl::StatusOr<TensorRef>(int rank, DataType, const TensorShape&, float*)>
        allocate,
    std::function<void(int rank, const absl::Status&)> check) {
  RunRanks(3, [&](Engine& e, int rank) {
    std::vector<float> x(4, static_cast<float>(rank));
    CollectiveOptions o;
    std::vector<float> out(12);
    o.allocator = [&, rank](DataType dtype, const TensorShape& shape, const Device&) {
      return allocate(rank, dtype, shape, out.data());
    };
    check(rank, Wait(e.Allgather(name, TensorRef(DataType::kFloat32, {4}, x.data()), o)));
    std::vector<float> y(2, 1.0f);
    TensorRef t(DataType::kFloat32, {2}, y.data());
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    EXPECT_TRUE(Wait(e.Allreduce(name + ".after", t, t, sum)).ok());
    EXPECT_EQ(y[0], 3.0f);
  });
}

TEST(EngineTest, OutputThatOneRankCannotAllocateFailsEveryRankBeforeTheCollective) {
  AllgatherWithAllocator(
      "gathered",
      [](int rank, DataType dtype, const TensorShape& shape,
         float* out) -> absl::StatusOr<TensorRef> {
        if (rank == 1) return absl::ResourceExhaustedError("no memory for 12 floats on purpose");
        return TensorRef(dtype, shape, out);
      },
      [](int rank, const absl::Status& s) {
        if (rank == 1) {
          EXPECT_EQ(s.message(), "no memory for 12 floats on purpose");
        } else {
          EXPECT_EQ(s.message(),
                    "tensor 'gathered': rank 1 (host host) could not take part: no memory for 12 "
                    "floats on purpose");
        }
      });
}

// A failure without a message is still one: the other ranks name the rank (they were told "no rank
// failed" before).
TEST(EngineTest, AnAllocationFailureWithoutAMessageIsNamedOnEveryRank) {
  AllgatherWithAllocator(
      "silent",
      [](int rank, DataType dtype, const TensorShape& shape,
         float* out) -> absl::StatusOr<TensorRef> {
        if (rank == 1) return absl::ResourceExhaustedError("");
        return TensorRef(dtype, shape, out);
      },
      [](int rank, const absl::Status& s) {
        if (rank == 1) {
          EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
        } else {
          EXPECT_EQ(s.message(), "tensor 'silent': rank 1 (host host) could not take part: ");
        }
      });
}

// An allocator that throws (LibTorch's at::empty out of memory, std::bad_alloc) is an allocation
// failure like any other: before, the exception reached std::terminate on the engine thread.
TEST(EngineTest, AnAllocatorThatThrowsFailsEveryRankAndTheJobGoesOn) {
  AllgatherWithAllocator(
      "thrown",
      [](int rank, DataType dtype, const TensorShape& shape,
         float* out) -> absl::StatusOr<TensorRef> {
        if (rank == 2) throw std::bad_alloc();
        return TensorRef(dtype, shape, out);
      },
      [](int rank, const absl::Status& s) {
        EXPECT_EQ(s.code(), rank == 2 ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kFailedPrecondition)
            << s;
        EXPECT_TRUE(absl::StrContains(
            s.message(), "tensor 'thrown': allocating its output of 48 bytes (float32[12]) failed"))
            << s;
        if (rank != 2) {
          EXPECT_TRUE(absl::StrContains(s.message(), "rank 2 (host host)")) << s;
        }
      });
}

// Straggler detection, with the response cache's vote and without it (every cycle through the
// coordinator): 4 ranks step in lockstep; rank 3's step takes 20% longer. It is named within 50
// steps on every rank, with its lateness; in a clean run of as many steps nobody is.
void RunLockstep(int64_t cache_capacity, int slow_rank, int steps, std::vector<int>* named_at,
                 std::vector<StragglerStatus>* last, int step_ms = 20) {
  InitOptions o = Options();
  o.cache_capacity = cache_capacity;
  named_at->assign(4, -1);
  last->assign(4, {});
  RunRanks(
      4,
      [&](Engine& e, int rank) {
        std::vector<float> g(16, 1.0f);
        TensorRef t(DataType::kFloat32, {16}, g.data());
        for (int step = 0; step < steps; ++step) {
          absl::SleepFor(absl::Milliseconds(rank == slow_rank ? step_ms * 6 / 5 : step_ms));
          ASSERT_TRUE(Wait(e.Allreduce("grad", t, t, {})).ok());
          if ((*named_at)[rank] < 0 && e.Stragglers().rank >= 0) (*named_at)[rank] = step;
        }
        (*last)[rank] = e.Stragglers();
      },
      o);
}

TEST(EngineTest, ARankTwentyPercentSlowerIsNamedWithinFiftySteps) {
  for (int64_t capacity : {int64_t{1024}, int64_t{0}}) {
    SCOPED_TRACE(absl::StrCat("cache capacity ", capacity));
    std::vector<int> named_at;
    std::vector<StragglerStatus> last;
    RunLockstep(capacity, 3, 50, &named_at, &last);
    for (int r = 0; r < 4; ++r) {
      EXPECT_GE(named_at[r], 0) << "rank " << r << " never named the straggler";
      EXPECT_EQ(last[r].rank, 3) << "rank " << r;
      EXPECT_TRUE(absl::StrContains(last[r].warning, "rank 3 (host host, local rank 3) is late"))
          << last[r].warning;
      ASSERT_EQ(last[r].late_ms.size(), 4u);
      EXPECT_GT(last[r].late_ms[3], 2.0) << "rank " << r;  // 4 ms a step, less the others' noise
    }
  }
}

TEST(EngineTest, NoStragglerInAThousandStepsOfACleanRun) {
  std::vector<int> named_at;
  std::vector<StragglerStatus> last;
  RunLockstep(1024, -1, 1000, &named_at, &last, /*step_ms=*/5);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(named_at[r], -1) << "rank " << r << ": " << last[r].warning;
    EXPECT_GT(last[r].windows, 10) << "rank " << r;
    EXPECT_EQ(last[r].warning, "") << "rank " << r;
  }
}

}  // namespace
}  // namespace hvx
