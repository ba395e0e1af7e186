#include "hvx/shm/plane_trial.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace hvx {
namespace shm {
namespace {

constexpr int64_t kSmallBytes = int64_t{64} << 10;
constexpr int64_t kLargeBytes = int64_t{4} << 20;

// The median of the runs after the first.
int64_t Median(std::vector<int64_t> runs) {
  runs.erase(runs.begin());
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// A class's figure as the log shows it: a run's time, or its time per MiB.
std::string Figure(int size_class, int64_t value) {
  return size_class == 0 ? absl::StrFormat("%.1f us", value / 1e3)
                         : absl::StrFormat("%.3f ms per MiB", value / 1e6);
}

}  // namespace

int PlaneTrial::SizeClass(int64_t bytes) {
  if (bytes < kSmallBytes) return 0;
  return bytes < kLargeBytes ? 1 : 2;
}

std::string PlaneTrial::ClassName(int size_class) {
  switch (size_class) {
    case 0:
      return "under 64 KiB";
    case 1:
      return "of 64 KiB to 4 MiB";
    default:
      return "of 4 MiB or more";
  }
}

PlaneTrial::Pick PlaneTrial::Next(int64_t bytes) const {
  Pick p;
  p.size_class = SizeClass(bytes);
  const Class& c = classes_[p.size_class];
  if (c.decided) {
    p.plane = c.chosen;
    return p;
  }
  p.timed = true;
  const size_t run = c.runs[kShared].size() + c.runs[kTransport].size();
  p.plane = run % 4 == 0 || run % 4 == 3 ? kShared : kTransport;
  return p;
}

bool PlaneTrial::Record(int size_class, Plane plane, absl::Duration took, int64_t bytes) {
  Class& c = classes_[size_class];
  const int64_t ns = absl::ToInt64Nanoseconds(took);
  c.runs[plane].push_back(size_class == 0
                              ? ns
                              : static_cast<int64_t>(static_cast<double>(ns) * (1 << 20) /
                                                     std::max<int64_t>(bytes, 1)));
  return !c.decided && static_cast<int>(c.runs[kShared].size()) >= kSamples &&
         static_cast<int>(c.runs[kTransport].size()) >= kSamples;
}

std::string PlaneTrial::Summary(int size_class) const {
  const Class& c = classes_[size_class];
  return absl::StrCat(Median(c.runs[kShared]), " ", Median(c.runs[kTransport]));
}

absl::StatusOr<std::string> PlaneTrial::Decide(int size_class,
                                               const std::vector<std::string>& summaries) {
  Class& c = classes_[size_class];
  c.decided = true;
  c.chosen = kShared;
  int64_t slowest[2] = {0, 0};
  for (size_t r = 0; r < summaries.size(); ++r) {
    const std::vector<absl::string_view> parts = absl::StrSplit(summaries[r], ' ');
    int64_t ns[2];
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &ns[0]) ||
        !absl::SimpleAtoi(parts[1], &ns[1])) {
      return absl::DataLossError(
          absl::StrCat("the CPU plane trial: rank ", r, " sent '", summaries[r], "'"));
    }
    for (int p = 0; p < 2; ++p) slowest[p] = std::max(slowest[p], ns[p]);
  }
  if (slowest[kTransport] < slowest[kShared]) c.chosen = kTransport;
  return absl::StrCat("CPU allreduce of buffers ", ClassName(size_class), ": shared memory ",
                      Figure(size_class, slowest[kShared]), ", the transport's plane ",
                      Figure(size_class, slowest[kTransport]), " (median of ", kSamples - 1,
                      " runs on the slowest rank); ",
                      c.chosen == kShared ? "shared memory" : "the transport's plane",
                      " from now on (HVX_CPU_PLANE=shm or mpi forces one)");
}

}  // namespace shm
}  // namespace hvx
