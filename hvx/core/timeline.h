// A Chrome-trace JSON timeline (opens in Perfetto or chrome://tracing), written by rank 0.
//
//   HVX_ASSIGN_OR_RETURN(auto timeline, Timeline::Open("/tmp/hvx_timeline.json"));
//   timeline->OpStart("grad.fc1", OpType::kAllreduce);  ...  timeline->OpEnd("grad.fc1");
//
// Each tensor name is one trace "process" (named after the tensor). Per tensor: a
// NEGOTIATE_<OP> span with one instant per rank as it reports ready, then an <OP> span (ALLREDUCE,
// ALLGATHER, ...) with nested activity spans (MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, ...). The
// first record's args hold start_time_since_epoch_in_micros; ts values are microseconds after it.
// The file is a JSON array that is complete after every record: each write replaces the closing
// bracket, so a reader never sees invalid JSON (short of a torn single write).
// Not thread-safe: the engine's background thread is the only writer.
#ifndef HVX_CORE_TIMELINE_H_
#define HVX_CORE_TIMELINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hvx/core/coordinator.h"
#include "hvx/core/message.h"

namespace hvx {

class Timeline : public NegotiationObserver {
 public:
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path);
  ~Timeline() override;

  void NegotiationStart(const std::string& name, OpType type) override;
  void RankReady(const std::string& name, int rank) override;
  void NegotiationEnd(const std::string& name) override;

  void OpStart(const std::string& name, OpType type);
  void ActivityStart(const std::string& name, absl::string_view activity);
  void ActivityEnd(const std::string& name);
  void OpEnd(const std::string& name, absl::string_view args_json);

 private:
  Timeline(int fd, std::string path);
  int Pid(const std::string& name);
  void Event(const std::string& name, absl::string_view ph, absl::string_view event_name,
             absl::string_view extra);
  void Append(const std::string& record);

  int fd_;
  const std::string path_;
  const absl::Time start_;       // MonotonicNow(): ts values count from it
  const absl::Time wall_start_;  // absl::Now() at the same moment, for the record
  int64_t end_offset_ = 0;       // where the closing bracket sits
  bool first_ = true;
  std::unordered_map<std::string, int> pids_;
};

}  // namespace hvx

#endif  // HVX_CORE_TIMELINE_H_
