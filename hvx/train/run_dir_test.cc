#include "hvx/train/run_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/run_dir_test_" + name;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(RunDirTest, ANewNameIsItsStartInUtcAndSixRandomDigits) {
  const absl::Time start = absl::FromUnixSeconds(1796610295);  // 2026-12-07 02:24:55 UTC
  EXPECT_EQ(NewRunName(start, "3f9a1c0d2e4b5a69"), "20261207-022455-3f9a1c");
  EXPECT_TRUE(IsRunName(NewRunName(start, "3f9a1c0d2e4b5a69")));
}

TEST(RunDirTest, OnlyPlainFolderNamesAreRunNames) {
  for (const char* good : {"20261207-022455-3f9a1c", "a", "run_7.b-c"}) {
    EXPECT_TRUE(IsRunName(good)) << good;
  }
  for (const char* bad : {"", ".", "..", ".hidden", "a/b", "../x", "a b", "tab\t", "é"}) {
    EXPECT_FALSE(IsRunName(bad)) << bad;
  }
  EXPECT_TRUE(IsRunName(std::string(64, 'x')));
  EXPECT_FALSE(IsRunName(std::string(65, 'x')));
}

TEST(RunDirTest, NewRunsGetFoldersOfTheirOwnAndANamedRunContinuesItsFolder) {
  const std::string summaries = TestDir("open") + "/deeper/summaries";
  std::set<std::string> names;
  for (int i = 0; i < 5; ++i) {  // within one second: the random digits keep them apart
    auto dir = OpenRunDir(summaries, "");
    ASSERT_TRUE(dir.ok()) << dir.status();
    EXPECT_FALSE(dir->continued);
    EXPECT_EQ(dir->path, summaries + "/" + dir->name);
    EXPECT_TRUE(IsDir(dir->path));
    EXPECT_TRUE(names.insert(dir->name).second) << dir->name;
  }
  const std::string first = *names.begin();
  auto again = OpenRunDir(summaries, first);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->continued);
  EXPECT_EQ(again->path, summaries + "/" + first);
  // A resumed run whose folder is gone (summaries_dir changed) gets it made.
  auto moved = OpenRunDir(TestDir("open") + "/elsewhere", first);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(moved->continued);
  EXPECT_TRUE(IsDir(moved->path));
}

TEST(RunDirTest, ANameThatIsNotAFolderNameIsRefusedNamingIt) {
  auto dir = OpenRunDir(TestDir("bad"), "../../etc");
  ASSERT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("../../etc"), std::string::npos) << dir.status();
  EXPECT_FALSE(IsDir(TestDir("bad") + "/../../etc/"
                                      ".."));  // nothing made outside
}

std::string Cell(const std::string& html, const std::string& id) {
  const std::string open = "<td id=\"" + id + "\">";
  const size_t at = html.find(open);
  if (at == std::string::npos) return "<none>";
  const size_t from = at + open.size();
  return html.substr(from, html.find("</td>", from) - from);
}

// The metrics file of a run resumed from step 3: the records of another run that shares the file,
// the steps after the checkpoint (trained again) and a line cut short are left out.
TEST(RunDirTest, ARecordedRunAddsItsOwnRecordsUpToTheResumedStep) {
  const std::string path = TestDir("recorded") + ".jsonl";
  std::ofstream(path)
      << R"({"event":"start","time":1,"run":"other"})"
         "\n"
      << R"({"event":"progress","time":2,"global_step":1,"loss":9.0})"
         "\n"
      << R"({"event":"start","time":3,"run":"mine","global_step":0})"
         "\n"
      << R"({"event":"progress","time":4,"global_step":1,"loss":2.0,"lr":0.1,"samples_per_s":50})"
         "\n"
      << R"({"event":"progress","time":5,"global_step":2,"loss":1.5,"straggler":{"rank":1,"late_ms":[0,4.5]}})"
         "\n"
      << R"({"event":"eval","time":6,"epoch":1,"global_step":3,"accuracy":0.625,"top5":1,"loss":1.25,"samples":40})"
         "\n"
      << R"({"event":"progress","time":7,"global_step":3,"loss":1.25,"samples_per_s":60})"
         "\n"
      << R"({"event":"progress","time":8,"global_step":4,"loss":0.5})"
         "\n"
      << R"({"event":"progr)"
         "\n";
  RunReport report("cnn", "", 2);
  ASSERT_TRUE(AddRecordedRun(path, "mine", 3, &report).ok());
  const std::string html = report.Html();
  EXPECT_EQ(Cell(html, "steps"), "3");
  EXPECT_EQ(Cell(html, "train_loss"), "1.25");
  EXPECT_EQ(Cell(html, "samples_per_s"), "60");
  EXPECT_EQ(Cell(html, "accuracy"), "0.6250");
  EXPECT_EQ(Cell(html, "straggler"), "rank 1, 4.5 ms late at step 2");

  RunReport none("cnn", "", 2);
  ASSERT_TRUE(AddRecordedRun(path, "nobody", 3, &none).ok());
  EXPECT_EQ(Cell(none.Html(), "steps"), "0");
  ASSERT_TRUE(AddRecordedRun(TestDir("missing") + ".jsonl", "mine", 3, &none).ok());
}

// Part 1 checkpointed at step 2 and died at step 3; part 2 resumed from 2, checkpointed at 4 and
// died at 5; part 3 resumes from 4: steps 1, 2 (part 1), 3, 4 (part 2), each once and in order.
TEST(RunDirTest, EachPartOfARunResumedTwiceKeepsOnlyTheStepsTheNextPartDidNotTrainAgain) {
  const std::string path = TestDir("twice") + ".jsonl";
  std::ofstream out(path);
  auto progress = [&out](int step, double loss) {
    out << R"({"event":"progress","time":1,"global_step":)" << step << R"(,"loss":)" << loss
        << "}\n";
  };
  out << R"({"event":"start","time":1,"run":"r","global_step":0})"
         "\n";
  progress(1, 1.0);
  progress(2, 2.0);
  out << R"({"event":"eval","time":1,"epoch":1,"global_step":3,"accuracy":0.5})"
         "\n";
  progress(3, 3.0);
  out << R"({"event":"start","time":1,"run":"r","global_step":2})"
         "\n";
  progress(3, 30.0);
  progress(4, 40.0);
  progress(5, 50.0);
  out.close();
  RunReport report("cnn", "", 1);
  ASSERT_TRUE(AddRecordedRun(path, "r", 4, &report).ok());
  const std::string html = report.Html();
  EXPECT_EQ(Cell(html, "steps"), "4");
  EXPECT_EQ(Cell(html, "train_loss"), "40");
  // The evaluation at step 3 of part 1 was trained again: not in the table.
  EXPECT_EQ(Cell(html, "accuracy"), "<none>");
  const size_t chart = html.find("id=\"chart-loss\"");
  ASSERT_NE(chart, std::string::npos);
  const size_t points = html.find("points=\"", chart);
  const std::string series = html.substr(points, html.find("\"", points + 8) - points);
  EXPECT_EQ(std::count(series.begin(), series.end(), ','), 4) << series;
}

}  // namespace
}  // namespace train
}  // namespace hvx
