#include "hvx/train/checkpoint_file.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
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
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "hvx/common/clock.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/model_state.h"

namespace hvx {
namespace train {
namespace {

// Text as a checkpoint stores it: a uint8 tensor of its bytes.
torch::Tensor TextTensor(const std::string& text) {
  return torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())},
                          torch::kUInt8)
      .clone();
}

std::string TensorText(const torch::Tensor& encoded) {
  const torch::Tensor bytes = encoded.cpu().to(torch::kUInt8).contiguous();
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                     static_cast<size_t>(bytes.numel()));
}

torch::Tensor EncodeFingerprint(const std::vector<std::string>& lines) {
  return TextTensor(absl::StrJoin(lines, "\n"));
}

std::vector<std::string> DecodeFingerprint(const torch::Tensor& encoded) {
  return absl::StrSplit(TensorText(encoded), '\n', absl::SkipEmpty());
}

// The tensor `name` ("layer.0.weight") of a module archive, walking its submodule archives;
// undefined when the archive has none.
torch::Tensor ReadNested(torch::serialize::InputArchive& archive, absl::string_view name) {
  const size_t dot = name.find('.');
  torch::Tensor t;
  if (dot == absl::string_view::npos) {
    archive.try_read(std::string(name), t);
    return t;
  }
  torch::serialize::InputArchive sub;
  if (!archive.try_read(std::string(name.substr(0, dot)), sub)) return t;
  return ReadNested(sub, name.substr(dot + 1));
}

// Refuses, before anything is loaded into `model`, a checkpoint written for another model:
// LibTorch's load resizes parameters in place, so a mismatch would otherwise fail far away (or
// not at all, for a checkpoint of a larger model). Compares the checkpoint's fingerprint when it
// has one; older checkpoints have their model archive's shapes checked.
absl::Status CheckModelMatches(torch::serialize::InputArchive& archive,
                               torch::serialize::InputArchive& model_archive, Classifier& model,
                               const std::string& path) {
  torch::Tensor encoded;
  if (archive.try_read("fingerprint", encoded)) {
    return CheckFingerprint(ModelFingerprint(model), DecodeFingerprint(encoded), path);
  }
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor t = ReadNested(model_archive, item.key());
    if (!t.defined())
      return RefuseOtherModel(path, absl::StrCat("it has no parameter ", item.key()));
    if (t.sizes() != item.value().sizes()) {
      std::ostringstream there, here;
      there << t.sizes();
      here << item.value().sizes();
      return RefuseOtherModel(path, absl::StrCat("parameter ", item.key(), " is ", there.str(),
                                                 " there, ", here.str(), " here"));
    }
  }
  return absl::OkStatus();
}

// The data order check (model_state.h) of a file that recorded its order; older files are taken
// as they are.
absl::Status CheckArchiveDataOrder(torch::serialize::InputArchive& archive,
                                   const TrainingPosition& p, const std::string* mine,
                                   const std::string& path) {
  torch::Tensor encoded;
  if (mine == nullptr || !archive.try_read("data_order", encoded)) return absl::OkStatus();
  return CheckDataOrder(TensorText(encoded), p, mine, path);
}

}  // namespace

