// hvxrun's verdict from fabricated flight records: each kind of hang names the right rank, op and
// what that rank did instead; the merged record is JSON and the trace a Chrome JSON trace.
#include "hvx/launch/flight_verdict.h"

#include <csignal>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hvx/common/json.h"

namespace hvx {
namespace launch {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kSecond = 1000000000;
constexpr int64_t kNow = 1000 * kSecond;  // every rank's dump, on its own clock
constexpr int kDeadline = static_cast<int>(absl::StatusCode::kDeadlineExceeded);

Plan FourRanks() { return *MakePlan(4, {{"h1", 2}, {"h2", 2}}); }

FlightEvent Op(uint64_t seq, const std::string& name, FlightState state, double submitted_ago_s,
               int set = 0, int64_t bytes = 256) {
  FlightEvent e;
  e.op_id = seq;
  e.seq = seq;
  e.set_id = set;
  e.name = name;
  e.op = "ALLREDUCE";
  e.dtype = "float32";
  e.bytes = bytes;
  e.state = state;
  e.submitted_ns = kNow - static_cast<int64_t>(submitted_ago_s * kSecond);
  if (state >= FlightState::kNegotiated) e.negotiated_ns = e.submitted_ns + 1000;
  if (state >= FlightState::kDataPlane) {
    e.data_plane_ns = e.submitted_ns + 2000;
    e.plane = "SHM_ALLREDUCE";
  }
  if (state == FlightState::kDone) e.done_ns = e.submitted_ns + 3000;
  return e;
}

FlightEvent TimedOut(FlightEvent e, double after_s = 4) {
  e.state = FlightState::kFailed;
  e.code = kDeadline;
  e.done_ns = e.submitted_ns + static_cast<int64_t>(after_s * kSecond);
  e.error = "timed out";
  return e;
}

RankFlight Rank(std::vector<FlightEvent> events, std::string why = "exit") {
  RankFlight f;
  f.dumped = true;
  f.why = std::move(why);
  f.proc = "exited";
  f.now_ns = kNow;
  f.events = std::move(events);
  return f;
}

// Ranks 0-2 ran steps 0 and 1 ("big.S", "small.S") and wait in step 2's `waited`.
std::map<int, RankFlight> Waiting(const std::string& waited) {
  std::map<int, RankFlight> flights;
  for (int r = 0; r < 3; ++r) {
    flights[r] =
        Rank({Op(1, "big.1", FlightState::kDone, 9), Op(2, "small.1", FlightState::kDone, 8.9),
              Op(3, "big.2", FlightState::kDone, 4.1),
              TimedOut(Op(4, waited, FlightState::kSubmitted, 4.1))});
  }
  return flights;
}

TEST(FlightVerdict, ARankThatSkippedAnOpWaitsInTheNextOneAlone) {
  auto flights = Waiting("small.2");
  flights[3] =
      Rank({Op(1, "big.1", FlightState::kDone, 9), Op(2, "small.1", FlightState::kDone, 8.9),
            Op(3, "big.2", FlightState::kDone, 4.1),
            Op(4, "big.3", FlightState::kSubmitted, 4.0, 0, 1 << 24)},
           "stop");
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line, StartsWith("rank 3 (host h2, local rank 1) did not submit allreduce "
                                 "'small.2' (set 0, seq 4) that ranks 0,1,2 waited 4.0 s for: "));
  EXPECT_THAT(v.line, HasSubstr("went on without it and waits in allreduce 'big.3'"));
  EXPECT_THAT(v.line, HasSubstr("it skipped 'small.2'?"));
  ASSERT_FALSE(v.details.empty());
  EXPECT_THAT(v.details.back(), StartsWith("rank 3 allreduce 'big.3' (set 0, seq 4): submitted"));
}

TEST(FlightVerdict, TheSameOpUnderAnotherNameIsCalledThat) {
  auto flights = Waiting("small.2");
  flights[3] = Rank({Op(3, "big.2", FlightState::kDone, 4.1),
                     TimedOut(Op(4, "small_renamed.2", FlightState::kSubmitted, 4.1))});
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line, StartsWith("rank 3 (host h2, local rank 1) did not submit allreduce "
                                 "'small.2'"));
  EXPECT_THAT(v.line, HasSubstr("at the same position it submitted allreduce 'small_renamed.2' "
                                "(set 0, seq 4), alike in op, type and size: the same op under "
                                "another name?"));
}

