#include "hvx/launch/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"

namespace hvx {
namespace launch {
namespace {

constexpr absl::string_view kMarkerHead = "\x01hvx";
// A line that never ends (a progress bar redrawn with '\r') is cut here so memory stays bounded.
constexpr size_t kMaxLine = 64 * 1024;
// A rank number has at most this many digits; a longer run of digits is no marker (and is not
// held in memory while it grows).
constexpr size_t kMaxMarkerDigits = 12;

void PushBounded(std::deque<std::string>* lines, absl::string_view line, size_t max) {
  lines->emplace_back(line);
  while (lines->size() > max) lines->pop_front();
}

}  // namespace

void StreamDemuxer::Emit(absl::string_view data) {
  if (!data.empty()) sink_(source_, data);
}

void StreamDemuxer::Feed(absl::string_view data) {
  size_t i = 0;
  while (i < data.size()) {
    if (state_ == State::kMarker) {
      char c = data[i++];
      marker_.push_back(c);
      const size_t n = marker_.size();
      if (n <= kMarkerHead.size()) {
        if (c == kMarkerHead[n - 1]) continue;
      } else if (absl::ascii_isdigit(c) && n <= kMarkerHead.size() + kMaxMarkerDigits) {
        continue;
      } else if (c == '\x02' && n > kMarkerHead.size() + 1) {
        int rank = 0;
        if (absl::SimpleAtoi(
                absl::string_view(marker_).substr(kMarkerHead.size(), n - kMarkerHead.size() - 1),
                &rank)) {
          source_ = rank;
          state_ = State::kContent;
          marker_.clear();
          continue;
        }
      }
      // Not a marker after all: the bytes belong to whatever was being read before. A \x01 that
      // broke it may start the real marker.
      std::string broken = std::move(marker_);
      marker_.clear();
      const bool restart = c == '\x01';
      if (restart) broken.pop_back();
      if (resume_ == State::kLineStart) source_ = kMpiexecSource;
      Emit(broken);
      state_ = !broken.empty() && broken.back() == '\n' ? State::kLineStart : State::kContent;
      if (restart) {
        resume_ = state_;
        state_ = State::kMarker;
        marker_ = "\x01";
      }
      continue;
    }
    if (data[i] == '\x01') {
      resume_ = state_;
      state_ = State::kMarker;
      continue;  // the \x01 is consumed by the kMarker branch above on the next pass
    }
    if (state_ == State::kLineStart) {
      source_ = kMpiexecSource;
      state_ = State::kContent;
    }
    // Content up to and including the next newline, stopping before a possible marker.
    size_t end = i;
    while (end < data.size() && data[end] != '\n' && data[end] != '\x01') ++end;
    if (end < data.size() && data[end] == '\n') {
      Emit(data.substr(i, end + 1 - i));
      state_ = State::kLineStart;
      i = end + 1;
    } else {
      Emit(data.substr(i, end - i));
      i = end;
    }
  }
}

void StreamDemuxer::Finish() {
  if (state_ == State::kMarker && !marker_.empty()) {
    if (resume_ == State::kLineStart) source_ = kMpiexecSource;
    Emit(marker_);
    marker_.clear();
  }
  state_ = State::kLineStart;
}

std::optional<ControlRecord> ParseControlRecord(absl::string_view body) {
  ControlRecord r;
  absl::string_view kind = body.substr(0, body.find(' '));
  if (kind == "start") {
    r.kind = ControlRecord::Kind::kStart;
  } else if (kind == "exit") {
    r.kind = ControlRecord::Kind::kExit;
  } else if (kind == "error") {
    r.kind = ControlRecord::Kind::kError;
  } else if (kind == "flight") {
    r.kind = ControlRecord::Kind::kFlight;
  } else if (kind == "flightev") {
    r.kind = ControlRecord::Kind::kFlightEvent;
  } else if (kind == "flightstack") {
    r.kind = ControlRecord::Kind::kFlightStack;
  } else {
    return std::nullopt;
  }
  size_t msg = body.find(" msg=");
  if (msg != absl::string_view::npos) {
    r.message = std::string(body.substr(msg + 5));
    body = body.substr(0, msg);
  }
  bool has_rank = false;
  for (absl::string_view field : absl::StrSplit(body, ' ', absl::SkipEmpty())) {
    absl::string_view v = field;
    if (absl::ConsumePrefix(&v, "rank=")) {
      has_rank = absl::SimpleAtoi(v, &r.rank);
    } else if (absl::ConsumePrefix(&v, "pid=")) {
      (void)absl::SimpleAtoi(v, &r.pid);
    } else if (absl::ConsumePrefix(&v, "code=")) {
      if (!absl::SimpleAtoi(v, &r.exit_code)) return std::nullopt;
    } else if (absl::ConsumePrefix(&v, "signal=")) {
      if (!absl::SimpleAtoi(v, &r.signal)) return std::nullopt;
    } else if (absl::ConsumePrefix(&v, "host=")) {
      r.host = std::string(v);
    } else if (absl::ConsumePrefix(&v, "proc=")) {
      r.proc = std::string(v);
    } else if (absl::ConsumePrefix(&v, "wchan=")) {
      r.wchan = v == "-" ? "" : std::string(v);
    } else if (absl::ConsumePrefix(&v, "why=")) {
      r.why = std::string(v);
    } else if (absl::ConsumePrefix(&v, "now=")) {
      if (!absl::SimpleAtoi(v, &r.now_ns)) return std::nullopt;
    } else if (absl::ConsumePrefix(&v, "events=")) {
      if (!absl::SimpleAtoi(v, &r.events) || r.events < 0) return std::nullopt;
    } else if (v == "first=1") {
      r.first = true;
    } else if (absl::ConsumePrefix(&v, "lines=")) {
      if (!absl::SimpleAtoi(v, &r.lines) || r.lines < 0) return std::nullopt;
    } else if (absl::ConsumePrefix(&v, "ev=")) {
      if (!DecodeFlightEvent(std::string_view(v.data(), v.size()), &r.event)) return std::nullopt;
    }
  }
  if (!has_rank) return std::nullopt;
  if (r.kind == ControlRecord::Kind::kFlightEvent && r.event.op_id == 0) return std::nullopt;
  return r;
}

std::string DescribeExit(int exit_code, int signal) {
  if (signal != 0) {
    const char* name = strsignal(signal);
    return absl::StrCat("was killed by signal ", signal, " (", name ? name : "?", ")");
  }
  return absl::StrCat("exited with status ", exit_code);
}

std::string LinePrefix(TagMode mode, const RankPlacement& p) {
  switch (mode) {
    case TagMode::kRank:
      return absl::StrCat("[", p.rank, "] ");
    case TagMode::kFull:
      return absl::StrCat("[", p.rank, " ", p.host, ":", p.local_rank, "] ");
    case TagMode::kNone:
      return "";
  }
  return "";
}

// A closed terminal or pipe: the output has nowhere to go, and that is not hvxrun's failure.
void WriteAll(int fd, absl::string_view data) { hvx::WriteFully(fd, data); }

OutputRouter::OutputRouter(const Plan& plan, TagMode mode, int out_fd, int err_fd, Writer writer,
                           ControlHandler on_control)
    : plan_(plan),
      mode_(mode),
      out_fd_(out_fd),
      err_fd_(err_fd),
      writer_(std::move(writer)),
      on_control_(std::move(on_control)) {}

OutputRouter::~OutputRouter() {
  for (auto& [rank, fd] : files_) close(fd);
}

absl::Status OutputRouter::OpenOutputDir(const std::string& dir) {
  HVX_RETURN_IF_ERROR(Annotate(MakeDirs(dir), "--output-dir"));
  for (const RankPlacement& p : plan_.ranks) {
    std::string file = absl::StrCat(dir, "/rank.", p.rank, ".log");
    HVX_ASSIGN_OR_RETURN(files_[p.rank], OpenForWriting(file, "--output-dir log"));
  }
  return absl::OkStatus();
}

void OutputRouter::OnBytes(Stream stream, int source, absl::string_view data) {
  std::string& partial = partial_[{source, static_cast<int>(stream)}];
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) {
      partial.append(data.data(), data.size());
      if (partial.size() >= kMaxLine) {
        std::string line = std::move(partial);
        partial.clear();
        OnLine(stream, source, line);
      }
      return;
    }
    if (partial.empty()) {
      OnLine(stream, source, data.substr(0, nl));
    } else {
      partial.append(data.data(), nl);
      std::string line = std::move(partial);
      partial.clear();
      OnLine(stream, source, line);
    }
    data.remove_prefix(nl + 1);
  }
}

