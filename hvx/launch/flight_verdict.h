// hvxrun's verdict on a job that failed or hung, from every rank's flight recorder
// (hvx/common/flight_ring.h) as the rank wrappers sent it: one line naming the rank the others
// waited for, the collective it did not reach (name, process set, sequence number) and what it
// did instead (died, stopped, stuck in its own code, waiting in another collective or under
// another name), or the tensor whose ranks disagreed; and the merged record as JSON and as a
// Perfetto (Chrome JSON) trace of every rank's last ops.
//
//   std::map<int, RankFlight> flights = ...;  // from the "flight" and "flightev" records
//   Verdict v = JudgeFlights(plan, flights);
//   if (!v.line.empty()) Say("verdict: " + v.line);
//
// Pure: the tests give it fabricated records.
#ifndef HVX_LAUNCH_FLIGHT_VERDICT_H_
#define HVX_LAUNCH_FLIGHT_VERDICT_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hvx/common/flight_ring.h"
#include "hvx/launch/plan.h"

namespace hvx {
namespace launch {

// One rank as hvxrun saw it at the end of an attempt.
struct RankFlight {
  bool dumped = false;  // its wrapper sent the ring
  std::string proc;     // /proc state letter when dumped (T: stopped), or "exited"
  std::string wchan;    // where its main thread slept in the kernel, "" when unknown
  // proc and wchan of its last "idle" dump, read while the job still ran ("stop" and "exit" race
  // the signals that end it).
  std::string idle_proc;
  std::string idle_wchan;
  // It ended by itself, before hvxrun began stopping the job (a crash, a kill, its own exit).
  bool ended_itself = false;
  bool first_failure = false;  // its end was the job's first failure
  std::string failure;         // what its wrapper's error record said (an abort), if one did
  std::string why;             // "exit" (the program failed) or "stop" (the job was being stopped)
  int64_t now_ns = 0;          // the wrapper's monotonic clock at the dump
  // Seconds from hvxrun's receipt of the dump to the moment it began stopping the job (0 for a
  // dump that came after): the times shown count back from that moment.
  double before_stop_s = 0;
  std::chrono::steady_clock::time_point received;  // when hvxrun had the dump
  std::vector<FlightEvent> events;
  // Every thread's stack as the program wrote it when asked (stack_dump.h): "thread TID NAME"
  // ("(main)" appended for the main thread) then "  #N 0xPC symbol" lines; Python's faulthandler
  // blocks ("Thread 0x...:", "  File ..., line N in f") first for hvx.torch programs.
  std::vector<std::string> stack;
  std::string stack_why;  // the `why` of the dump that brought them ("idle", "stop")
  bool exited = false;    // its exit record came
  int exit_code = 0;
  int signal = 0;
};

struct Verdict {
  std::string line;                  // "" when nothing waited and nothing failed
  std::vector<std::string> details;  // the culprits' last ops, one line each
};

Verdict JudgeFlights(const Plan& plan, const std::map<int, RankFlight>& flights);

// The part of a rank's stacks the verdict shows: its main thread's Python frames (the last
// faulthandler block: Python lists its oldest thread last), then its main thread's native frames,
// each under a title line; at most `frames` frames each.
std::vector<std::string> StackToShow(const std::vector<std::string>& stack, size_t frames = 12);

// Every rank's record and the verdict as one JSON document (times in seconds before each rank's
// dump), and every rank's events as a Chrome-JSON trace (one process per rank, one track per
// process set), aligned at the dumps.
std::string FlightJson(const Plan& plan, const std::map<int, RankFlight>& flights,
                       const Verdict& verdict);
std::string FlightTrace(const Plan& plan, const std::map<int, RankFlight>& flights);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_FLIGHT_VERDICT_H_