absl::Status WriteCheckpointFile(const std::string& final_path, Classifier& model,
                                 torch::optim::Optimizer& optimizer, const TrainingPosition& p,
                                 const std::vector<torch::Tensor>& rank_buffers,
                                 const CheckpointExtras& extras) {
  HVX_ASSIGN_OR_RETURN(TempFile tmp, CreateTempFile(final_path, "checkpoint"));
  const std::string& tmp_path = tmp.path;
  // The temporary goes on every path that does not rename it into place.
  bool committed = false;
  absl::Cleanup remove_tmp = [&] {
    if (tmp.fd >= 0) close(tmp.fd);
    if (!committed) unlink(tmp_path.c_str());
  };
  torch::NoGradGuard no_grad;
  const auto buffers = FloatBuffers(model);
  std::vector<torch::Tensor> live;
  for (size_t i = 0; i < buffers.size(); ++i) {
    live.push_back(buffers[i].second.clone());
    buffers[i].second.copy_(rank_buffers[i].mean(0).view_as(buffers[i].second));
  }
  absl::Status status;
  int write_errno = 0;  // the file system's reason when a write of the archive fails (ENOSPC)
  try {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive, buffer_archive;
    model.save(model_archive);
    optimizer.save(optimizer_archive);
    for (size_t i = 0; i < rank_buffers.size(); ++i)
      buffer_archive.write(absl::StrCat("b", i), rank_buffers[i]);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("rank_buffers", buffer_archive);
    archive.write("position", torch::tensor(EncodePosition(p), torch::kInt64));
    archive.write("fingerprint", EncodeFingerprint(ModelFingerprint(model)));
    if (extras.data_order != nullptr) {
      archive.write("data_order", TextTensor(*extras.data_order));
    }
    if (extras.run != nullptr && !extras.run->empty()) {
      archive.write("run", TextTensor(*extras.run));
    }
    if (const NamedTensors* averages = extras.averages; averages != nullptr) {
      torch::serialize::OutputArchive average_archive;
      average_archive.write("count",
                            torch::tensor(static_cast<int64_t>(averages->size()), torch::kInt64));
      for (size_t i = 0; i < averages->size(); ++i)
        average_archive.write(absl::StrCat("a", i), (*averages)[i].second);
      archive.write("averages", average_archive);
    }
    if (extras.state != nullptr) {
      torch::serialize::OutputArchive state_archive;
      for (const auto& [name, tensor] : *extras.state) state_archive.write(name, tensor);
      archive.write("state", state_archive);
    }
    // A short count from this function makes LibTorch throw, and its writer's destructor then
    // throws again (std::terminate, as a full disk showed): a failed write is remembered and the
    // rest skipped, the archive completes, and the temporary is removed below.
    archive.save_to([&](const void* data, size_t n) -> size_t {
      if (write_errno == 0 &&
          !WriteFully(tmp.fd, absl::string_view(static_cast<const char*>(data), n))) {
        write_errno = errno;
      }
      return n;
    });
  } catch (const c10::Error& e) {
    status = absl::InternalError(
        absl::StrCat("writing checkpoint ", tmp_path, ": ", e.what_without_backtrace()));
  }
  if (write_errno != 0) {
    status = ErrnoToStatus(write_errno, absl::StrCat("writing checkpoint ", tmp_path));
  }
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second.copy_(live[i]);
  HVX_RETURN_IF_ERROR(status);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (close(fd) != 0) return ErrnoToStatus(errno, absl::StrCat("closing checkpoint ", tmp_path));
  Failpoint("checkpoint");
  HVX_RETURN_IF_ERROR(CommitFile(tmp_path, final_path));
  committed = true;
  return absl::OkStatus();
}

namespace {

// Reads the "averages" of a loaded checkpoint archive into `averages` (same count and shapes);
// false when the archive has none.
bool ReadAverages(torch::serialize::InputArchive& archive, const std::string& path,
                  NamedTensors& averages) {
  torch::serialize::InputArchive average_archive;
  if (!archive.try_read("averages", average_archive)) return false;
  torch::Tensor count;
  average_archive.read("count", count);
  TORCH_CHECK(count.item<int64_t>() == static_cast<int64_t>(averages.size()), "checkpoint ", path,
              " holds the averages of ", count.item<int64_t>(), " parameters, the model has ",
              averages.size());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < averages.size(); ++i) {
    torch::Tensor t;
    average_archive.read(absl::StrCat("a", i), t);
    TORCH_CHECK(t.sizes() == averages[i].second.sizes(), "checkpoint ", path, ": the average of ",
                averages[i].first, " has shape ", t.sizes(), ", the parameter ",
                averages[i].second.sizes());
    averages[i].second.copy_(t);
  }
  return true;
}

