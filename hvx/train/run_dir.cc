#include "hvx/train/run_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "hvx/common/files.h"
#include "hvx/common/json.h"
#include "hvx/common/logging.h"
#include "hvx/common/random_hex.h"
#include "hvx/common/status.h"

namespace hvx {
namespace train {
namespace {

// A number member of a record, or `fallback` when it has none (or null: a non-finite value).
double Number(const Json& record, absl::string_view key, double fallback = 0) {
  const Json* value = JsonMember(record, key);
  return value != nullptr && value->is_number() ? value->get<double>() : fallback;
}

// The report's point of a "progress" record (the trainer's fields: hvx/train/README.md).
ProgressPoint ProgressOf(const Json& record) {
  ProgressPoint p;
  p.step = static_cast<int64_t>(Number(record, "global_step"));
  p.loss = Number(record, "loss");
  p.lr = Number(record, "lr");
  p.samples_per_s = Number(record, "samples_per_s");
  p.data_wait = Number(record, "data_wait");
  if (const Json* straggler = JsonMember(record, "straggler"); straggler != nullptr) {
    p.straggler_rank = static_cast<int>(Number(*straggler, "rank", -1));
    if (const Json* late = JsonMember(*straggler, "late_ms"); late != nullptr && late->is_array()) {
      for (const Json& ms : *late) {
        if (ms.is_number()) p.straggler_late_ms = std::max(p.straggler_late_ms, ms.get<double>());
      }
    }
  }
  return p;
}

EvalPoint EvalOf(const Json& record) {
  EvalPoint e;
  e.epoch = static_cast<int64_t>(Number(record, "epoch"));
  e.step = static_cast<int64_t>(Number(record, "global_step"));
  e.accuracy = Number(record, "accuracy");
  e.top5 = Number(record, "top5");
  e.loss = Number(record, "loss");
  e.samples = static_cast<int64_t>(Number(record, "samples"));
  return e;
}

}  // namespace

std::string NewRunName(absl::Time start, absl::string_view random_hex) {
  return absl::StrCat(absl::FormatTime("%Y%m%d-%H%M%S", start, absl::UTCTimeZone()), "-",
                      random_hex.substr(0, 6));
}

bool IsRunName(absl::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

absl::StatusOr<RunDir> OpenRunDir(const std::string& summaries_dir, const std::string& name) {
  HVX_RETURN_IF_ERROR(MakeDirs(summaries_dir));
  RunDir dir;
  if (!name.empty()) {
    if (!IsRunName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("run name \"", name, "\" cannot name a folder in ", summaries_dir,
                       " (1 to 64 letters, digits, '.', '_' or '-', not starting with '.')"));
    }
    dir.name = name;
    dir.path = absl::StrCat(summaries_dir, "/", name);
    struct stat st;
    dir.continued = stat(dir.path.c_str(), &st) == 0;
    HVX_RETURN_IF_ERROR(MakeDirs(dir.path));
    return dir;
  }
  // A name taken (another run started in this second drew the same digits) draws again.
  for (int attempt = 0;; ++attempt) {
    dir.name = NewRunName(absl::Now(), RandomHex());
    dir.path = absl::StrCat(summaries_dir, "/", dir.name);
    if (mkdir(dir.path.c_str(), 0750) == 0) return dir;
    if (errno != EEXIST || attempt == 8) {
      return ErrnoToStatus(errno, absl::StrCat("creating the run's summaries folder ", dir.path));
    }
  }
}

absl::Status AddRecordedRun(const std::string& path, const std::string& run, int64_t up_to_step,
                            RunReport* report) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoToStatus(errno, absl::StrCat("reading the run's metrics file ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the run's metrics file ", path, " is not a regular file"));
  }
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(errno, absl::StrCat("opening the run's metrics file ", path));
  std::string line;
  bool ours = false;  // the last "start" record was run `run`'s
  std::vector<ProgressPoint> progress;
  std::vector<EvalPoint> evals;
  // Points past `step`: what a part of the run trained after the checkpoint the next part resumed
  // from, trained again by that next part.
  auto drop_after = [&](int64_t step) {
    while (!progress.empty() && progress.back().step > step) progress.pop_back();
    while (!evals.empty() && evals.back().step > step) evals.pop_back();
  };
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    absl::StatusOr<Json> record = ParseJson(line, absl::StrCat(path, ":", number));
    const Json* event = record.ok() ? JsonMember(*record, "event") : nullptr;
    if (event == nullptr || !event->is_string()) {
      // A line cut short when a run died mid-write; the report is drawn without it.
      HVX_LOG(WARNING) << path << ":" << number
                       << ": not a metrics record, left out of the report ("
                       << (record.ok() ? "no \"event\"" : record.status().message()) << ")";
      continue;
    }
    if (*event == "start") {
      const Json* name = JsonMember(*record, "run");
      ours = name != nullptr && name->is_string() && *name == run;
      if (ours) drop_after(static_cast<int64_t>(Number(*record, "global_step")));
    }
    if (!ours) continue;
    if (*event == "progress") progress.push_back(ProgressOf(*record));
    if (*event == "eval") evals.push_back(EvalOf(*record));
  }
  drop_after(up_to_step);
  for (const ProgressPoint& p : progress) report->AddProgress(p);
  for (const EvalPoint& e : evals) report->AddEval(e);
  return absl::OkStatus();
}

}  // namespace train
}  // namespace hvx
