// Chooses between the shared-memory allreduce and the transport's own by timing both on the job's
// own first buffers: on some machines (a VM whose cores share no cache) the ring through MPI beats
// shared memory, and topology cannot tell. Buffers fall into size classes; per class each plane
// runs kSamples times, in the order S T T S S T T S (so that buffers of a job's repeating sizes
// reach both planes alike), the first run of each discarded (first touch, connection set-up);
// a run counts as its time (under 64 KiB, latency-bound) or its time per MiB (larger ones). Then
// every rank's medians are gathered and the plane whose slowest rank was faster serves that class
// from then on.
//
//   PlaneTrial trial;
//   PlaneTrial::Pick p = trial.Next(bytes);           // which plane runs this buffer
//   ... run it on p.plane, timing it when p.timed ...
//   if (p.timed && trial.Record(p.size_class, p.plane, took, bytes)) {
//     comm.Allgather(trial.Summary(p.size_class), &all);  // every rank at the same buffer
//     HVX_LOG_RANK0(INFO) << trial.Decide(p.size_class, all);
//   }
//
// Every rank sees the same buffers in the same order (the engine's responses), so every rank
// reaches each step at the same buffer and the decision, from everyone's figures, is the same.
#ifndef HVX_SHM_PLANE_TRIAL_H_
#define HVX_SHM_PLANE_TRIAL_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace hvx {
namespace shm {

class PlaneTrial {
 public:
  enum Plane { kShared = 0, kTransport = 1 };
  // Runs of each plane per size class, the first discarded.
  static constexpr int kSamples = 4;
  // Size classes by the buffer's bytes: latency-bound, middle, bandwidth-bound.
  static constexpr int kClasses = 3;
  static int SizeClass(int64_t bytes);
  static std::string ClassName(int size_class);  // "under 64 KiB", ...

  struct Pick {
    Plane plane = kShared;
    bool timed = false;  // a trial run: time it and Record
    int size_class = 0;
  };
  // The plane for a buffer of `bytes`: a trial's until the class is decided.
  Pick Next(int64_t bytes) const;
  // Records a trial run of a `bytes` buffer; true when the class has all its runs (agree now).
  bool Record(int size_class, Plane plane, absl::Duration took, int64_t bytes);
  // This rank's medians for the class (its runs after the first, in ns or ns per MiB), for the
  // agreement.
  std::string Summary(int size_class) const;
  // From every rank's Summary: the plane whose slowest rank's median is lower serves the class
  // (shared memory on a tie). Returns the line to log, with the figures. Errors: a summary that
  // does not parse (the class stays on shared memory).
  absl::StatusOr<std::string> Decide(int size_class, const std::vector<std::string>& summaries);

  bool decided(int size_class) const { return classes_[size_class].decided; }
  Plane chosen(int size_class) const { return classes_[size_class].chosen; }

 private:
  struct Class {
    std::array<std::vector<int64_t>, 2> runs;  // ns, or ns per MiB
    bool decided = false;
    Plane chosen = kShared;
  };
  std::array<Class, kClasses> classes_;
};

}  // namespace shm
}  // namespace hvx

#endif  // HVX_SHM_PLANE_TRIAL_H_