TEST(FlightVerdict, ARankInItsOwnCodeHasNothingPending) {
  auto flights = Waiting("big.2");
  for (auto& [r, f] : flights) {
    f.events.erase(f.events.begin() + 2);    // big.2 is the one waited
    f.events.back().caller = "train.py:14";  // where the program submitted it
  }
  flights[3] = Rank(
      {Op(1, "big.1", FlightState::kDone, 9), Op(2, "small.1", FlightState::kDone, 8.9)}, "stop");
  flights[3].idle_proc = "S";
  flights[3].idle_wchan = "hrtimer_nanosleep";
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line, StartsWith("rank 3 (host h2, local rank 1) did not submit allreduce 'big.2' "
                                 "(set 0, seq 4, from train.py:14)"));
  EXPECT_THAT(v.line, HasSubstr("no collective of it is pending: it has been in its own code since "
                                "its last, allreduce 'small.1'"));
  EXPECT_THAT(v.line, HasSubstr("its main thread was sleeping in hrtimer_nanosleep()"));
  // Its stacks: the details show its main thread's Python frames (the last block: Python lists
  // its oldest thread last) and native frames; the JSON holds every line.
  flights[3].stack = {"thread 41 python3",
                      "  #0 0x10 epoll_wait",
                      "Thread 0x7f01 (most recent call first):",
                      "  File \"loader.py\", line 3 in worker",
                      "Current thread 0x7f00 (most recent call first):",
                      "  File \"train.py\", line 8 in read_batch",
                      "  File \"train.py\", line 14 in <module>",
                      "thread 40 python3 (main)",
                      "  #0 0x20 _PyEval_EvalFrameDefault",
                      "  #1 0x30 main"};
  flights[3].stack_why = "idle";
  const Verdict with_stack = JudgeFlights(FourRanks(), flights);
  const std::vector<std::string> shown = {"rank 3 Python stack (most recent call first):",
                                          "rank 3   File \"train.py\", line 8 in read_batch",
                                          "rank 3   File \"train.py\", line 14 in <module>",
                                          "rank 3 native stack of its thread 40 python3 (main):",
                                          "rank 3   #0 0x20 _PyEval_EvalFrameDefault",
                                          "rank 3   #1 0x30 main"};
  ASSERT_GE(with_stack.details.size(), shown.size());
  EXPECT_EQ(
      std::vector<std::string>(with_stack.details.end() - shown.size(), with_stack.details.end()),
      shown);
  const std::string json = FlightJson(FourRanks(), flights, with_stack);
  EXPECT_THAT(json, HasSubstr("\"stack_taken\":\"idle\",\"stack\":[\"thread 41 python3\","));
  EXPECT_THAT(json, HasSubstr("\"  File \\\"loader.py\\\", line 3 in worker\""));
  // At most `frames` frames of each.
  EXPECT_EQ(StackToShow(flights[3].stack, 1).size(), 4u);
}

TEST(FlightVerdict, AnOpOfAProcessSetNamesItsSetAndOnlyItsMembers) {
  std::map<int, RankFlight> flights;
  // Set 1 is ranks 1-3. Rank 0 and rank 3 wait in step 3's "big.3" (no timeout yet); ranks 1 and
  // 2 timed out in "set.2", which rank 3 skipped.
  for (int r : {0, 3}) {
    flights[r] = Rank({Op(6, "small.2", FlightState::kDone, 4.2),
                       Op(7, "big.3", FlightState::kSubmitted, 4.0, 0, 1 << 24)},
                      "stop");
    if (r == 3)
      flights[r].events.insert(flights[r].events.begin(), Op(2, "set.1", FlightState::kDone, 9, 1));
  }
  for (int r : {1, 2}) {
    flights[r] =
        Rank({Op(2, "set.1", FlightState::kDone, 9, 1), Op(6, "small.2", FlightState::kDone, 4.2),
              TimedOut(Op(3, "set.2", FlightState::kSubmitted, 4.1, 1))});
  }
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line, StartsWith("rank 3 (host h2, local rank 1) did not submit allreduce 'set.2' "
                                 "(set 1, seq 3) that ranks 1,2 waited"));
  EXPECT_THAT(v.line, HasSubstr("of another process set"));
}

