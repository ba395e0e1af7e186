// How a process ends when hvx's shutdown fails or hangs: never with status 0 unless the shutdown
// succeeded, and with the program's own status when it was exiting with one. Each case runs in a
// child process (death tests) over the in-process transport, registered as "fake".
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/core/engine.h"
#include "hvx/core/fake_transport.h"

namespace hvx {
namespace {

const MapEnvironment* const kNoEnv = new MapEnvironment();

// What the next "fake" transport does in Finalize.
absl::Duration g_finalize_delay;
absl::Status g_finalize_status;

const bool kRegistered = RegisterTransport("fake", [] {
  auto t = std::make_unique<FakeTransport>(std::make_shared<FakeHub>(1), 0);
  t->set_finalize_delay(g_finalize_delay);
  t->set_finalize_status(g_finalize_status);
  return std::unique_ptr<Transport>(std::move(t));
});

void InitFake(absl::Duration finalize_delay, absl::Status finalize_status = absl::OkStatus()) {
  g_finalize_delay = finalize_delay;
  g_finalize_status = std::move(finalize_status);
  InitOptions o;
  o.transport = "fake";
  o.stall_check_time_s = 0;
  o.shutdown_timeout_s = 0.2;
  o.environment = kNoEnv;
  o.nvidia_gpus_dir = "/nonexistent";
  if (!Init(o).ok()) std::_Exit(99);
}

class ShutdownDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(ShutdownDeathTest, CleanShutdownKeepsTheProgramsStatus) {
  EXPECT_EXIT(
      {
        InitFake(absl::ZeroDuration());
        if (!Shutdown().ok()) std::_Exit(98);
        std::exit(3);
      },
      testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        InitFake(absl::ZeroDuration());
        std::exit(0);  // shut down at exit
      },
      testing::ExitedWithCode(0), "");
}

TEST_F(ShutdownDeathTest, HungFinalizationInShutdownExitsNonZero) {
  EXPECT_EXIT(
      {
        InitFake(absl::Seconds(30));
        Shutdown().IgnoreError();
        std::exit(0);
      },
      testing::ExitedWithCode(kShutdownTimeoutExitCode), "did not finish within 0.2 s");
}

TEST_F(ShutdownDeathTest, FailingExitEndsAtOnceWithItsStatus) {
  const absl::Time start = absl::Now();
  EXPECT_EXIT(
      {
        InitFake(
            absl::Seconds(30));  // a shutdown would hang: the failing exit must not wait for it
        std::exit(3);
      },
      testing::ExitedWithCode(3), "");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(ShutdownDeathTest, HungFinalizationAtExitIsNotSuccess) {
  EXPECT_EXIT(
      {
        InitFake(absl::Seconds(30));
        std::exit(0);
      },
      testing::ExitedWithCode(kShutdownTimeoutExitCode), "did not finish");
}

TEST_F(ShutdownDeathTest, FailedFinalizationAtExitIsNotSuccess) {
  EXPECT_EXIT(
      {
        InitFake(absl::ZeroDuration(), absl::DeadlineExceededError("rank 2 never came"));
        std::exit(0);
      },
      testing::ExitedWithCode(kShutdownTimeoutExitCode), "rank 2 never came");
}

TEST(ShutdownTest, FailedFinalizationIsShutdownsError) {
  auto transport = std::make_unique<FakeTransport>(std::make_shared<FakeHub>(1), 0);
  transport->set_finalize_status(absl::DeadlineExceededError("rank 2 never came"));
  InitOptions o;
  o.stall_check_time_s = 0;
  o.environment = kNoEnv;
  o.nvidia_gpus_dir = "/nonexistent";
  EngineOptions eo;
  eo.exit_on_finalize_timeout = false;
  auto e = Engine::Start(o, std::move(transport), eo);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::Status s = (*e)->Shutdown();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(s.message(), "rank 2 never came");
}

TEST(ShutdownTest, TimeoutMustBePositive) {
  auto zero = InitOptions::FromEnv(MapEnvironment({{"HVX_SHUTDOWN_TIMEOUT_S", "0"}}));
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(), "HVX_SHUTDOWN_TIMEOUT_S='0': must be more than 0 seconds");
  InitOptions in_code;
  in_code.shutdown_timeout_s = 0;
  EXPECT_EQ(Init(in_code).message(), "HVX_SHUTDOWN_TIMEOUT_S='0': must be more than 0 seconds");
  auto negative = InitOptions::FromEnv(MapEnvironment({{"HVX_SHUTDOWN_TIMEOUT_S", "-1"}}));
  ASSERT_FALSE(negative.ok());
  EXPECT_TRUE(absl::StrContains(negative.status().message(), "HVX_SHUTDOWN_TIMEOUT_S='-1'"))
      << negative.status();
  auto ok = InitOptions::FromEnv(
      MapEnvironment({{"HVX_SHUTDOWN_TIMEOUT_S", "0.5"}, {"HVX_COLLECTIVE_TIMEOUT_S", "7"}}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->shutdown_timeout_s, 0.5);
  EXPECT_EQ(ok->collective_timeout_s, 7);
  auto no_collective = InitOptions::FromEnv(MapEnvironment({{"HVX_COLLECTIVE_TIMEOUT_S", "0"}}));
  EXPECT_EQ(no_collective.status().message(),
            "HVX_COLLECTIVE_TIMEOUT_S='0': must be more than 0 seconds");
}

// 1e10 s overflowed the steady clock's nanoseconds: Init failed at once ("did not start within
// 1e+10 s") and every clean exit ended with 124.
TEST(ShutdownTest, TimeoutsPastTheLimitAreRefused) {
  for (const char* name : {"HVX_SHUTDOWN_TIMEOUT_S", "HVX_COLLECTIVE_TIMEOUT_S",
                           "HVX_STALL_CHECK_TIME_S", "HVX_STALL_SHUTDOWN_TIME_S"}) {
    auto huge = InitOptions::FromEnv(MapEnvironment({{name, "1e10"}}));
    EXPECT_EQ(huge.status().message(),
              absl::StrCat(name, "='1e10': expected a number in [0, 1e+08]"));
    auto nan = InitOptions::FromEnv(MapEnvironment({{name, "nan"}}));
    EXPECT_EQ(nan.status().message(), absl::StrCat(name, "='nan': expected a finite number"));
  }
  InitOptions in_code;
  in_code.collective_timeout_s = 1e10;
  EXPECT_EQ(Init(in_code).message(),
            "HVX_COLLECTIVE_TIMEOUT_S='1e+10': must be at most 1e+08 seconds");
}

TEST(InitOptionsTest, StallShutdownThatWouldNeverApplyIsRefused) {
  auto below = InitOptions::FromEnv(
      MapEnvironment({{"HVX_STALL_CHECK_TIME_S", "60"}, {"HVX_STALL_SHUTDOWN_TIME_S", "30"}}));
  ASSERT_FALSE(below.ok());
  EXPECT_TRUE(absl::StrContains(below.status().message(),
                                "HVX_STALL_SHUTDOWN_TIME_S=30 needs the stall check on and "
                                "must exceed it (HVX_STALL_CHECK_TIME_S=60)"))
      << below.status();
  auto check_off = InitOptions::FromEnv(
      MapEnvironment({{"HVX_STALL_CHECK_TIME_S", "0"}, {"HVX_STALL_SHUTDOWN_TIME_S", "30"}}));
  EXPECT_FALSE(check_off.ok());
  auto fine = InitOptions::FromEnv(
      MapEnvironment({{"HVX_STALL_CHECK_TIME_S", "10"}, {"HVX_STALL_SHUTDOWN_TIME_S", "30"}}));
  EXPECT_TRUE(fine.ok()) << fine.status();
}

}  // namespace
}  // namespace hvx
