// Checkpoints as directories that every rank writes a shard of (checkpoint.format SHARDED), and
// their loading at any world size and optimizer.shard setting.
//
//   CheckpointDirWriter writer;                                  // every rank, collectively:
//   HVX_RETURN_IF_ERROR(writer.Start(config.checkpoint(), model, {whole, sharded}, position,
//                                    extras, /*background=*/true));
//   ... forward, backward; writer.AwaitSnapshot(); the optimizer's step ...
//   HVX_ASSIGN_OR_RETURN(SavedCheckpoint saved, writer.Finish(prune));
//   HVX_ASSIGN_OR_RETURN(DirResume resumed, ResumeFromCheckpointDirs(
//       candidates, model, {whole, sharded}, &position, extras));
//
// "<checkpoint.dir>/ckpt-<step>/" holds one safetensors file per rank and index.json, written by
// rank 0 only after every rank's file is durably on disk (checkpoint_format.h). What the tensors
// are, by name:
//   model/<name>              every parameter and buffer (floating-point buffers averaged over
//                             the ranks: the checkpoint alone is the model evaluation uses)
//   rank_buffers/<name>       [world size, numel]: floating-point buffer <name> of every rank
//   optimizer/<param>/<field> the optimizer's state of parameter <param> (GetStateFields: SGD's
//                             momentum_buffer; Adam's exp_avg, exp_avg_sq, max_exp_avg_sq), the
//                             parameter's shape, and optimizer/<param>/step (int64, a scalar)
//   averages/<param>          the moving average of the weights, when the run keeps one
//   state/<name>              other training state (the loss scale), when the run has some
// The index's metadata holds the position (EncodePosition), the model's fingerprint, the data
// order, the run's name, the optimizer shard setting and the world size that wrote it.
//
// Who writes what: a sharded optimizer's state is written where it lives, each rank its own
// slices; everything every rank holds alike is divided, whole tensors, largest first to the rank
// that has written least, so each rank writes about 1/world of it and nothing is written twice.
// Loading, each rank reads the model and exactly the elements of the optimizer state it holds
// (its slices, or everything for a replicated optimizer), at whatever world size wrote it.
// No file system shared between hosts, no sharded checkpoint: rank 0 checks that it sees every
// rank's file before it writes the index, and says which host's it does not.
#ifndef HVX_TRAIN_SHARDED_CHECKPOINT_H_
#define HVX_TRAIN_SHARDED_CHECKPOINT_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/torch/sharded_optimizer.h"
#include "hvx/train/epoch_position.h"
#include "hvx/train/models.h"
#include "hvx/train/train_config.pb.h"

namespace hvx {
namespace train {

// Tensors by name that a checkpoint keeps beside the model.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What a run keeps beyond model, optimizer and position; null: the run has none. Every rank holds
// the same values.
struct CheckpointExtras {
  NamedTensors* averages = nullptr;  // the parameters' moving average, by parameter name
  NamedTensors* state = nullptr;     // names without dots, e.g. "loss_scale"
  // What decides the order of an epoch's samples ("shuffle_seed 1, remainder PAD, 60000 samples
  // in 1 file, sizes 0123456789abcdef"). Stored; a checkpoint written mid-epoch in another order
  // is refused at resume (its position counts samples of the order it was written in: resumed in
  // another, the epoch would train some samples twice and others never).
  const std::string* data_order = nullptr;
  // The run the checkpoint belongs to (hvx/train/run_dir.h): stored when it is not empty; a load
  // sets it to the loaded checkpoint's (left as it was when that has none: written before runs
  // were named).
  std::string* run = nullptr;
};

// The optimizer whose state a checkpoint holds: `optimizer`, over the whole parameters; with
// `sharded`, the state is that one's slices (and `optimizer` is the whole-parameter optimizer a
// single-file checkpoint gathers it into: checkpoint.h).
// Implicit from an optimizer: a replicated run's is just that.
struct CheckpointOptimizer {
  CheckpointOptimizer(torch::optim::Optimizer& whole) : optimizer(&whole) {}  // NOLINT
  CheckpointOptimizer(torch::optim::Optimizer* whole, ShardedOptimizer* slices)
      : optimizer(whole), sharded(slices) {}
  torch::optim::Optimizer* optimizer = nullptr;
  ShardedOptimizer* sharded = nullptr;
};

// "<checkpoint.dir>/ckpt-<step>".
std::string CheckpointDirPath(const CheckpointConfig& checkpoint, int64_t global_step);

// A checkpoint directory written.
struct SavedCheckpoint {
  std::string path;
  int64_t bytes_written = 0;  // by this rank
  int64_t bytes_total = 0;    // by every rank
  double pause_s = 0;         // what training waited for: the copy of this rank's share
  double seconds = 0;         // from the start to the index
};

// Writes checkpoint directories, in the background if asked: Start plans this rank's share and
// copies what changes before the next step (AwaitSnapshot says what the thread copies), and a
// thread of its own writes it while training goes on; Finish waits
// for it, agrees with every rank and commits (rank 0 writes the index). Both are collective, and
// every rank calls Finish at the same point: the trainer when its per-step agreement says no rank
// is still writing, before the next Start, and at the end of training or a preemption. A writer
// destroyed with a write pending waits for the thread; that checkpoint never gets its index.
class CheckpointDirWriter {
 public:
  CheckpointDirWriter();
  ~CheckpointDirWriter();
  CheckpointDirWriter(const CheckpointDirWriter&) = delete;
  CheckpointDirWriter& operator=(const CheckpointDirWriter&) = delete;

