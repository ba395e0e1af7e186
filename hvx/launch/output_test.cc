#include "hvx/launch/output.h"

#include <sys/wait.h>

#include <csignal>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

using ::testing::ElementsAre;

std::string Marker(int rank) { return absl::StrCat("\x01hvx", rank, "\x02"); }

struct Captured {
  std::vector<std::pair<int, std::string>> writes;  // (fd, bytes)
  std::vector<ControlRecord> records;
};

class RouterTest : public ::testing::Test {
 protected:
  RouterTest()
      : plan_(*MakePlan(3, {{"h1", 2}, {"h2", 1}})),
        router_(
            plan_, TagMode::kRank, 1, 2,
            [this](int fd, absl::string_view d) { got_.writes.emplace_back(fd, std::string(d)); },
            [this](const ControlRecord& r) { got_.records.push_back(r); }),
        out_([this](int s, absl::string_view d) { router_.OnBytes(Stream::kStdout, s, d); }),
        err_([this](int s, absl::string_view d) { router_.OnBytes(Stream::kStderr, s, d); }) {}

  std::vector<std::string> Lines(int fd) {
    std::vector<std::string> out;
    for (auto& [f, d] : got_.writes) {
      if (f == fd) out.push_back(d);
    }
    return out;
  }

  Plan plan_;
  Captured got_;
  OutputRouter router_;
  StreamDemuxer out_;
  StreamDemuxer err_;
};

TEST_F(RouterTest, HydraChunksBecomeWholeTaggedLines) {
  // What hydra writes when rank 1 prints "partial" without a newline, rank 0 prints a line, and
  // rank 1 then finishes its line: a marker before every chunk, mid-line included.
  const std::string stream =
      Marker(1) + "a1\n" + Marker(1) + "partial" + Marker(0) + "a0\n" + Marker(1) + "-rest\n";
  // Fed byte by byte: markers and lines split across reads must not matter.
  for (char c : stream) out_.Feed(std::string(1, c));
  EXPECT_THAT(Lines(1), ElementsAre("[1] a1\n", "[0] a0\n", "[1] partial-rest\n"));
}

TEST_F(RouterTest, MpiexecOwnLinesAreUntaggedAndKept) {
  err_.Feed(Marker(2) + "oops\n[mpiexec@vm] BAD TERMINATION\n" + Marker(0) + "x\n");
  EXPECT_THAT(Lines(2), ElementsAre("[2] oops\n", "[mpiexec@vm] BAD TERMINATION\n", "[0] x\n"));
  EXPECT_THAT(router_.LastMpiexecLines(), ElementsAre("[mpiexec@vm] BAD TERMINATION"));
  EXPECT_THAT(router_.LastStderrLines(2), ElementsAre("oops"));
}

TEST_F(RouterTest, ControlRecordsAreConsumedNotPrinted) {
  err_.Feed(Marker(1) + "half a line\n" + Marker(1) + FormatExitRecord(1, "h1", 3 << 8));
  err_.Feed(Marker(2) + FormatStartRecord(2, "h2", 77));
  ASSERT_EQ(got_.records.size(), 2u);
  EXPECT_EQ(got_.records[0].kind, ControlRecord::Kind::kExit);
  EXPECT_EQ(got_.records[0].rank, 1);
  EXPECT_EQ(got_.records[0].exit_code, 3);
  EXPECT_EQ(got_.records[0].host, "h1");
  EXPECT_EQ(got_.records[1].kind, ControlRecord::Kind::kStart);
  EXPECT_EQ(got_.records[1].pid, 77);
  EXPECT_THAT(Lines(2), ElementsAre("[1] half a line\n"));
}

// A record naming another rank, or one outside the plan, is the rank's output, not a record: hvxrun
// indexed its plan with it (rank=100000000 crashed hvxrun). The wrapper's rank=-1 (it could not
// place itself) is the rank hydra's tag names.
TEST_F(RouterTest, ControlRecordsCountOnlyFromTheRankTheyName) {
  err_.Feed(Marker(0) + "\x01hvxctl error rank=100000000 msg=x\n");
  err_.Feed(Marker(1) + FormatExitRecord(2, "h2", 0));
  EXPECT_TRUE(got_.records.empty());
  EXPECT_THAT(Lines(2), ElementsAre("[0] \x01hvxctl error rank=100000000 msg=x\n",
                                    "[1] " + FormatExitRecord(2, "h2", 0)));
  err_.Feed(Marker(2) + FormatErrorRecord(-1, "?", "bad --plan"));
  ASSERT_EQ(got_.records.size(), 1u);
  EXPECT_EQ(got_.records[0].kind, ControlRecord::Kind::kError);
  EXPECT_EQ(got_.records[0].rank, 2);
  EXPECT_EQ(got_.records[0].message, "bad --plan");
}

// The wrapper starts each record on a line of its own; one behind other text on its line came
// from somewhere else and is output.
TEST_F(RouterTest, ARecordInsideALineIsOutput) {
  err_.Feed(Marker(1) + "text " + FormatExitRecord(1, "h1", 0));
  EXPECT_TRUE(got_.records.empty());
  EXPECT_THAT(Lines(2), ElementsAre("[1] text " + FormatExitRecord(1, "h1", 0)));
}

