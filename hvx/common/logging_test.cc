#include "hvx/common/logging.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace {

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogSinkForTest([this](absl::string_view line) { lines_.emplace_back(line); });
    ConfigureLogging(LogOptions{});
    SetLogRank(-1);
  }
  void TearDown() override {
    SetLogSinkForTest(nullptr);
    SetLogRank(-1);
  }
  std::vector<std::string> lines_;
};

TEST_F(LoggingTest, NoPrefixBeforeRankIsKnown) {
  HVX_LOG(INFO) << "hello " << 3;
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0][0], 'I');
  EXPECT_NE(lines_[0].find("logging_test.cc:"), std::string::npos);
  EXPECT_NE(lines_[0].find("] hello 3\n"), std::string::npos);
}

TEST_F(LoggingTest, RankPrefixOnceRankIsSet) {
  SetLogRank(3);
  HVX_LOG(WARNING) << "slow";
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].rfind("[3] W", 0), 0u) << lines_[0];
}

TEST_F(LoggingTest, TaggedOutputDropsOwnPrefix) {
  LogOptions o;
  o.rank_prefix = false;
  ConfigureLogging(o);
  SetLogRank(2);
  HVX_LOG(INFO) << "x";
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0][0], 'I');
}

TEST_F(LoggingTest, SeverityThreshold) {
  LogOptions o;
  o.min_severity = LogSeverity::kWarning;
  ConfigureLogging(o);
  HVX_LOG(INFO) << "dropped";
  HVX_LOG(DEBUG) << "dropped";
  HVX_LOG(ERROR) << "kept";
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0][0], 'E');
}

TEST_F(LoggingTest, ArgumentsNotEvaluatedWhenDisabled) {
  int calls = 0;
  auto f = [&] { return ++calls; };
  HVX_LOG(TRACE) << f();
  EXPECT_EQ(calls, 0);
}

TEST_F(LoggingTest, Rank0HelperLogsOnlyOnRankZero) {
  SetLogRank(1);
  HVX_LOG_RANK0(INFO) << "not on rank 1";
  EXPECT_TRUE(lines_.empty());
  SetLogRank(0);
  HVX_LOG_RANK0(INFO) << "on rank 0";
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find("on rank 0"), std::string::npos);
}

TEST_F(LoggingTest, MultiLineMessageIsOneRecord) {
  HVX_LOG(INFO) << "a\nb";
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find("a\n    b\n"), std::string::npos);
}

TEST(LoggingOptionsTest, FromEnvironment) {
  MapEnvironment env({{"HVX_LOG_LEVEL", "Debug"}, {"HVX_TAGGED_OUTPUT", "1"}});
  absl::StatusOr<LogOptions> o = LogOptionsFromEnv(env);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->min_severity, LogSeverity::kDebug);
  EXPECT_FALSE(o->rank_prefix);
  MapEnvironment bad({{"HVX_LOG_LEVEL", "loud"}});
  absl::StatusOr<LogOptions> b = LogOptionsFromEnv(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(),
            "HVX_LOG_LEVEL='loud': expected one of trace, debug, info, warning, error, fatal");
}

TEST(LoggingDeathTest, CheckAbortsWithMessage) {
  EXPECT_DEATH({ HVX_CHECK(1 + 1 == 3) << "math"; }, "Check failed: 1 \\+ 1 == 3 math");
}

}  // namespace
}  // namespace hvx
