// Straggler detection: which rank the others keep waiting for, from how long each rank's
// collectives waited between its own submission and the moment every rank had submitted them.
//
// Ranks run in lockstep: every op starts once the last rank has submitted it, so the rank that
// submits last waits least. Each rank keeps a WaitClock over the process set's ops; every window
// (InitOptions::straggler_check_s) the engine allgathers the ranks' WaitSamples and every rank
// feeds the same samples to its StragglerDetector, which names a rank that was the one waited for
// in several windows in a row:
//
//   WaitClock clock;
//   clock.Submitted(t0);                  // an op arrives on the background thread
//   clock.Agreed(t0, t1); clock.Drained(t1);
//   WaitSample mine = clock.TakeWindow(t2);
//   ... allgather EncodeWaitSample(mine) ...
//   StragglerDetector detector(StragglerOptions{}, who);
//   std::string warning = detector.Add(samples, window_s);   // "" or one line to log
//
// Why measure on each rank rather than at the coordinator: with the response cache, steady-state
// training agrees through one bitwise AND per cycle and no rank's submission time reaches
// anyone; the agreement is still one moment on every rank, so each rank's wait before it is
// comparable with the others' without comparing clocks.
#ifndef HVX_CORE_STRAGGLER_H_
#define HVX_CORE_STRAGGLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace hvx {

// What one rank's ops waited in one window.
struct WaitSample {
  // Time during which some op of this rank was submitted and not yet run to completion: the
  // union of the ops' waits (time the rank could have computed instead).
  double wait_s = 0;
  // Sum over the window's ops of the time from the op's submission on this rank to its agreement
  // by every rank, and their number.
  double op_wait_s = 0;
  int64_t ops = 0;
  double window_s = 0;  // the window's length on this rank (the engine uses rank 0's)
};

std::string EncodeWaitSample(const WaitSample& sample);
// Fails (DataLoss) on bytes EncodeWaitSample did not write, or on negative or non-finite numbers.
absl::StatusOr<WaitSample> DecodeWaitSample(absl::string_view bytes);

// One rank's accounting, on the engine's background thread.
class WaitClock {
 public:
  // An op submitted at `submitted` reached the background thread.
  void Submitted(absl::Time submitted);
  // An op submitted at `submitted` was agreed on by every rank at `now`.
  void Agreed(absl::Time submitted, absl::Time now);
  // No op of this rank is pending any more at `now`.
  void Drained(absl::Time now);
  // Whether any op was agreed since the last window.
  bool active() const { return sample_.ops > 0; }
  // The window that ends at `now`, and a new one from there; an op still pending counts from
  // `now` on in the next window.
  WaitSample TakeWindow(absl::Time now);

 private:
  WaitSample sample_;
  absl::Time waiting_since_ = absl::InfiniteFuture();  // InfiniteFuture: no op pending
  absl::Time drained_ = absl::InfinitePast();          // when waiting last ended
};

struct StragglerOptions {
  // A rank is the one waited for in a window when it waited the least and the median of the
  // others' waits exceeds its own by at least this fraction of the window...
  double min_share = 0.05;
  // ... and the median of the others' mean waits per op exceeds its own by at least this.
  double min_late_s = 0.0005;
  // Windows in a row before it is named.
  int windows = 3;
  // The rank named last is named again once this much time has passed since, if it is (again)
  // the one; another rank is named as soon as it is.
  double repeat_s = 300;
};

// What the detector concluded; the same on every rank given the same samples.
struct StragglerStatus {
  int64_t windows = 0;  // windows seen
  // The rank persistently waited for now (named in `warning`), -1: none.
  int rank = -1;
  // Of the last window: for each rank, how much later than the median of the others it
  // submitted its ops on average (ms; negative: earlier), and the fraction of the window the
  // median of the others spent waiting beyond its own wait.
  std::vector<double> late_ms;
  std::vector<double> share;
  double window_s = 0;
  // The last warning given, "" if none.
  std::string warning;
};

class StragglerDetector {
 public:
  // who[r]: how rank r is named in the warning ("rank 3 (host h1, local rank 1)").
  StragglerDetector(StragglerOptions options, std::vector<std::string> who);

  // Every rank's sample of one window of `window_s` seconds. Returns a warning line when a rank
  // has just become the persistently waited-for one (or is still, after repeat_s), else "".
  std::string Add(const std::vector<WaitSample>& samples, double window_s);
  const StragglerStatus& status() const { return status_; }

 private:
  const StragglerOptions options_;
  const std::vector<std::string> who_;
  StragglerStatus status_;
  int candidate_ = -1;  // the rank waited for in the last windows
  int streak_ = 0;      // how many windows in a row
  int warned_ = -1;     // the rank last named
  double since_warned_s_ = 0;
};

}  // namespace hvx

#endif  // HVX_CORE_STRAGGLER_H_