// Reads the "state" tensors the file has into `state` (same shapes), keeping the others; returns
// whether it had them all.
bool ReadState(torch::serialize::InputArchive& archive, const std::string& path,
               NamedTensors& state) {
  torch::serialize::InputArchive state_archive;
  if (!archive.try_read("state", state_archive)) return false;
  torch::NoGradGuard no_grad;
  bool all = true;
  for (auto& [name, tensor] : state) {
    torch::Tensor t;
    if (!state_archive.try_read(name, t)) {
      all = false;
      continue;
    }
    TORCH_CHECK(t.sizes() == tensor.sizes(), "checkpoint ", path, ": state ", name, " has shape ",
                t.sizes(), ", expected ", tensor.sizes());
    tensor.copy_(t);
  }
  return all;
}

// Why LibTorch could not load a checkpoint whose file ReadCheckedArchive found whole: not proven
// damaged (memory, a format of another LibTorch, tensors of other shapes), so never DataLoss.
absl::Status NotLoaded(const std::string& path, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint ", path, ": out of memory while loading it"));
  }
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  return absl::FailedPreconditionError(
      absl::StrCat("checkpoint ", path,
                   " is whole but LibTorch could not load it (written by another torch "
                   "version, or for other shapes?); it is left where it is: ",
                   c10 != nullptr ? c10->what_without_backtrace() : e.what()));
}

// The bytes of a file in memory, as LibTorch's zip reader reads an archive.
class BytesReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReadAdapter(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char*) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// The first method a TorchScript source record defines ("def __setstate__(...)"), or "".
std::string FirstMethod(absl::string_view source) {
  for (absl::string_view line : absl::StrSplit(source, '\n')) {
    absl::string_view code = absl::StripLeadingAsciiWhitespace(line);
    if (absl::StartsWith(code, "def ")) return std::string(code.substr(0, code.find('(')));
  }
  return "";
}

// The checkpoint file at `path`, read whole and checked without running any of it; LoadCheckpoint
// then loads these bytes, so the file is read once.
// - A file that cannot be read (permission, I/O, memory) is not proven damaged: that error, never
//   DataLoss, and the file stays where it is.
// - DataLoss when its zip container or a record cannot be read (cut short, damaged), or when its
//   code defines a method: every archive hvx writes declares classes with attributes only, and a
//   method (a __setstate__) would run inside this process while the file loads, before anything
//   in it could be checked. Such a file is not a checkpoint of hvx's.
absl::StatusOr<std::string> ReadCheckedArchive(const std::string& path) {
  HVX_ASSIGN_OR_RETURN(ReadOnlyFile file, OpenReadOnly(path, "checkpoint"));
  absl::Cleanup closer = [fd = file.fd] { close(fd); };
  std::string bytes;
  try {
    bytes.resize(file.size);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint ", path, ": no memory to read its ", file.size, " bytes"));
  }
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = pread(file.fd, bytes.data() + done, bytes.size() - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrCat("reading checkpoint ", path));
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("checkpoint ", path, " shrank to ", done, " bytes while it was read"));
    }
    done += static_cast<size_t>(n);
  }
  auto damaged = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " cannot be loaded: ", why));
  };
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesReadAdapter>(bytes));
    for (const std::string& name : reader.getAllRecords()) {
      // Names are relative to the archive's folder: "code/__torch__.py", "data.pkl".
      const bool code = absl::StartsWith(name, "code/") || absl::StrContains(name, "/code/");
      if (!code || !absl::EndsWith(name, ".py")) {
        (void)reader.getRecordOffset(name);
        continue;
      }
      auto [data, size] = reader.getRecord(name);
      const std::string method =
          FirstMethod(absl::string_view(static_cast<const char*>(data.get()), size));
      if (!method.empty()) {
        return damaged(absl::StrCat(
            "it holds TorchScript code (", name, ": ", absl::CHexEscape(method),
            "), which no checkpoint hvx writes has; it was not loaded, so none of it ran"));
      }
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint ", path, ": no memory to read its records"));
  } catch (const c10::Error& e) {
    // A whole file of a newer format than this LibTorch reads is not damaged: stop, keep it.
    if (absl::StrContains(e.what_without_backtrace(), "Attempted to read a PyTorch file with")) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", path, " was written by another torch version: ",
                       e.what_without_backtrace(), "; it is left where it is"));
    }
    return damaged(e.what_without_backtrace());
  }
  return bytes;
}

}  // namespace

