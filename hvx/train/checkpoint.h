// Checkpoints of a training run: written in one of two formats (checkpoint.format, AUTO choosing
// between them: ChooseCheckpointFormat), every rank resumes from the newest one of either.
//
//   HVX_ASSIGN_OR_RETURN(bool resumed, ResumeFromNewestCheckpoint(config.checkpoint(), fresh,
//                                                                 device, model, optimizer, &pos));
//   HVX_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint(), model, optimizer, pos));  // all ranks
//
// SHARDED: directories "<checkpoint.dir>/ckpt-<global step>/" that every rank writes a shard of:
// sharded_checkpoint.h. SINGLE_FILE, the rest of this comment:
// Files. "<checkpoint.dir>/ckpt-<global step>.pt", the newest checkpoint.keep() of them kept. Each
// is written to a temporary name, synced and renamed, so a crash leaves the old set or the new one,
// never a torn file under a checkpoint's name. A file is a torch::serialize archive of:
//
//   "model"         the model, its floating-point buffers averaged over ranks (what evaluation
//                   uses: the checkpoint alone is a usable model)
//   "optimizer"     the optimizer's state
//   "rank_buffers"  "b0", "b1", ...: floating-point buffer i of every rank, [world size, numel], in
//                   FloatBuffers order (absent from checkpoints written before it was recorded)
//   "position"      int64 EncodePosition(TrainingPosition) (hvx/train/epoch_position.h)
//   "averages"      "count" and "a0", "a1", ...: the moving average of every parameter, in
//                   named_parameters order, when the run keeps one (TrainConfig.ema_decay)
//   "state"         other training state by name (the loss scale of mixed precision), when the
//                   run has some
//   "fingerprint"   "name dtype [shape]" of every parameter and buffer, one per line (uint8 text):
//                   a checkpoint of another model is refused before anything is loaded
//   "data_order"    CheckpointExtras::data_order (uint8 text), when the run gives one
//   "run"           CheckpointExtras::run (uint8 text), the run's name (hvx/train/run_dir.h)
//
// Only rank 0 reads or writes files; the others get the checkpoint by broadcast, so no file system
// shared between hosts is needed. checkpoint.keep counts checkpoints of both formats together.
#ifndef HVX_TRAIN_CHECKPOINT_H_
#define HVX_TRAIN_CHECKPOINT_H_

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/common/env.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/model_state.h"
#include "hvx/train/models.h"
#include "hvx/train/sharded_checkpoint.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// Where SaveCheckpoint writes the checkpoint of `global_step`: "<checkpoint.dir>/ckpt-<step>.pt",
// or the directory "<checkpoint.dir>/ckpt-<step>" with checkpoint.format SHARDED.
std::string CheckpointPath(const CheckpointConfig& checkpoint, int64_t global_step);

// What checkpoint.format AUTO means for this job, the same on every rank (collective): SHARDED
// (written in the background) for one rank and where every rank reads the probe file rank 0
// writes into checkpoint.dir ("hvx-probe-<random>", removed again); SINGLE_FILE when some rank
// does not (its host has a checkpoint.dir of its own, as each SageMaker instance has). Rank 0 logs
// the choice and why. A format other than AUTO is returned as it is, with no probe. Every rank
// returns rank 0's error when it cannot write the probe.
absl::StatusOr<CheckpointConfig::Format> ChooseCheckpointFormat(const CheckpointConfig& checkpoint);

// Writes a checkpoint of `model`, `optimizer`, `position` and `extras` into checkpoint.dir in
// checkpoint.format (SINGLE_FILE or SHARDED: AUTO is InvalidArgument, ChooseCheckpointFormat
// decides it) and removes the oldest (of either format) beyond checkpoint.keep(). Every rank
// calls it (each rank's buffers are gathered). SINGLE_FILE: rank 0 writes, a sharded optimizer's
// state gathered into optimizer.optimizer first; SHARDED: every rank writes
// (sharded_checkpoint.h) and every rank returns the same status. The live model is left as it
// was.
absl::Status SaveCheckpoint(const CheckpointConfig& checkpoint, Classifier& model,
                            const CheckpointOptimizer& optimizer, const TrainingPosition& position,
                            const CheckpointExtras& extras = {});

