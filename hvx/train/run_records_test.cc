#include "hvx/train/run_records.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/run_records_test_" + name;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<Json> Records(const std::string& path) {
  std::ifstream in(path);
  std::vector<Json> records;
  for (std::string line; std::getline(in, line);) records.push_back(*ParseJson(line, path));
  return records;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Cell(const std::string& html, const std::string& id) {
  const std::string open = "<td id=\"" + id + "\">";
  const size_t at = html.find(open);
  if (at == std::string::npos) return "<none>";
  const size_t from = at + open.size();
  return html.substr(from, html.find("</td>", from) - from);
}

RunRecords::Options OptionsIn(const std::string& summaries) {
  RunRecords::Options o;
  o.summaries_dir = summaries;
  o.model = "cnn on 240 samples";
  o.config_text = "epochs: 2";
  o.world_size = 2;
  return o;
}

// One run's life as the trainer tells it, then its resumption: every sink gets each event, in the
// run's folder, and the resumed run's report holds what the first part recorded.
TEST(RunRecordsTest, EachEventReachesTheMetricsFileTheEventsAndTheReport) {
  const std::string summaries = TestDir("sinks");
  std::string name;
  {
    auto records = RunRecords::Open(OptionsIn(summaries));
    ASSERT_TRUE(records.ok()) << records.status();
    RunRecords& r = **records;
    name = r.run();
    EXPECT_EQ(r.dir(), summaries + "/" + name);
    ASSERT_TRUE(r.Start({{"global_step", 0}}).ok());
    for (int step = 1; step <= 3; ++step) {
      ProgressPoint p;
      p.step = step;
      p.loss = 1.0 / step;
      p.lr = 0.1;
      p.samples_per_s = 100 * step;
      ASSERT_TRUE(r.Progress(p, {{"global_step", step}, {"loss", p.loss}}, 0.5).ok());
    }
    EvalPoint e;
    e.epoch = 1;
    e.step = 3;
    e.accuracy = 0.75;
    ASSERT_TRUE(r.Eval(e, {{"global_step", 3}, {"accuracy", 0.75}}).ok());
    ASSERT_TRUE(r.Checkpoint({{"global_step", 3}}).ok());
    ProgressPoint lost;  // trained after the checkpoint, then lost with the run
    lost.step = 4;
    ASSERT_TRUE(r.Progress(lost, {{"global_step", 4}}).ok());
    r.End({{"state", "failed"}}, "failed: killed");
  }
  const std::string dir = summaries + "/" + name;
  std::vector<std::string> events;
  for (const Json& record : Records(dir + "/metrics.jsonl")) events.push_back(record["event"]);
  EXPECT_EQ(events, (std::vector<std::string>{"start", "progress", "progress", "progress", "eval",
                                              "checkpoint", "progress", "end"}));
  EXPECT_EQ(Records(dir + "/metrics.jsonl")[0]["run"], name);
  std::vector<std::string> files = Names(dir);
  ASSERT_EQ(files.size(), 3u);
  auto scalars = ReadScalarEvents(dir + "/" + files[0]);  // "events.out.tfevents..." sorts first
  ASSERT_TRUE(scalars.ok()) << files[0] << ": " << scalars.status();
  std::multiset<std::string> tags;
  for (const ScalarEvent& s : *scalars) tags.insert(s.tag);
  EXPECT_EQ(tags.count("train/loss"), 4u);
  EXPECT_EQ(tags.count("train/grad_norm"), 3u);
  EXPECT_EQ(tags.count("eval/accuracy"), 1u);
  const std::string page = ReadAll(dir + "/report.html");
  EXPECT_EQ(Cell(page, "run"), name);
  EXPECT_EQ(Cell(page, "state"), "failed: killed");

  // Resumed from the checkpoint at step 3: the same folder, a second event file, and the report
  // redrawn with steps 1 to 3 and the evaluation, not the lost step 4.
  RunRecords::Options again = OptionsIn(summaries);
  again.run = name;
  again.resumed_from_step = 3;
  auto resumed = RunRecords::Open(again);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->dir(), dir);
  EXPECT_EQ(Names(summaries), std::vector<std::string>{name});
  EXPECT_EQ(Names(dir).size(), 4u);
  const std::string redrawn = ReadAll(dir + "/report.html");
  EXPECT_EQ(Cell(redrawn, "steps"), "3");
  EXPECT_EQ(Cell(redrawn, "accuracy"), "0.7500");
  EXPECT_EQ(Cell(redrawn, "state"), "training");
}

TEST(RunRecordsTest, AnotherRunGetsAnotherFolderAndLeavesTheFirstAlone) {
  const std::string summaries = TestDir("two");
  auto first = RunRecords::Open(OptionsIn(summaries));
  ASSERT_TRUE(first.ok()) << first.status();
  (*first)->End({{"state", "done"}}, "done");
  const std::string first_page = ReadAll((*first)->dir() + "/report.html");
  auto second = RunRecords::Open(OptionsIn(summaries));
  ASSERT_TRUE(second.ok()) << second.status();
  (*second)->End({{"state", "failed"}}, "failed: bad data");
  EXPECT_NE((*first)->run(), (*second)->run());
  EXPECT_EQ(Names(summaries).size(), 2u);
  EXPECT_EQ(ReadAll((*first)->dir() + "/report.html"), first_page);
}

TEST(RunRecordsTest, AStoredNameThatCannotNameAFolderGetsTheRunANewOne) {
  RunRecords::Options o = OptionsIn(TestDir("badname"));
  o.run = "../outside";
  o.resumed_from_step = 5;
  auto records = RunRecords::Open(o);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_NE((*records)->run(), "../outside");
  EXPECT_EQ(Names(TestDir("badname")), std::vector<std::string>{(*records)->run()});
}

// Without summaries_dir: no folder, the metrics file where logging.metrics_file says, and a name
// all the same (checkpoints keep it).
TEST(RunRecordsTest, WithoutSummariesOnlyTheMetricsFileIsWritten) {
  RunRecords::Options o;
  o.metrics_file = TestDir("plain") + "/run.jsonl";
  auto records = RunRecords::Open(o);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ((*records)->dir(), "");
  EXPECT_FALSE((*records)->run().empty());
  ASSERT_TRUE((*records)->Start({}).ok());
  ASSERT_TRUE((*records)->Progress(ProgressPoint{}, {{"global_step", 1}}).ok());
  (*records)->End({{"state", "done"}}, "done");
  EXPECT_EQ(Names(TestDir("plain")), std::vector<std::string>{"run.jsonl"});
  EXPECT_EQ(Records(o.metrics_file).size(), 3u);
}

}  // namespace
}  // namespace train
}  // namespace hvx
