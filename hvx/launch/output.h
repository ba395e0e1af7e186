// Rank output: hydra's merged streams split back into per-rank lines, tagged, and the wrapper's
// control records picked out.
//
// clang-format off
//   OutputRouter router(plan, TagMode::kRank, WriteToFd);
//   StreamDemuxer out([&](int src, absl::string_view d) {
//     router.OnBytes(Stream::kStdout, src, d);
//   });
//   out.Feed(bytes_read_from_mpiexec_stdout);   // "\1hvx3\2hello\n" -> "[3] hello\n" on fd 1
// clang-format on
//
// hvxrun runs mpiexec with `-prepend-pattern kHydraMarkerPattern`. Hydra puts that marker before
// every line and before every chunk it forwards, so each byte can be attributed to its rank even
// when hydra cuts a line in two; bytes after a newline without a marker are mpiexec's own output.
// Lines are re-assembled per rank and stream and written with one write(2) each, so lines of
// different ranks never interleave mid-line.
#ifndef HVX_LAUNCH_OUTPUT_H_
#define HVX_LAUNCH_OUTPUT_H_

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "hvx/common/flight_ring.h"
#include "hvx/launch/options.h"
#include "hvx/launch/plan.h"
#include "hvx/launch/records.h"

namespace hvx {
namespace launch {

// The marker hydra writes before rank output: \x01 "hvx" rank \x02.
inline constexpr char kHydraMarkerPattern[] = "\x01hvx%r\x02";
// Source id of mpiexec's own (unmarked) output.
inline constexpr int kMpiexecSource = -1;

enum class Stream { kStdout = 0, kStderr = 1 };

// Splits one of mpiexec's output streams into (source, bytes) runs; source is a rank or
// kMpiexecSource. Runs keep their bytes exactly, newlines included.
class StreamDemuxer {
 public:
  using Sink = std::function<void(int source, absl::string_view data)>;
  explicit StreamDemuxer(Sink sink) : sink_(std::move(sink)) {}

  void Feed(absl::string_view data);
  // End of stream: a marker cut short is passed on as mpiexec's output.
  void Finish();

 private:
  enum class State { kLineStart, kContent, kMarker };
  void Emit(absl::string_view data);

  Sink sink_;
  State state_ = State::kLineStart;
  int source_ = kMpiexecSource;
  std::string marker_;                // a marker being read, from its \x01
  State resume_ = State::kLineStart;  // where a broken marker's bytes belong
};

// A control record (records.h) as hvxrun reads it.
struct ControlRecord {
  enum class Kind { kStart, kExit, kError, kFlight, kFlightEvent, kFlightStack };
  Kind kind = Kind::kStart;
  int rank = -1;
  std::string host;
  int pid = 0;
  int exit_code = 0;    // kExit: exit status, or 0 when signal != 0; kError: the exit status asked
  int signal = 0;       // kExit: the signal that ended the rank
  std::string message;  // kError; kFlightStack: the line
  // kFlight: the rank's process state, where it slept, why the wrapper sent its ring, and the
  // wrapper's monotonic clock then (FormatFlightRecord).
  std::string proc;
  std::string wchan;
  std::string why;
  int64_t now_ns = 0;
  int64_t events = 0;  // kFlight: how many kFlightEvent records follow
  // kFlightStack: the first line of a set (`why` says why it was taken), and the set's lines.
  bool first = false;
  int64_t lines = 0;
  FlightEvent event;  // kFlightEvent
};

// Parses the text after kControlMagic (without the newline).
std::optional<ControlRecord> ParseControlRecord(absl::string_view body);

// "exited with status 3" / "was killed by signal 9 (Killed)".
std::string DescribeExit(int exit_code, int signal);

// The prefix of a rank's lines: "[3] " (kRank), "[3 h2:1] " (kFull), "" (kNone).
std::string LinePrefix(TagMode mode, const RankPlacement& placement);

// Writes bytes to a file descriptor, retrying short writes and EINTR.
void WriteAll(int fd, absl::string_view data);

// Receives demuxed bytes, assembles lines per (source, stream), tags and writes them, keeps the
// last stderr lines of each rank, and hands control records to a callback.
class OutputRouter {
 public:
  // write(fd, bytes): one call per finished line. fd is out_fd or err_fd.
  using Writer = std::function<void(int fd, absl::string_view data)>;
  using ControlHandler = std::function<void(const ControlRecord&)>;

  OutputRouter(const Plan& plan, TagMode mode, int out_fd, int err_fd, Writer writer,
               ControlHandler on_control);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  // Also writes every rank's untagged lines (both streams) to dir/rank.R.log, truncating them.
  absl::Status OpenOutputDir(const std::string& dir);

  void OnBytes(Stream stream, int source, absl::string_view data);
  // Whether mpiexec's own lines are written (they are always kept for LastMpiexecLines). Off
  // once hvxrun stops a job: hydra's banners then only echo what hvxrun did.
  void set_show_mpiexec(bool show) { show_mpiexec_ = show; }

  // Flushes partial last lines (a newline is added).
  void Finish();

  // The last `kKeptLines` stderr lines of `rank` (untagged), oldest first.
  static constexpr size_t kKeptLines = 10;
  std::vector<std::string> LastStderrLines(int rank) const;
  // The last lines mpiexec (or the remote shell) printed itself, both streams.
  std::vector<std::string> LastMpiexecLines() const;

 private:
  void OnLine(Stream stream, int source, absl::string_view line);  // line without '\n'

  const Plan& plan_;
  const TagMode mode_;
  const int out_fd_;
  const int err_fd_;
  Writer writer_;
  ControlHandler on_control_;
  std::map<std::pair<int, int>, std::string> partial_;  // (source, stream) -> unfinished line
  std::map<int, std::deque<std::string>> last_stderr_;
  std::deque<std::string> last_mpiexec_;
  std::map<int, int> files_;  // rank -> fd
  bool show_mpiexec_ = true;
};

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_OUTPUT_H_