// A training run's checkpoints, one at a time: Save writes one (SaveCheckpoint), or with
// checkpoint.format SHARDED and checkpoint.background (the default) starts writing it in the
// background (CheckpointDirWriter); Finish commits the one in progress. Collective, as
// CheckpointDirWriter says: Save finishes the previous one first.
class Checkpointer {
 public:
  explicit Checkpointer(const CheckpointConfig& checkpoint) : checkpoint_(checkpoint) {}
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective, before the first checkpoint: rank 0 takes checkpoint.dir for this job (an
  // exclusive flock(2) on "<dir>/hvx-job.lock", which says who holds it) until the Checkpointer
  // is destroyed or the process ends. Two jobs writing one directory would replace and remove
  // each other's checkpoints: another job's claim is FailedPrecondition on every rank naming its
  // job id, process and host. A claim of the same `job_id` (FreshJobId: a restart while an attempt
  // cut off from the job may still run) is taken over with a warning; "" is no job's. Then
  // checkpoint.format AUTO is decided (ChooseCheckpointFormat): format() says which.
  absl::Status Claim(const std::string& job_id);
  // The format Save writes: checkpoint.format, with AUTO replaced by Claim's decision (AUTO
  // until Claim).
  CheckpointConfig::Format format() const { return checkpoint_.format(); }
  // Where Save writes the checkpoint of `global_step` (CheckpointPath in format()).
  std::string Path(int64_t global_step) const { return CheckpointPath(checkpoint_, global_step); }
  absl::Status Save(Classifier& model, const CheckpointOptimizer& optimizer,
                    const TrainingPosition& position, const CheckpointExtras& extras = {});
  // After a background Save, before the parameters, the optimizer's state, the moving averages or
  // the loss scale change (the next step's optimizer step): waits until they are copied
  // (CheckpointDirWriter::AwaitSnapshot). Forward and backward may run before it.
  void AwaitSnapshot() { writer_.AwaitSnapshot(); }
  // This rank's background write is still running.
  bool Writing() const { return writer_.writing(); }
  // Waits for the checkpoint in progress and commits it (OK when there is none): every rank.
  absl::Status Finish();

  // A checkpoint written whole: where, of which position, and for a sharded one its bytes (every
  // rank's), the pause training saw and the seconds from its start to its index.
  struct Committed {
    std::string path;
    TrainingPosition position;
    int64_t bytes = -1;
    double pause_s = 0, seconds = 0;
  };
  // The checkpoints committed since the last call, oldest first (for the run's records).
  std::vector<Committed> TakeCommitted();

 private:
  // The claim's locked descriptor; declared before the writer so that a write in progress is
  // joined before the claim goes.
  struct Claimed {
    ~Claimed();
    int fd = -1;
  };
  CheckpointConfig checkpoint_;
  Claimed claimed_;
  CheckpointDirWriter writer_;
  TrainingPosition writing_;  // the position of the checkpoint writer_ has pending
  std::vector<Committed> committed_;
};

// Every rank calls it. The newest checkpoint in checkpoint.dir of either format is loaded, its path
// put in *resumed_from when given (after moving the existing ones into
// "<dir>/replaced-<unix seconds>[-N]/" when `fresh`, once per job: see FreshJobId), and every rank
// takes its model, optimizer state and position into `model`, `optimizer` and *position; when the
// world size is the checkpoint's, each rank also takes its own BatchNorm statistics. A directory
// (SHARDED) is read by every rank, each reading what it needs (ResumeFromCheckpointDirs); a file,
// by rank 0, which broadcasts it (and a sharded optimizer takes its slices of the state). Returns
// false, changing nothing, when there is no checkpoint; every rank returns rank 0's error when it
// fails. Every rank also takes the checkpoint's `extras` into them; averages the checkpoint does
// not have start from the checkpoint's weights (logged), state it does not have keeps its value. A
// file is read and checked before LibTorch sees it, and only one proven damaged (its zip container
// or a record unreadable; TorchScript code in it, which would run while loading) is set aside as
// "<name>.corrupt" for the next older one: DataLoss when none is left. Any other failure
// (permission, I/O, memory, a format of another LibTorch) fails the run, the file left in place.
// With no checkpoint but some set aside as damaged, and not `fresh`, FailedPrecondition: starting
// over would lose the run. `fresh` moves the damaged ones aside too.
absl::StatusOr<bool> ResumeFromNewestCheckpoint(const CheckpointConfig& checkpoint, bool fresh,
                                                const torch::Device& device, Classifier& model,
                                                const CheckpointOptimizer& optimizer,
                                                TrainingPosition* position,
                                                const CheckpointExtras& extras = {},
                                                const std::string& fresh_job_id = "",
                                                std::string* resumed_from = nullptr);

// What names this job across its restarts, for --fresh: a job that is started again (hvxrun
// --max-restarts, a Slurm requeue, a SageMaker spot restart) runs the same command, --fresh
// included, and must resume what its first start wrote instead of setting it aside again. Rank 0
// leaves "<dir>/fresh-applied.<id>" when it applies --fresh, and a start of the same job that
// finds it resumes. The id is SageMaker's TRAINING_JOB_NAME, else Slurm's SLURM_JOB_ID, else
// hvxrun's HVX_RUN_ID (the same in every attempt of one hvxrun), else "" (a process started by
// hand: --fresh applies every time). So within one Slurm job, --fresh sets a directory's
// checkpoints aside once.
std::string FreshJobId(const Environment& env);

// Loads the model of a checkpoint (file or directory) SaveCheckpoint wrote (its BatchNorm
// statistics averaged over ranks) into `model`, on `device`; with `use_averages`, the parameters
// are the checkpoint's moving averages (FailedPrecondition when it has none). DataLoss naming the
// file when it cannot.
absl::Status LoadCheckpointModel(const std::string& path, const torch::Device& device,
                                 Classifier& model, bool use_averages = false);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_CHECKPOINT_H_