  // The checkpoint of `position.global_step`. FailedPrecondition while one is pending.
  absl::Status Start(const CheckpointConfig& checkpoint, Classifier& model,
                     const CheckpointOptimizer& optimizer, const TrainingPosition& position,
                     const CheckpointExtras& extras, bool background);
  // In the background, the parameters, the optimizer's state and the moving averages (on the
  // CPU) are copied by the writing thread first, while the next step's forward and backward run:
  // before anything changes them (the next optimizer step, the loss scale's update), the caller
  // waits here until they are copied. Returns at once when nothing is pending or they are; the
  // wait counts in the checkpoint's pause. Finish and the next Start wait for it too.
  void AwaitSnapshot();
  // Started and not yet finished.
  bool pending() const { return write_ != nullptr; }
  // This rank's file is still being written.
  bool writing() const;
  // Waits for this rank's file, then commits the checkpoint and removes what checkpoint.keep no
  // longer keeps (`prune`, rank 0). Every rank returns the same status: a rank's failure (a full
  // disk) names the rank and its host, and the checkpoint before stays the newest.
  absl::StatusOr<SavedCheckpoint> Finish(const std::function<void()>& prune);

 private:
  struct Write;
  std::unique_ptr<Write> write_;
  // Background writes copy this rank's share here (PlanWrites), the buffer kept between
  // checkpoints: about 1/size of the model and optimizer state stays allocated for the writer's
  // life, and only the first checkpoint's pause pays for fresh memory.
  torch::Tensor staging_;
};

// Tests: `hook` runs before every later write copies the live tensors (on the writing thread in
// the background); an empty function: none.
void SetCheckpointCopyHookForTesting(std::function<void()> hook);

// Writes the checkpoint directory of `position.global_step` at once (every rank calls it):
// CheckpointDirWriter's Start without background, then Finish. The live model and optimizer are
// left as they were.
absl::StatusOr<SavedCheckpoint> SaveCheckpointDir(const CheckpointConfig& checkpoint,
                                                  Classifier& model,
                                                  const CheckpointOptimizer& optimizer,
                                                  const TrainingPosition& position,
                                                  const CheckpointExtras& extras,
                                                  const std::function<void()>& prune);

// What resuming from a checkpoint directory found (the same on every rank).
struct DirResume {
  bool loaded = false;
  std::string path;
  bool averages = false;  // it had the moving averages
  bool state = false;     // it had every state tensor
};

// Every rank calls it with the same `candidates` on rank 0 (checkpoint directories, newest
// first; ignored elsewhere). Tries each in turn: every rank reads what it needs of it, and only
// when every rank could is it taken into `model`, `optimizer`, *position and `extras`. One that a
// rank finds damaged (a missing or short file, a checksum that differs, an index that does not
// parse) is renamed "<name>.corrupt" by rank 0, saying why and which rank found it, and the next
// tried; any other failure (another model, another data order, an I/O error) fails every rank,
// naming the rank, and so does a damaged one rank 0 cannot rename. The states are made on the
// device of the tensors the optimizer keys them by.
absl::StatusOr<DirResume> ResumeFromCheckpointDirs(const std::vector<std::string>& candidates,
                                                   Classifier& model,
                                                   const CheckpointOptimizer& optimizer,
                                                   TrainingPosition* position,
                                                   const CheckpointExtras& extras);

// Loads the model of checkpoint directory `dir` (its floating-point buffers averaged over ranks)
// into `model`, on `device`; with `use_averages`, its moving averages as the parameters
// (FailedPrecondition when it has none). No collectives.
absl::Status LoadCheckpointDirModel(const std::string& dir, const torch::Device& device,
                                    Classifier& model, bool use_averages);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_SHARDED_CHECKPOINT_H_
