#include "hvx/train/metrics_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/metrics_log_test_" + name;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(MetricsLogTest, EventAndTimeComeFirstThenTheFieldsByName) {
  EXPECT_EQ(MetricsLine("eval", 12.5, {{"samples", 40}, {"accuracy", 0.75}}),
            R"({"event":"eval","time":12.5,"accuracy":0.75,"samples":40})");
  EXPECT_EQ(MetricsLine("end", 1, Json::object()), R"({"event":"end","time":1.0})");
}

TEST(MetricsLogTest, NumbersReadBackAsTheSameDoubleAndNonFiniteOnesAreNull) {
  const double loss = 2.302585092994046 / 3;  // more digits than the log's %.7g prints
  auto parsed = ParseJson(MetricsLine("progress", 0, {{"loss", loss}}), "line");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["loss"].get<double>(), loss);
  parsed = ParseJson(MetricsLine("progress", 0,
                                 {{"loss", std::numeric_limits<double>::quiet_NaN()},
                                  {"lr", std::numeric_limits<double>::infinity()}}),
                     "line");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE((*parsed)["loss"].is_null());
  EXPECT_TRUE((*parsed)["lr"].is_null());
}

TEST(MetricsLogTest, TextThatIsNotUtf8IsReplacedNotThrown) {
  auto parsed =
      ParseJson(MetricsLine("end", 0, {{"error", std::string("bad \xff byte\n")}}), "line");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["error"].get<std::string>(), "bad \xEF\xBF\xBD byte\n");
}

// A resumed run adds its records after the earlier run's; each line is one JSON object.
TEST(MetricsLogTest, AppendsWholeLinesAcrossOpens) {
  const std::string path = TestDir("append") + "/sub/metrics.jsonl";
  for (int run = 0; run < 2; ++run) {
    auto log = MetricsLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Write("start", {{"run", run}}).ok());
    ASSERT_TRUE((*log)->Write("progress", {{"global_step", run * 10 + 1}}).ok());
  }
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 4u);
  std::vector<std::string> events;
  for (const std::string& line : lines) {
    auto parsed = ParseJson(line, path);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    events.push_back((*parsed)["event"].get<std::string>());
    EXPECT_GT((*parsed)["time"].get<double>(), 1.6e9);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"start", "progress", "start", "progress"}));
  EXPECT_EQ((*ParseJson(lines[3], path))["global_step"], 11);
}

// A run killed in the middle of a line: the next run's first record starts a line of its own.
TEST(MetricsLogTest, ALineLeftUnendedIsEndedBeforeTheNextRecord) {
  const std::string dir = TestDir("unended");
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  const std::string path = dir + "/metrics.jsonl";
  std::ofstream(path) << "{\"event\":\"start\",\"time\":1.0}\n{\"event\":\"progr";
  {
    auto log = MetricsLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Write("start", {{"run", "b"}}).ok());
  }
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "{\"event\":\"progr");
  auto parsed = ParseJson(lines[2], path);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["run"], "b");
}

TEST(MetricsLogTest, ALinkPlantedUnderTheNameIsRefused) {
  const std::string dir = TestDir("link");
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  const std::string target = dir + "/someone_elses_file";
  std::ofstream(target) << "theirs\n";
  const std::string path = dir + "/metrics.jsonl";
  unlink(path.c_str());
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  auto log = MetricsLog::Open(path);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find(path), std::string::npos) << log.status();
  EXPECT_EQ(Lines(target), std::vector<std::string>{"theirs"});
}

TEST(MetricsLogTest, FieldsThatAreNotAnObjectAreRefused) {
  auto log = MetricsLog::Open(TestDir("array") + "/metrics.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->Write("progress", Json::array({1, 2})).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace train
}  // namespace hvx
