#include "hvx/train/export.h"

#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"

namespace hvx {
namespace train {

absl::Status PrepareExportPath(const std::string& path) {
  const std::string dir = DirName(path);
  struct stat st;
  if (dir.empty() || stat(dir.c_str(), &st) == 0) return absl::OkStatus();
  return Annotate(MakeDirs(dir), absl::StrCat("the folder of the export ", path));
}

absl::Status ExportStateDict(Classifier& model, const std::string& path) {
  HVX_RETURN_IF_ERROR(PrepareExportPath(path));
  c10::Dict<std::string, at::Tensor> weights;
  for (const auto& p : model.named_parameters()) weights.insert(p.key(), p.value().detach().cpu());
  for (const auto& b : model.named_buffers()) weights.insert(b.key(), b.value().detach().cpu());
  // torch::pickle_save's format (a zip of data.pkl and one record per tensor storage, as
  // torch.save writes), but with plain dicts: torch::pickle_save tags every dict with its type
  // through torch.jit._pickle.restore_type_tag, which torch.load refuses by default since PyTorch
  // 2.6 (weights_only=True allows only tensors, storages and containers).
  std::vector<char> bytes;
  try {
    std::vector<char> pickle;
    torch::jit::Pickler pickler(
        [&](const char* data, size_t n) { pickle.insert(pickle.end(), data, data + n); },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
        /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(c10::IValue(weights));
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
      const char* begin = static_cast<const char*>(data);
      bytes.insert(bytes.end(), begin, begin + n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("exporting the weights to ", path, ": ", e.what_without_backtrace()));
  }
  return WriteFileAtomically(path, absl::string_view(bytes.data(), bytes.size()),
                             "exported weights", /*durable=*/true);
}

std::string ScriptedExportPath(const std::string& path) {
  absl::string_view stem = path;
  absl::ConsumeSuffix(&stem, ".pt");
  return absl::StrCat(stem, ".scripted.pt");
}

absl::StatusOr<std::string> ExportModel(Classifier& model, const std::string& path) {
  HVX_RETURN_IF_ERROR(ExportStateDict(model, path));
  const torch::jit::Module* scripted = ScriptedModule(model);
  if (scripted == nullptr) return path;
  const std::string script_path = ScriptedExportPath(path);
  model.eval();
  std::ostringstream bytes;
  try {
    scripted->save(bytes);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("exporting the scripted module to ", script_path, ": ",
                                            e.what_without_backtrace()));
  }
  HVX_RETURN_IF_ERROR(
      WriteFileAtomically(script_path, bytes.str(), "exported scripted module", /*durable=*/true));
  return absl::StrCat(path, " and the scripted module to ", script_path);
}

}  // namespace train
}  // namespace hvx