TEST(FlightVerdict, AStoppedRankInsideTheDataPlaneHeldUpAnOpEveryRankReached) {
  std::map<int, RankFlight> flights;
  for (int r = 0; r < 4; ++r) {
    flights[r] =
        Rank({Op(1, "big", r == 3 ? FlightState::kDataPlane : FlightState::kDataPlane, 4.2)});
    if (r != 3) flights[r].events[0] = TimedOut(flights[r].events[0], 4.0);
  }
  flights[3].why = "stop";
  flights[3].proc = "T";
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line, StartsWith("rank 3 (host h2, local rank 1) held up allreduce 'big' (set 0, "
                                 "seq 1), which every rank reached"));
  EXPECT_THAT(v.line, HasSubstr("stopped (SIGSTOP or a debugger)"));
  EXPECT_THAT(v.line, HasSubstr("inside the data plane (SHM_ALLREDUCE)"));
}

TEST(FlightVerdict, ARankThatCrashedInsideAnOpIsBlamedEvenWhenTheOthersRecordsAreCutShort) {
  std::map<int, RankFlight> flights;
  flights[3] = Rank({Op(1, "big", FlightState::kDataPlane, 0.6)});
  flights[3].ended_itself = flights[3].first_failure = true;
  flights[3].exited = true;
  flights[3].signal = SIGKILL;
  // Rank 2 failed in it too (its plane saw rank 3 die), after rank 3; 0 and 1 sent nothing.
  flights[2] = Rank({Op(1, "big", FlightState::kDataPlane, 0.6)});
  flights[2].events[0].state = FlightState::kFailed;
  flights[2].events[0].code = static_cast<int>(absl::StatusCode::kAborted);
  flights[2].ended_itself = true;
  flights[2].exited = true;
  flights[2].exit_code = 1;
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line, StartsWith("rank 3 (host h2, local rank 1) held up allreduce 'big'"));
  EXPECT_THAT(v.line, HasSubstr("killed by signal 9"));
}

// Over TCP a rank in its own code may fail first: its MPI aborts once the ranks that timed out
// are gone. Its ring still shows that it never submitted the op.
TEST(FlightVerdict, ARankThatFailedFirstButNeverReachedTheOpDidNotSubmitIt) {
  auto flights = Waiting("big.2");
  for (auto& [r, f] : flights) f.events.erase(f.events.begin() + 2);
  flights[3] = Rank(
      {Op(1, "big.1", FlightState::kDone, 9), Op(2, "small.1", FlightState::kDone, 8.9)}, "idle");
  flights[3].ended_itself = flights[3].first_failure = true;
  flights[3].failure = "ended the job through MPI_Abort (exit code 17)";
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line,
              StartsWith("rank 3 (host h2, local rank 1) did not submit allreduce 'big.2'"));
  EXPECT_THAT(v.line,
              HasSubstr("it failed: ended the job through MPI_Abort (exit code 17) before it "
                        "submitted it; no collective of it is pending"));
}

TEST(FlightVerdict, ADisagreementNamesItself) {
  auto flights = Waiting("small.2");
  FlightEvent& e = flights[1].events.back();
  e.code = static_cast<int>(absl::StatusCode::kInvalidArgument);
  e.error = "tensor 'small.2': mismatched ALLREDUCE shapes: rank 0 sent [64], rank 3 sent [32]";
  const Verdict v = JudgeFlights(FourRanks(), flights);
  EXPECT_THAT(v.line, HasSubstr("allreduce 'small.2' (set 0, seq 4) failed on rank 1"));
  EXPECT_THAT(v.line, HasSubstr("rank 3 sent [32]"));
}

TEST(FlightVerdict, NothingWaitingAndNoCrashIsNoVerdict) {
  std::map<int, RankFlight> flights;
  for (int r = 0; r < 4; ++r) flights[r] = Rank({Op(1, "big", FlightState::kDone, 1)}, "stop");
  EXPECT_EQ(JudgeFlights(FourRanks(), flights).line, "");
  EXPECT_EQ(JudgeFlights(FourRanks(), {}).line, "");
}

TEST(FlightVerdict, TheMergedRecordIsJsonAndTheTraceAChromeTrace) {
  auto flights = Waiting("small.2");
  flights[1].events[0].name = "quote\" and \\ and \n";
  const Verdict v = JudgeFlights(FourRanks(), flights);
  absl::StatusOr<Json> json = ParseJson(FlightJson(FourRanks(), flights, v), "flight.json");
  ASSERT_TRUE(json.ok()) << json.status();
  const Json* ranks = JsonMember(*json, "ranks");
  ASSERT_NE(ranks, nullptr);
  absl::StatusOr<Json> trace = ParseJson(FlightTrace(FourRanks(), flights), "flight.trace.json");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_NE(JsonMember(*trace, "traceEvents"), nullptr);
}

}  // namespace
}  // namespace launch
}  // namespace hvx
