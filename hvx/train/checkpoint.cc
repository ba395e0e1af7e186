#include "hvx/train/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <new>
#include <optional>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "hvx/common/clock.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/random_hex.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/checkpoint_file.h"
#include "hvx/train/checkpoint_format.h"
#include "hvx/train/rank_failure.h"

namespace hvx {
namespace train {
namespace {

constexpr char kCheckpointPrefix[] = "ckpt-";
constexpr char kCheckpointSuffix[] = ".pt";
// Appended to the name of a checkpoint file that proved damaged when loaded.
constexpr char kCorruptSuffix[] = ".corrupt";

// "<checkpoint.dir>/ckpt-<step>.pt": the single file of `global_step`.
std::string CheckpointFilePath(const CheckpointConfig& checkpoint, int64_t global_step) {
  return absl::StrCat(checkpoint.dir(), "/", kCheckpointPrefix, global_step, kCheckpointSuffix);
}

// The global step of a checkpoint's file name "ckpt-<step>.pt", or nullopt for any other name.
std::optional<int64_t> CheckpointStep(absl::string_view name) {
  int64_t step = 0;
  if (absl::ConsumePrefix(&name, kCheckpointPrefix) &&
      absl::ConsumeSuffix(&name, kCheckpointSuffix) && absl::SimpleAtoi(name, &step)) {
    return step;
  }
  return std::nullopt;
}

// The names of the entries of `dir` (none when it cannot be read).
std::vector<std::string> NamesIn(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) names.emplace_back(e->d_name);
  closedir(d);
  return names;
}

// Checkpoint files in `dir`, oldest first (by the global step in the name).
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : NamesIn(dir)) {
    if (std::optional<int64_t> step = CheckpointStep(name)) {
      found.emplace_back(*step, absl::StrCat(dir, "/", name));
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

// Checkpoints in `dir` that a load set aside as damaged ("ckpt-<step>.pt.corrupt", or
// "ckpt-<step>.corrupt" for a directory).
std::vector<std::string> SetAsideAsCorrupt(const std::string& dir) {
  std::vector<std::string> found;
  for (const std::string& name : NamesIn(dir)) {
    absl::string_view base = name;
    if (absl::ConsumeSuffix(&base, kCorruptSuffix) &&
        (CheckpointStep(base) || CheckpointDirStep(base) >= 0)) {
      found.push_back(absl::StrCat(dir, "/", name));
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

// Removes what writers killed before their rename left in `dir` ("ckpt-N.pt.tmp.*", and
// "ckpt-N/" directories without an index) once it has
// not been written to for kStaleTemporaryAge. A younger one may be another writer's in progress
// (an attempt on a host cut off from this run that still runs, a second job pointed at the same
// directory) whose rename would then fail; it is left for a later start.
constexpr absl::Duration kStaleTemporaryAge = absl::Minutes(10);

void RemoveStaleTemporaries(const std::string& dir) {
  for (const std::string& name : NamesIn(dir)) {
    if (CheckpointDirStep(name) >= 0) {
      // A checkpoint directory without its index: a save that did not finish.
      const std::string path = absl::StrCat(dir, "/", name);
      struct stat st;
      // Only a directory proven to have no index (not one whose index could not be looked at),
      // none of whose files was written to for kStaleTemporaryAge.
      const bool indexed =
          stat(absl::StrCat(path, "/", kIndexFileName).c_str(), &st) == 0 || errno != ENOENT;
      if (indexed || lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      absl::Time newest = absl::FromTimeT(st.st_mtime);
      for (const std::string& entry : NamesIn(path)) {
        if (stat(absl::StrCat(path, "/", entry).c_str(), &st) == 0) {
          newest = std::max(newest, absl::FromTimeT(st.st_mtime));
        }
      }
      if (absl::Now() - newest < kStaleTemporaryAge) continue;
      const absl::Status removed = RemoveCheckpointDir(path);
      HVX_LOG(INFO) << (removed.ok()
                            ? "removed " + path + ", a checkpoint an earlier attempt did not finish"
                            : std::string(removed.message()));
      continue;
    }
    if (!CheckpointStep(TempFileTarget(name))) continue;
    const std::string path = absl::StrCat(dir, "/", name);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) continue;
    const absl::Duration age = absl::Now() - absl::FromTimeT(st.st_mtime);
    if (age < kStaleTemporaryAge) {
      HVX_LOG(INFO) << "left " << path << " in place: written to " << absl::FormatDuration(age)
                    << " ago, it may be another writer's checkpoint in progress";
      continue;
    }
    if (unlink(path.c_str()) == 0) {
      HVX_LOG(INFO) << "removed " << path << ", a checkpoint an earlier attempt did not finish";
    }
  }
}

// Removes the oldest checkpoints of either format beyond c.keep() (rank 0).
void PruneCheckpoints(const CheckpointConfig& c) {
  std::vector<std::pair<int64_t, std::string>> all = ListCheckpoints(c.dir());
  const auto dirs = ListCheckpointDirs(c.dir());
  all.insert(all.end(), dirs.begin(), dirs.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + c.keep() < all.size(); ++i) {
    const std::string& path = all[i].second;
    if (CheckpointDirStep(path.substr(path.rfind('/') + 1)) >= 0) {
      const absl::Status removed = RemoveCheckpointDir(path);
      if (!removed.ok()) HVX_LOG(WARNING) << "checkpoint.keep: " << removed.message();
    } else {
      unlink(path.c_str());
    }
  }
}

// Rank 0's line about a checkpoint directory written: what it cost, for choosing the interval.
void LogSaved(const SavedCheckpoint& saved) {
  HVX_LOG_RANK0(INFO) << absl::StrFormat(
      "checkpoint %s: %.1f MB from %d ranks in %.3f s, training paused %.3f s (rank 0 wrote "
      "%.1f MB)",
      saved.path, saved.bytes_total / 1e6, Size(), saved.seconds, saved.pause_s,
      saved.bytes_written / 1e6);
}

// Moves the checkpoints in `dir` into a new subfolder "replaced-<unix seconds>", or
// "replaced-<unix seconds>-N" when that exists (two moves within a second must not mix), which
// ListCheckpoints does not look into, and returns its path, or "" when there were none.
absl::StatusOr<std::string> MoveCheckpointsAside(const std::string& dir) {
  auto all = ListCheckpoints(dir);
  for (auto& found : ListCheckpointDirs(dir)) all.push_back(std::move(found));
  for (std::string& corrupt : SetAsideAsCorrupt(dir)) all.emplace_back(-1, std::move(corrupt));
  if (all.empty()) return std::string();
  const std::string base = absl::StrCat(dir, "/replaced-", static_cast<int64_t>(time(nullptr)));
  std::string aside = base;
  for (int n = 1; mkdir(aside.c_str(), 0755) != 0; ++n) {
    if (errno != EEXIST || n > 1000) return ErrnoToStatus(errno, absl::StrCat("mkdir ", aside));
    aside = absl::StrCat(base, "-", n);
  }
  for (const auto& [step, path] : all) {
    const std::string to = absl::StrCat(aside, "/", path.substr(path.rfind('/') + 1));
    if (rename(path.c_str(), to.c_str()) != 0)
      return ErrnoToStatus(errno, absl::StrCat("rename ", path, " -> ", to));
  }
  return aside;
}

// What rank 0 found when it looked for a checkpoint, as every rank receives it.
struct ResumeNotice {
  enum class Outcome : int64_t { kNoCheckpoint = 0, kLoaded = 1, kRank0Failed = 2 };
  Outcome outcome = Outcome::kNoCheckpoint;
  TrainingPosition position;      // kLoaded: where the checkpoint stands
  bool own_rank_buffers = false;  // kLoaded: each rank's own buffers are broadcast next
  bool averages = false;          // kLoaded: the parameters' averages are broadcast next
  bool state = false;             // kLoaded: the file had every state tensor
};

// The broadcast form of a ResumeNotice: outcome, EncodePosition(position), own_rank_buffers,
// averages, state.
constexpr size_t kEncodedNoticeSize = 1 + kEncodedPositionSize + 3;
using EncodedNotice = std::array<int64_t, kEncodedNoticeSize>;

EncodedNotice EncodeNotice(const ResumeNotice& notice) {
  EncodedNotice encoded{};
  encoded.front() = static_cast<int64_t>(notice.outcome);
  if (notice.outcome == ResumeNotice::Outcome::kLoaded) {
    const std::vector<int64_t> position = EncodePosition(notice.position);
    std::copy(position.begin(), position.end(), encoded.begin() + 1);
  }
  encoded[kEncodedNoticeSize - 3] = notice.own_rank_buffers ? 1 : 0;
  encoded[kEncodedNoticeSize - 2] = notice.averages ? 1 : 0;
  encoded.back() = notice.state ? 1 : 0;
  return encoded;
}

absl::StatusOr<ResumeNotice> DecodeNotice(const EncodedNotice& encoded) {
  ResumeNotice notice;
  notice.outcome = static_cast<ResumeNotice::Outcome>(encoded.front());
  if (notice.outcome != ResumeNotice::Outcome::kLoaded) return notice;
  HVX_ASSIGN_OR_RETURN(notice.position, DecodePosition(absl::MakeConstSpan(encoded.data() + 1,
                                                                           kEncodedPositionSize)));
  notice.own_rank_buffers = encoded[kEncodedNoticeSize - 3] != 0;
  notice.averages = encoded[kEncodedNoticeSize - 2] != 0;
  notice.state = encoded.back() != 0;
  return notice;
}

// The file that says --fresh was applied to `dir` in job `job_id` (FreshJobId); "" without one.
std::string FreshMarkerPath(const std::string& dir, const std::string& job_id) {
  if (job_id.empty()) return "";
  std::string name = job_id;
  for (char& ch : name) {
    if (!absl::ascii_isalnum(ch) && ch != '-' && ch != '_' && ch != '.') ch = '_';
  }
  return absl::StrCat(dir, "/fresh-applied.", name);
}

// --fresh on rank 0: the checkpoints in c.dir() set aside, unless this job did that already (a
// restart of it: what it wrote since is its progress).
absl::Status ApplyFresh(const CheckpointConfig& c, const std::string& job_id) {
  const std::string marker = FreshMarkerPath(c.dir(), job_id);
  struct stat st;
  if (!marker.empty() && lstat(marker.c_str(), &st) == 0) {
    HVX_LOG(INFO) << "--fresh was applied when job " << job_id << " first started (" << marker
                  << "); this start of it resumes";
    return absl::OkStatus();
  }
  HVX_RETURN_IF_ERROR(MakeDirs(c.dir()));
  HVX_ASSIGN_OR_RETURN(const std::string aside, MoveCheckpointsAside(c.dir()));
  if (!aside.empty()) HVX_LOG(INFO) << "--fresh: moved the previous checkpoints to " << aside;
  if (marker.empty()) return absl::OkStatus();
  return WriteFileAtomically(marker, absl::StrCat(job_id, "\n"), "--fresh marker",
                             /*durable=*/true);
}

// Rank 0's part of ResumeFromNewestCheckpoint for checkpoint files, after `status` says whether
// --fresh (`fresh`) was applied: loads the newest one, if any, into `model` and `optimizer`, and
// *rank_buffers.
ResumeNotice LoadNewestOnRank0(const CheckpointConfig& c, bool fresh, const torch::Device& device,
                               Classifier& model, torch::optim::Optimizer& optimizer,
                               std::vector<torch::Tensor>* rank_buffers,
                               const CheckpointExtras& extras, absl::Status* status) {
  ResumeNotice notice;
  auto all = ListCheckpoints(c.dir());
  // Newest first. A file that does not load (truncated, corrupt) is moved aside as
  // "<name>.corrupt" and the next older one tried: a bad newest checkpoint must not stop every
  // restart. A checkpoint of another model is refused outright: the older ones are too.
  absl::Status newest_error;
  for (auto it = all.rbegin(); status->ok() && it != all.rend(); ++it) {
    const std::string& path = it->second;
    absl::Status loaded = LoadCheckpointFile(path, device, model, optimizer, &notice.position,
                                             rank_buffers, extras, &notice.averages, &notice.state);
    if (absl::IsDataLoss(loaded)) {
      if (newest_error.ok()) newest_error = loaded;
      const std::string aside = path + kCorruptSuffix;
      const bool moved = rename(path.c_str(), aside.c_str()) == 0;
      HVX_LOG(WARNING) << loaded.message() << (moved ? "; moved it to " + aside : "")
                       << (std::next(it) != all.rend() ? "; trying the next older checkpoint"
                                                       : "; no older checkpoint is left");
      continue;
    }
    *status = loaded;
    if (!status->ok()) break;
    if (extras.averages != nullptr && !notice.averages) {
      HVX_LOG(INFO) << path
                    << " has no moving average of the weights (written with ema_decay 0); the "
                       "average starts from its weights";
    }
    notice.outcome = ResumeNotice::Outcome::kLoaded;
    notice.own_rank_buffers = !rank_buffers->empty() && notice.position.world_size == Size();
    HVX_LOG(INFO) << "resuming from " << path << " (epoch " << notice.position.epoch + 1
                  << ", step " << notice.position.global_step << ")";
    break;
  }
  if (status->ok() && notice.outcome != ResumeNotice::Outcome::kLoaded && newest_error.ok() &&
      !fresh) {
    // A run whose checkpoints were all set aside as damaged in an earlier attempt: starting over
    // without a word would lose it.
    const std::vector<std::string> corrupt = SetAsideAsCorrupt(c.dir());
    if (!corrupt.empty()) {
      *status = absl::FailedPreconditionError(absl::StrCat(
          "checkpoint.dir ", c.dir(), " holds no checkpoint to resume from, only ", corrupt.size(),
          " set aside as damaged (", absl::StrJoin(corrupt, ", "),
          "): starting over would lose the run. Restore a checkpoint as ckpt-<step>.pt, or "
          "start over with --fresh"));
    }
  }
  if (status->ok() && notice.outcome != ResumeNotice::Outcome::kLoaded && !newest_error.ok()) {
    // Every checkpoint there was corrupt: starting over silently would lose the run.
    *status = absl::DataLossError(absl::StrCat(
        "no checkpoint in ", c.dir(), " loads (each was moved aside as .corrupt); the newest: ",
        newest_error.message(), ". Start over with --fresh, or restore a checkpoint"));
  }
  if (!status->ok()) notice.outcome = ResumeNotice::Outcome::kRank0Failed;
  return notice;
}

// Every rank takes its own row of each floating-point buffer of rank 0's `rank_buffers`.
absl::Status BroadcastRankBuffers(Classifier& model,
                                  const std::vector<torch::Tensor>& rank_buffers) {
  torch::NoGradGuard no_grad;
  const auto buffers = FloatBuffers(model);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const torch::Tensor& buffer = buffers[i].second;
    torch::Tensor all =
        Rank() == 0 ? rank_buffers[i].contiguous()
                    : torch::empty({Size(), buffer.numel()}, torch::dtype(buffer.scalar_type()));
    HVX_RETURN_IF_ERROR(BroadcastInPlace("resume.buffer." + buffers[i].first, all, 0));
    buffer.copy_(all[Rank()].view_as(buffer));
  }
  return absl::OkStatus();
}

// A checkpoint without the weights' moving averages: they start from its weights, the same on
// every rank.
void StartAveragesFromWeights(Classifier& model, NamedTensors& averages) {
  torch::NoGradGuard no_grad;
  const auto params = model.named_parameters();
  for (auto& [name, average] : averages) average.copy_(params[name]);
}

}  // namespace

std::string CheckpointPath(const CheckpointConfig& checkpoint, int64_t global_step) {
  if (checkpoint.format() == CheckpointConfig::SHARDED) {
    return CheckpointDirPath(checkpoint, global_step);
  }
  return CheckpointFilePath(checkpoint, global_step);
}

absl::StatusOr<CheckpointConfig::Format> ChooseCheckpointFormat(
    const CheckpointConfig& checkpoint) {
  if (checkpoint.format() != CheckpointConfig::AUTO) return checkpoint.format();
  if (Size() == 1) {
    HVX_LOG(INFO) << "checkpoint.format AUTO: SHARDED (one rank: its checkpoints are written in "
                     "the background)";
    return CheckpointConfig::SHARDED;
  }
  // Rank 0 writes a file of a name no rank has looked up before (so no cached "no such file"
  // answers for it); every other rank reads it back and writes one of its own, which rank 0 then
  // looks for: shards need both ways. The lowest rank at fault is agreed on.
  std::string token = Rank() == 0 ? RandomHex() : std::string();
  const std::string probe = absl::StrCat(checkpoint.dir(), "/hvx-probe-");
  std::string mine;  // this rank's probe once written, removed on the way out
  absl::Cleanup remove_mine = [&mine] {
    if (!mine.empty()) unlink(mine.c_str());
  };
  absl::Status written;
  if (Rank() == 0) {
    written = MakeDirs(checkpoint.dir());
    if (written.ok()) {
      written = WriteFileAtomically(probe + token, token, "checkpoint.dir probe", false);
    }
    if (written.ok()) mine = probe + token;
  }
  HVX_RETURN_IF_ERROR(ShareRank0Error("checkpoint.dir_error", written));
  HVX_RETURN_IF_ERROR(BroadcastBytes("checkpoint.probe", &token, 0));
  auto own_probe = [&probe, &token](int rank) { return absl::StrCat(probe, token, "-", rank); };
  bool sees = true;
  if (Rank() != 0) {
    absl::StatusOr<std::string> read = ReadFileFromDisk(probe + token);
    sees = read.ok() && *read == token &&
           WriteFileAtomically(own_probe(Rank()), token, "checkpoint.dir probe", false).ok();
    if (sees) mine = own_probe(Rank());
  }
  int32_t blind = sees ? Size() : Rank();
  TensorRef t(DataType::kInt32, {1}, &blind);
  AllreduceOptions o;
  o.op = ReduceOp::kMin;
  HVX_RETURN_IF_ERROR(Wait(Allreduce("checkpoint.probe_seen", t, t, o)));
  if (Rank() == 0 && blind == Size()) {
    struct stat st;
    for (int r = 1; r < Size() && blind == Size(); ++r) {
      if (stat(own_probe(r).c_str(), &st) != 0) blind = r;
    }
  }
  // Every rank's probe stays until rank 0 has looked: each removes its own after this.
  HVX_RETURN_IF_ERROR(Wait(Broadcast("checkpoint.probe_seen_by_0", t, 0)));
  if (blind == Size()) {
    HVX_LOG_RANK0(INFO) << "checkpoint.format AUTO: SHARDED (every rank sees the files rank 0 "
                           "writes in "
                        << checkpoint.dir() << "; each rank writes its own shard)";
    return CheckpointConfig::SHARDED;
  }
  std::string host = Rank() == blind ? Host() : std::string();
  HVX_RETURN_IF_ERROR(BroadcastBytes("checkpoint.probe_host", &host, blind));
  HVX_LOG_RANK0(INFO) << "checkpoint.format AUTO: SINGLE_FILE (rank " << blind << " on host "
                      << host << " does not see the files rank 0 writes in " << checkpoint.dir()
                      << ", or cannot write there, or rank 0 does not see its files: its host has "
                         "a directory of its own, so rank 0 writes every checkpoint whole; mount "
                         "one file system at checkpoint.dir on every host for SHARDED)";
  return CheckpointConfig::SINGLE_FILE;
}

absl::Status SaveCheckpoint(const CheckpointConfig& checkpoint, Classifier& model,
                            const CheckpointOptimizer& optimizer, const TrainingPosition& position,
                            const CheckpointExtras& extras) {
  if (checkpoint.format() == CheckpointConfig::AUTO) {
    return absl::InvalidArgumentError(
        "SaveCheckpoint: checkpoint.format AUTO is decided by ChooseCheckpointFormat (the "
        "Checkpointer's Claim); pass SINGLE_FILE or SHARDED");
  }
  if (checkpoint.format() == CheckpointConfig::SHARDED) {
    HVX_ASSIGN_OR_RETURN(const SavedCheckpoint saved,
                         SaveCheckpointDir(checkpoint, model, optimizer, position, extras,
                                           [&checkpoint] { PruneCheckpoints(checkpoint); }));
    LogSaved(saved);
    return absl::OkStatus();
  }
  const absl::Time start = MonotonicNow();
  // A sharded optimizer's state is gathered whole for the file, and dropped once written.
  absl::Cleanup drop_gathered = [&optimizer] {
    if (optimizer.sharded != nullptr) optimizer.optimizer->state().clear();
  };
  if (optimizer.sharded != nullptr) {
    HVX_RETURN_IF_ERROR(optimizer.sharded->GatherState(*optimizer.optimizer));
  }
  HVX_ASSIGN_OR_RETURN(std::vector<torch::Tensor> rank_buffers, GatherRankBuffers(model));
  // Rank 0 writes; its outcome is every rank's, so that a full disk fails the job on every rank
  // with rank 0's reason, not on rank 0 alone while the others wait for it.
  absl::Status written;
  if (Rank() == 0) {
    const std::string path = CheckpointPath(checkpoint, position.global_step);
    written = MakeDirs(checkpoint.dir());
    if (written.ok()) {
      written =
          WriteCheckpointFile(path, model, *optimizer.optimizer, position, rank_buffers, extras);
    }
    if (written.ok()) {
      PruneCheckpoints(checkpoint);
      // What a checkpoint costs, for choosing the interval (checkpoint.every_steps,
      // every_seconds).
      struct stat st;
      const double mb = stat(path.c_str(), &st) == 0 ? st.st_size / 1e6 : 0.0;
      HVX_LOG(INFO) << absl::StrFormat("checkpoint %s: %.1f MB in %.3f s", path, mb,
                                       absl::ToDoubleSeconds(MonotonicNow() - start));
    }
  }
  return ShareRank0Error("checkpoint.error", written);
}

absl::Status Checkpointer::Save(Classifier& model, const CheckpointOptimizer& optimizer,
                                const TrainingPosition& position, const CheckpointExtras& extras) {
  if (checkpoint_.format() != CheckpointConfig::SHARDED) {
    HVX_RETURN_IF_ERROR(SaveCheckpoint(checkpoint_, model, optimizer, position, extras));
    committed_.push_back({CheckpointPath(checkpoint_, position.global_step), position});
    return absl::OkStatus();
  }
  HVX_RETURN_IF_ERROR(Finish());
  const bool background = !checkpoint_.has_background() || checkpoint_.background();
  HVX_RETURN_IF_ERROR(writer_.Start(checkpoint_, model, optimizer, position, extras, background));
  writing_ = position;
  return background ? absl::OkStatus() : Finish();
}

std::vector<Checkpointer::Committed> Checkpointer::TakeCommitted() {
  std::vector<Committed> taken;
  taken.swap(committed_);
  return taken;
}

Checkpointer::~Checkpointer() = default;

Checkpointer::Claimed::~Claimed() {
  if (fd >= 0) close(fd);  // releases the flock
}

namespace {

// Rank 0's part of Checkpointer::Claim: the locked descriptor, or why not.
absl::StatusOr<int> ClaimDir(const std::string& dir, const std::string& job_id) {
  HVX_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = dir + "/hvx-job.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("opening ", path));
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    const std::string who =
        absl::StrCat("job ", job_id.empty() ? "(none)" : job_id, ", pid ", getpid(), " on host ",
                     Host(), ", since ", absl::FormatTime(absl::Now(), absl::UTCTimeZone()), "\n");
    if (ftruncate(fd, 0) != 0 || !WriteFully(fd, who)) {
      const int err = errno;
      close(fd);
      return ErrnoToStatus(err, absl::StrCat("writing ", path));
    }
    return fd;
  }
  const int err = errno;
  char held[512] = {};
  const ssize_t n = pread(fd, held, sizeof(held) - 1, 0);
  close(fd);
  if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL) {
    // A file system without locks (Lustre without flock, a FUSE mount, NFS without its lock
    // daemon): the run goes on unguarded, as it did before claims.
    HVX_LOG(WARNING) << "checkpoint.dir " << dir << " cannot be claimed for this job (flock "
                     << path << ": " << strerror(err) << "); make sure no other job writes into it";
    return -1;
  }
  if (err != EWOULDBLOCK) return ErrnoToStatus(err, absl::StrCat("flock ", path));
  std::string holder = n > 0 ? std::string(held, n) : std::string("another process");
  absl::StripTrailingAsciiWhitespace(&holder);
  if (!job_id.empty() && absl::StartsWith(holder, absl::StrCat("job ", job_id, ","))) {
    HVX_LOG(WARNING) << "checkpoint.dir " << dir << " is held by " << holder
                     << ", an earlier attempt of this job that may still run; this attempt "
                        "writes it now";
    return -1;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint.dir ", dir, " is in use by another job (", holder, ", ", path,
      "): two jobs writing one directory would replace and remove each other's checkpoints. "
      "Give this run its own checkpoint.dir, or stop the other job"));
}

}  // namespace

absl::Status Checkpointer::Claim(const std::string& job_id) {
  absl::Status claimed;
  if (Rank() == 0 && claimed_.fd < 0) {
    absl::StatusOr<int> fd = ClaimDir(checkpoint_.dir(), job_id);
    if (fd.ok()) {
      claimed_.fd = *fd;
    } else {
      claimed = fd.status();
    }
  }
  HVX_RETURN_IF_ERROR(ShareRank0Error("checkpoint.claim_error", claimed));
  HVX_ASSIGN_OR_RETURN(const CheckpointConfig::Format format, ChooseCheckpointFormat(checkpoint_));
  checkpoint_.set_format(format);
  return absl::OkStatus();
}

absl::Status Checkpointer::Finish() {
  if (!writer_.pending()) return absl::OkStatus();
  HVX_ASSIGN_OR_RETURN(const SavedCheckpoint saved,
                       writer_.Finish([this] { PruneCheckpoints(checkpoint_); }));
  LogSaved(saved);
  committed_.push_back({saved.path, writing_, saved.bytes_total, saved.pause_s, saved.seconds});
  return absl::OkStatus();
}

std::string FreshJobId(const Environment& env) {
  for (const char* name : {"TRAINING_JOB_NAME", "SLURM_JOB_ID", "HVX_RUN_ID"}) {
    if (auto id = env.GetNonEmpty(name)) return *id;
  }
  return "";
}

absl::StatusOr<bool> ResumeFromNewestCheckpoint(
    const CheckpointConfig& checkpoint, bool fresh, const torch::Device& device, Classifier& model,
    const CheckpointOptimizer& checkpoint_optimizer, TrainingPosition* position,
    const CheckpointExtras& extras, const std::string& fresh_job_id, std::string* resumed_from) {
  // Rank 0 applies --fresh and tidies, then the directories newer than the newest file are tried
  // (every rank reads), then the files (rank 0 reads and broadcasts).
  absl::Status rank0_status;
  std::vector<std::string> dirs;
  if (Rank() == 0) {
    if (fresh) rank0_status = ApplyFresh(checkpoint, fresh_job_id);
    if (rank0_status.ok()) {
      RemoveStaleTemporaries(checkpoint.dir());
      const auto files = ListCheckpoints(checkpoint.dir());
      const int64_t newest_file = files.empty() ? -1 : files.back().first;
      for (const auto& [step, path] : ListCheckpointDirs(checkpoint.dir())) {
        if (step > newest_file) dirs.insert(dirs.begin(), path);
      }
    }
  }
  HVX_ASSIGN_OR_RETURN(
      const DirResume from_dir,
      ResumeFromCheckpointDirs(dirs, model, checkpoint_optimizer, position, extras));
  if (from_dir.loaded) {
    if (extras.averages != nullptr && !from_dir.averages) {
      HVX_LOG_RANK0(INFO) << from_dir.path
                          << " has no moving average of the weights (written with ema_decay 0); "
                             "the average starts from its weights";
      StartAveragesFromWeights(model, *extras.averages);
    }
    if (resumed_from != nullptr) *resumed_from = from_dir.path;
    return true;
  }
  torch::optim::Optimizer& optimizer = *checkpoint_optimizer.optimizer;
  std::vector<torch::Tensor> rank_buffers;
  ResumeNotice found;
  if (Rank() == 0) {
    if (rank0_status.ok()) {
      found = LoadNewestOnRank0(checkpoint, fresh, device, model, optimizer, &rank_buffers, extras,
                                &rank0_status);
    }
    if (!rank0_status.ok()) found.outcome = ResumeNotice::Outcome::kRank0Failed;
  }
  EncodedNotice encoded = EncodeNotice(found);
  TensorRef ref(DataType::kInt64, TensorShape({static_cast<int64_t>(encoded.size())}),
                encoded.data());
  HVX_RETURN_IF_ERROR(Wait(Broadcast("resume.position", ref, 0)));
  HVX_ASSIGN_OR_RETURN(found, DecodeNotice(encoded));
  switch (found.outcome) {
    case ResumeNotice::Outcome::kNoCheckpoint:
      return false;
    case ResumeNotice::Outcome::kRank0Failed:
      return ShareRank0Error("resume.error", rank0_status);
    case ResumeNotice::Outcome::kLoaded:
      break;
  }
  *position = found.position;
  HVX_RETURN_IF_ERROR(BroadcastParameters(model, 0));
  HVX_RETURN_IF_ERROR(BroadcastOptimizerState(optimizer, 0));
  if (found.own_rank_buffers) HVX_RETURN_IF_ERROR(BroadcastRankBuffers(model, rank_buffers));
  if (extras.state != nullptr && found.state) {
    HVX_RETURN_IF_ERROR(BroadcastTensors(*extras.state, 0, "resume.state."));
  }
  if (NamedTensors* averages = extras.averages; averages != nullptr) {
    if (found.averages) {
      HVX_RETURN_IF_ERROR(BroadcastTensors(*averages, 0, "resume.average."));
    } else {
      StartAveragesFromWeights(model, *averages);  // the weights just broadcast
    }
  }
  if (checkpoint_optimizer.sharded != nullptr) {
    HVX_RETURN_IF_ERROR(checkpoint_optimizer.sharded->ScatterState(optimizer));
    optimizer.state().clear();
  }
  if (resumed_from != nullptr)
    *resumed_from = CheckpointFilePath(checkpoint, position->global_step);
  return true;
}

absl::Status LoadCheckpointModel(const std::string& path, const torch::Device& device,
                                 Classifier& model, bool use_averages) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return LoadCheckpointDirModel(path, device, model, use_averages);
  }
  return LoadCheckpointFileModel(path, device, model, use_averages);
}

}  // namespace train
}  // namespace hvx
