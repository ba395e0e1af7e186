// Checkpoints of a training run: rank 0 writes them, every rank resumes from the newest one.
//
//   HVX_ASSIGN_OR_RETURN(bool resumed, ResumeFromNewestCheckpoint(config.checkpoint(), fresh,
//                                                                 device, model, optimizer, &pos));
//   HVX_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint(), model, optimizer, pos));  // all ranks
//
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
//
// Only rank 0 reads or writes files; the others get the checkpoint by broadcast, so no file system
// shared between hosts is needed.
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
};

// Writes a checkpoint of `model`, `optimizer`, `position` and `extras` into checkpoint.dir and
// removes the oldest beyond checkpoint.keep(). Every rank calls it (each rank's buffers are
// gathered); rank 0 writes. The live model is left as it was.
// Where SaveCheckpoint writes the checkpoint of `global_step`: "<checkpoint.dir>/ckpt-<step>.pt".
std::string CheckpointPath(const CheckpointConfig& checkpoint, int64_t global_step);

absl::Status SaveCheckpoint(const CheckpointConfig& checkpoint, Classifier& model,
                            torch::optim::Optimizer& optimizer, const TrainingPosition& position,
                            const CheckpointExtras& extras = {});

// Every rank calls it. Rank 0 loads the newest checkpoint in checkpoint.dir onto `device` (after
// moving the existing ones into "<dir>/replaced-<unix seconds>[-N]/" when `fresh`, once per job:
// see FreshJobId), and every rank
// takes its model, optimizer state and position into `model`, `optimizer` and *position; when the
// world size is the checkpoint's, each rank also takes its own BatchNorm statistics. Returns false,
// changing nothing, when there is no checkpoint; every rank returns rank 0's error when it fails.
// Every rank also takes the checkpoint's `extras` into them; averages the checkpoint does not have
// start from the checkpoint's weights (logged), state it does not have keeps its value.
// A file is read and checked before LibTorch sees it, and only one proven damaged (its zip
// container or a record unreadable; TorchScript code in it, which would run while loading) is set
// aside as "<name>.corrupt" for the next older one: DataLoss when none is left. Any other failure
// (permission, I/O, memory, a format of another LibTorch) fails the run, the file left in place.
// With no checkpoint but some set aside as damaged, and not `fresh`, FailedPrecondition: starting
// over would lose the run. `fresh` moves the damaged ones aside too.
absl::StatusOr<bool> ResumeFromNewestCheckpoint(const CheckpointConfig& checkpoint, bool fresh,
                                                const torch::Device& device, Classifier& model,
                                                torch::optim::Optimizer& optimizer,
                                                TrainingPosition* position,
                                                const CheckpointExtras& extras = {},
                                                const std::string& fresh_job_id = "");

// What names this job across its restarts, for --fresh: a job that is started again (hvxrun
// --max-restarts, a Slurm requeue, a SageMaker spot restart) runs the same command, --fresh
// included, and must resume what its first start wrote instead of setting it aside again. Rank 0
// leaves "<dir>/fresh-applied.<id>" when it applies --fresh, and a start of the same job that
// finds it resumes. The id is SageMaker's TRAINING_JOB_NAME, else Slurm's SLURM_JOB_ID, else
// hvxrun's HVX_RUN_ID (the same in every attempt of one hvxrun), else "" (a process started by
// hand: --fresh applies every time). So within one Slurm job, --fresh sets a directory's
// checkpoints aside once.
std::string FreshJobId(const Environment& env);

// Makes the folder that `path` is written into when it is missing (MakeDirs), so that an export
// into a new folder works and one that cannot be written fails before training, not after it.
// An existing folder is left as it is.
absl::Status PrepareExportPath(const std::string& path);

// Writes `model`'s parameters and buffers by name (on the CPU) as a file that Python's
// torch.load reads as a dict name -> tensor: `model.load_state_dict(torch.load(path))` for the
// same network defined in PyTorch. Written to a temporary name, synced and renamed.
absl::Status ExportStateDict(Classifier& model, const std::string& path);

// Where ExportModel puts a TorchScript model's scripted module: `path` with ".pt" replaced by
// ".scripted.pt" (appended when `path` does not end in ".pt").
std::string ScriptedExportPath(const std::string& path);

// Rank 0's export of `model` (its weights as they are now): the state dict at `path`
// (ExportStateDict) and, for a TorchScript model, the scripted module in evaluation mode at
// ScriptedExportPath(path). Returns what was written, for the log.
absl::StatusOr<std::string> ExportModel(Classifier& model, const std::string& path);

// Loads the model of a checkpoint file SaveCheckpoint wrote (its BatchNorm statistics averaged
// over ranks) into `model`, on `device`; with `use_averages`, the parameters are the checkpoint's
// moving averages (FailedPrecondition when it has none). DataLoss naming the file when it cannot.
absl::Status LoadCheckpointModel(const std::string& path, const torch::Device& device,
                                 Classifier& model, bool use_averages = false);

// The floating-point buffers of `model` (BatchNorm running statistics) by name, in a fixed order,
// the same on every rank. The tensors share memory with the model's.
std::vector<std::pair<std::string, torch::Tensor>> FloatBuffers(Classifier& model);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_CHECKPOINT_H_