TEST_F(RouterTest, PartialLastLineFlushedAtEnd) {
  out_.Feed(Marker(0) + "no newline");
  out_.Finish();
  router_.Finish();
  EXPECT_THAT(Lines(1), ElementsAre("[0] no newline\n"));
}

TEST_F(RouterTest, OutputDirHoldsUntaggedLinesPerRank) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/out/nested");
  ASSERT_TRUE(router_.OpenOutputDir(dir).ok());
  out_.Feed(Marker(2) + "to file\n");
  err_.Feed(Marker(2) + "err line\n");
  std::ifstream in(absl::StrCat(dir, "/rank.2.log"));
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), "to file\nerr line\n");
}

TEST(ControlRecordTest, SignalsAndErrors) {
  int killed = SIGKILL;  // a wait status for "killed by signal 9"
  auto r = ParseControlRecord(
      FormatExitRecord(4, "h9", killed).substr(std::string(kControlMagic).size()));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->signal, 9);
  EXPECT_EQ(DescribeExit(r->exit_code, r->signal), "was killed by signal 9 (Killed)");
  std::string text = FormatErrorRecord(1, "h", "two\nlines");
  auto e = ParseControlRecord(text.substr(8, text.size() - 9));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "two lines");
  EXPECT_FALSE(ParseControlRecord("bogus rank=1").has_value());
}

// The flight recorder's records: a header, then one event each, as the wrapper writes them.
TEST(ControlRecordTest, FlightRecordsCarryTheRingThrough) {
  auto body = [](const std::string& record) {
    return record.substr(std::string(kControlMagic).size(),
                         record.size() - std::string(kControlMagic).size() - 1);
  };
  auto h = ParseControlRecord(
      body(FormatFlightRecord(3, "h2", "T", "do_signal_stop", 123456789, 2, "stop")));
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->kind, ControlRecord::Kind::kFlight);
  EXPECT_EQ(h->rank, 3);
  EXPECT_EQ(h->host, "h2");
  EXPECT_EQ(h->proc, "T");
  EXPECT_EQ(h->wchan, "do_signal_stop");
  EXPECT_EQ(h->now_ns, 123456789);
  EXPECT_EQ(h->events, 2);
  EXPECT_EQ(h->why, "stop");
  auto first =
      ParseControlRecord(body(FormatFlightStackRecord(3, "thread 7 a msg=b", true, "idle", 12)));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->kind, ControlRecord::Kind::kFlightStack);
  EXPECT_TRUE(first->first);
  EXPECT_EQ(first->why, "idle");
  EXPECT_EQ(first->lines, 12);
  EXPECT_EQ(first->message, "thread 7 a msg=b");
  auto line = ParseControlRecord(
      body(FormatFlightStackRecord(3, "  #2 0x55d1 hvx::Engine::Run(int)\x01\n")));
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->rank, 3);
  EXPECT_FALSE(line->first);
  EXPECT_EQ(line->message, "  #2 0x55d1 hvx::Engine::Run(int)??");
  auto empty = ParseControlRecord(body(FormatFlightRecord(3, "h2", "", "", 1, 0, "stale")));
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->wchan, "");

  FlightEvent e;
  e.state = FlightState::kDataPlane;
  e.op_id = 9;
  e.seq = 4;
  e.name = "grad w";
  e.op = "ALLREDUCE";
  e.plane = "SHM_ALLREDUCE";
  auto ev = ParseControlRecord(body(FormatFlightEventRecord(3, EncodeFlightEvent(e))));
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->kind, ControlRecord::Kind::kFlightEvent);
  EXPECT_EQ(ev->event.name, "grad w");
  EXPECT_EQ(ev->event.plane, "SHM_ALLREDUCE");
  EXPECT_EQ(ev->event.seq, 4u);
  // A damaged event is no record (and so is shown as output, never half-read).
  EXPECT_FALSE(ParseControlRecord("flightev rank=3 ev=1,2,x").has_value());
  EXPECT_FALSE(ParseControlRecord("flightev rank=3").has_value());
  EXPECT_FALSE(ParseControlRecord("flight rank=3 events=-1").has_value());
}

TEST(PrefixTest, Modes) {
  RankPlacement p;
  p.rank = 5;
  p.host = "h2";
  p.local_rank = 1;
  EXPECT_EQ(LinePrefix(TagMode::kRank, p), "[5] ");
  EXPECT_EQ(LinePrefix(TagMode::kFull, p), "[5 h2:1] ");
  EXPECT_EQ(LinePrefix(TagMode::kNone, p), "");
}

// A marker's rank has at most 12 digits: a longer run after "\x01hvx" is output, passed on at
// once, where the demuxer held every digit while more might come (one rank could make hvxrun
// allocate without bound).
TEST(StreamDemuxerTest, ALongRunOfDigitsAfterAMarkerHeadIsOutputAndNotHeld) {
  std::string got;
  StreamDemuxer demux([&](int, absl::string_view data) { got.append(data.data(), data.size()); });
  const std::string digits(1000, '7');
  demux.Feed("\x01hvx" + digits);
  EXPECT_EQ(got, "\x01hvx" + digits);
  demux.Feed("\x02tail\n");
  demux.Finish();
  EXPECT_EQ(got, "\x01hvx" + digits + "\x02tail\n");
}

}  // namespace
}  // namespace launch
}  // namespace hvx
