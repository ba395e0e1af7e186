// Settings that must match on every rank: the comparison and its message, and hvx::Init failing on
// every rank (in-process engines) when one knob differs.
#include "hvx/core/agreement.h"

#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hvx/core/fake_transport.h"
#include "hvx/core/in_process_ranks.h"

namespace hvx {
namespace {

TEST(AgreementTest, RankRangesAndBytes) {
  EXPECT_EQ(RankRanges({0, 1, 2, 3, 5, 7, 8}), "0-3,5,7-8");
  EXPECT_EQ(RankRanges({4}), "4");
  EXPECT_EQ(FormatBytes(int64_t{128} << 20), "128MiB");
  EXPECT_EQ(FormatBytes(int64_t{2} << 30), "2GiB");
  EXPECT_EQ(FormatBytes(65536), "64KiB");
  EXPECT_EQ(FormatBytes(1000), "1000");
  EXPECT_EQ(FormatBytes(0), "0");
}

TEST(AgreementTest, EqualSettingsAgree) {
  const std::string s = EncodeSettings({{"a", "1"}, {"b", ""}});
  EXPECT_TRUE(CompareSettings({s, s, s}).ok());
  auto back = DecodeSettings(s);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, (Settings{{"a", "1"}, {"b", ""}}));
  EXPECT_FALSE(DecodeSettings("3:ab").ok());
}

TEST(AgreementTest, DifferencesNameEveryValueAndItsRanks) {
  std::vector<std::string> all;
  for (int r = 0; r < 8; ++r) {
    all.push_back(EncodeSettings({{"HVX_FUSION_THRESHOLD", r < 4 ? "128MiB" : "64MiB"},
                                  {"HVX_CACHE_CAPACITY", "1024"},
                                  {"dataset samples", r == 6 ? "59999" : "60000"}}));
  }
  absl::Status s = CompareSettings(all);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "settings that must be the same on every rank differ: HVX_FUSION_THRESHOLD: ranks 0-3 "
            "have 128MiB, "
            "ranks 4-7 have 64MiB; dataset samples: ranks 0-5,7 have 60000, rank 6 has 59999");
}

// Starts n in-process engines whose options `adjust` changes per rank; returns what each Init said.
std::vector<absl::Status> StartRanks(int n,
                                     const std::function<void(int rank, InitOptions*)>& adjust) {
  auto hub = std::make_shared<FakeHub>(n);
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      InitOptions o = InProcessOptions();
      adjust(r, &o);
      EngineOptions eo;
      eo.command_line = "prog";
      eo.exit_on_finalize_timeout = false;
      results[r] = Engine::Start(o, std::make_unique<FakeTransport>(hub, r), eo).status();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// One outcome on every rank: the failing ranks with their own errors, the others naming the lowest
// failing rank; a failure without a message is a failure too.
TEST(AgreementTest, AFailureOnSomeRanksFailsEveryRank) {
  constexpr int kRanks = 4;
  auto hub = std::make_shared<FakeHub>(kRanks);
  auto agree = [&](const std::vector<absl::Status>& local) {
    std::vector<absl::Status> out(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        FakeCommunicator comm(hub, r);
        out[r] = AgreeOnEveryRank(comm, local[r], [](int failed, absl::string_view why) {
          return absl::StrCat("rank ", failed, " failed: ", why);
        });
      });
    }
    for (std::thread& t : threads) t.join();
    return out;
  };
  for (const absl::Status& s : agree(std::vector<absl::Status>(kRanks))) EXPECT_TRUE(s.ok()) << s;

  const absl::Status full = absl::ResourceExhaustedError("no room");
  const absl::Status silent = absl::InternalError("");
  const std::vector<absl::Status> out = agree({absl::OkStatus(), silent, absl::OkStatus(), full});
  EXPECT_EQ(out[0], absl::FailedPreconditionError("rank 1 failed: "));
  EXPECT_EQ(out[1], silent);
  EXPECT_EQ(out[2], absl::FailedPreconditionError("rank 1 failed: "));
  EXPECT_EQ(out[3], full);
}

TEST(AgreementTest, InitFailsOnEveryRankWhenAKnobDiffers) {
  constexpr int kRanks = 4;
  const std::vector<absl::Status> results = StartRanks(kRanks, [](int r, InitOptions* o) {
    if (r >= 2) o->fusion_threshold_bytes = int64_t{64} << 20;
    if (r == 3) o->cache_capacity = 0;
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kFailedPrecondition) << "rank " << r;
    EXPECT_TRUE(
        absl::StrContains(results[r].message(),
                          "HVX_FUSION_THRESHOLD: ranks 0-1 have 128MiB, ranks 2-3 have 64MiB; "
                          "HVX_CACHE_CAPACITY: ranks 0-2 have 1024, rank 3 has 0"))
        << "rank " << r << ": " << results[r];
  }
}

// One rank on the MPI ring while the others read shared memory would wait forever in different
// collectives.
TEST(AgreementTest, TheCpuPlaneMustAgreeAndBeKnown) {
  const std::vector<absl::Status> results =
      StartRanks(2, [](int r, InitOptions* o) { o->cpu_plane = r == 0 ? "auto" : "mpi"; });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(
        absl::StrContains(results[r].message(), "HVX_CPU_PLANE: rank 0 has auto, rank 1 has mpi"))
        << "rank " << r << ": " << results[r];
  }
  MapEnvironment env({{"HVX_CPU_PLANE", "gpu"}});
  const absl::StatusOr<InitOptions> bad = InitOptions::FromEnv(env);
  EXPECT_EQ(bad.status().message(), "HVX_CPU_PLANE='gpu': must be auto, shm or mpi");
}

TEST(AgreementTest, ProcessSetsMustAgree) {
  constexpr int kRanks = 2;
  const std::vector<absl::Status> results = StartRanks(kRanks, [](int r, InitOptions* o) {
    o->process_sets =
        r == 1 ? std::vector<std::vector<int>>{{1}} : std::vector<std::vector<int>>{{0, 1}};
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(
        absl::StrContains(results[r].message(), "process sets: rank 0 has [0,1], rank 1 has [1]"))
        << results[r];
  }
}

}  // namespace
}  // namespace hvx
