// A trained model written for use outside hvx: its weights as a file Python's torch.load reads as a
// state dict, and a TorchScript model's scripted module beside it.
//
//   HVX_RETURN_IF_ERROR(PrepareExportPath(options.export_path));  // before training
//   HVX_ASSIGN_OR_RETURN(std::string written, ExportModel(model, options.export_path));
#ifndef HVX_TRAIN_EXPORT_H_
#define HVX_TRAIN_EXPORT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/train/models.h"

namespace hvx {
namespace train {

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

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_EXPORT_H_