void OutputRouter::Finish() {
  for (auto& [key, partial] : partial_) {
    if (partial.empty()) continue;
    std::string line = std::move(partial);
    partial.clear();
    OnLine(static_cast<Stream>(key.second), key.first, line);
  }
}

void OutputRouter::OnLine(Stream stream, int source, absl::string_view line) {
  const int fd = stream == Stream::kStdout ? out_fd_ : err_fd_;
  const bool is_rank = source >= 0 && source < plan_.size;
  // Only the wrapper writes \x01 on a rank's streams (it escapes the program's), and it starts
  // each record on a line of its own. A record counts only from the rank it names (hydra's tag
  // says who wrote it); the wrapper names rank -1 when it could not place itself. Any other is
  // shown as output: hvxrun would otherwise index its plan with any number.
  if (is_rank && stream == Stream::kStderr && absl::StartsWith(line, kControlMagic)) {
    std::optional<ControlRecord> record = ParseControlRecord(line.substr(strlen(kControlMagic)));
    if (record && (record->rank == source || record->rank == -1)) {
      record->rank = source;
      on_control_(*record);
      return;
    }
  }
  if (!is_rank) {
    PushBounded(&last_mpiexec_, line, kKeptLines);
    if (show_mpiexec_) writer_(fd, absl::StrCat(line, "\n"));
    return;
  }
  if (stream == Stream::kStderr) PushBounded(&last_stderr_[source], line, kKeptLines);
  auto file = files_.find(source);
  if (file != files_.end()) WriteAll(file->second, absl::StrCat(line, "\n"));
  writer_(fd, absl::StrCat(LinePrefix(mode_, plan_.ranks[source]), line, "\n"));
}

std::vector<std::string> OutputRouter::LastStderrLines(int rank) const {
  auto it = last_stderr_.find(rank);
  if (it == last_stderr_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

std::vector<std::string> OutputRouter::LastMpiexecLines() const {
  return {last_mpiexec_.begin(), last_mpiexec_.end()};
}

}  // namespace launch
}  // namespace hvx