// Loads onto `device`. *rank_buffers gets the per-rank buffers when the file has them for every
// floating-point buffer of `model` (checkpoints from before they were recorded have not). Reads
// positions of either stored form (see DecodePosition). *found_averages / *found_state say whether
// the file had extras.averages / extras.state.
absl::Status LoadCheckpointFile(const std::string& path, const torch::Device& device,
                                Classifier& model, torch::optim::Optimizer& optimizer,
                                TrainingPosition* p, std::vector<torch::Tensor>* rank_buffers,
                                const CheckpointExtras& extras, bool* found_averages,
                                bool* found_state) {
  rank_buffers->clear();
  HVX_ASSIGN_OR_RETURN(const std::string bytes, ReadCheckedArchive(path));
  try {
    torch::serialize::InputArchive archive, model_archive, optimizer_archive, buffer_archive;
    archive.load_from(bytes.data(), bytes.size(), device);
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    HVX_RETURN_IF_ERROR(CheckModelMatches(archive, model_archive, model, path));
    torch::Tensor position;
    archive.read("position", position);
    position = position.cpu().to(torch::kInt64).contiguous().reshape({-1});
    auto decoded =
        DecodePosition({position.data_ptr<int64_t>(), static_cast<size_t>(position.numel())});
    if (!decoded.ok()) return Annotate(decoded.status(), absl::StrCat("checkpoint ", path));
    HVX_RETURN_IF_ERROR(CheckArchiveDataOrder(archive, *decoded, extras.data_order, path));
    model.load(model_archive);
    optimizer.load(optimizer_archive);
    *p = *decoded;
    if (archive.try_read("rank_buffers", buffer_archive)) {
      const size_t n = FloatBuffers(model).size();
      for (size_t i = 0; i < n; ++i) {
        torch::Tensor t;
        if (!buffer_archive.try_read(absl::StrCat("b", i), t)) break;
        rank_buffers->push_back(t.cpu());
      }
      if (rank_buffers->size() != n) rank_buffers->clear();
    }
    if (extras.averages != nullptr) *found_averages = ReadAverages(archive, path, *extras.averages);
    if (extras.state != nullptr) *found_state = ReadState(archive, path, *extras.state);
    if (torch::Tensor run; extras.run != nullptr && archive.try_read("run", run)) {
      *extras.run = TensorText(run);
    }
  } catch (const std::exception& e) {
    return NotLoaded(path, e);
  }
  return absl::OkStatus();
}

absl::Status LoadCheckpointFileModel(const std::string& path, const torch::Device& device,
                                     Classifier& model, bool use_averages) {
  HVX_ASSIGN_OR_RETURN(const std::string bytes, ReadCheckedArchive(path));
  try {
    torch::serialize::InputArchive archive, model_archive;
    archive.load_from(bytes.data(), bytes.size(), device);
    archive.read("model", model_archive);
    HVX_RETURN_IF_ERROR(CheckModelMatches(archive, model_archive, model, path));
    model.load(model_archive);
    if (use_averages) {
      NamedTensors params;
      for (const auto& p : model.named_parameters()) params.emplace_back(p.key(), p.value());
      if (!ReadAverages(archive, path, params)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", path,
            " has no moving average of the weights (ema_decay was 0 when it was written)"));
      }
    }
  } catch (const std::exception& e) {
    return NotLoaded(path, e);
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace hvx
