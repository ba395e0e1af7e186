// Checkpoint directories (sharded_checkpoint.h), written and read, over 700 lines in one file
// because writing and loading share one model of what a directory holds: the tensor names, the
// optimizer's state slots (Slots, OptimizerName) and which rank holds which elements, so that a
// rank at another world size reads exactly what some rank wrote.
#include "hvx/train/sharded_checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <numeric>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/common/clock.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/files.h"
#include "hvx/common/json.h"
#include "hvx/common/logging.h"
#include "hvx/common/random_hex.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/torch/optimizer_state.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/checkpoint_format.h"
#include "hvx/train/model_state.h"
#include "hvx/train/rank_failure.h"

namespace hvx {
namespace train {
namespace {

constexpr char kCorruptSuffix[] = ".corrupt";

absl::StatusOr<std::string> SafetensorsDtype(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return std::string("F32");
    case torch::kFloat64:
      return std::string("F64");
    case torch::kFloat16:
      return std::string("F16");
    case torch::kBFloat16:
      return std::string("BF16");
    case torch::kInt64:
      return std::string("I64");
    case torch::kInt32:
      return std::string("I32");
    case torch::kInt16:
      return std::string("I16");
    case torch::kInt8:
      return std::string("I8");
    case torch::kUInt8:
      return std::string("U8");
    case torch::kBool:
      return std::string("BOOL");
    default:
      return absl::UnimplementedError(
          absl::StrCat("checkpoints do not keep tensors of ", c10::toString(type)));
  }
}

std::vector<int64_t> Shape(const torch::Tensor& t) { return t.sizes().vec(); }

// A tensor this rank writes (all of it, or elements [begin, begin + elements) of the logical
// tensor of `shape`), on the CPU and contiguous.
struct Item {
  std::string name;
  torch::Tensor data;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t elements = 0;
  // A live tensor that only the optimizer's step changes (a parameter, the optimizer's state, a
  // moving average): its copy may wait until just before the next step (AwaitSnapshot).
  bool until_step = false;
};

// Copies that wait for the background thread: from the live tensor into the staging buffer.
struct Deferred {
  torch::Tensor from, to;
};

// `t` as a whole tensor to write; it stays where it is (a GPU's memory) until PlanWrites picks
// what this rank writes.
Item Whole(std::string name, const torch::Tensor& t) {
  Item item;
  item.name = std::move(name);
  item.data = t.detach();
  item.shape = Shape(t);
  item.elements = t.numel();
  return item;
}

// Where the optimizer's state of one parameter lives on this rank.
struct StateSlot {
  std::string name;            // the parameter's
  torch::Tensor key;           // what the optimizer's state is keyed by
  std::vector<int64_t> shape;  // the whole parameter's
  ShardRange range;            // the elements this rank's state holds
  bool sliced = false;         // a ShardedOptimizer's: its state tensors are [range.size]
};

absl::StatusOr<std::vector<StateSlot>> Slots(Classifier& model, const CheckpointOptimizer& o) {
  std::vector<StateSlot> slots;
  if (o.sharded != nullptr) {
    for (const auto& s : o.sharded->Slices()) {
      slots.push_back({s.name, s.slice, Shape(s.parameter), s.range, true});
    }
    return slots;
  }
  std::map<const void*, std::string> names;
  for (const auto& item : model.named_parameters()) {
    names[item.value().unsafeGetTensorImpl()] = item.key();
  }
  for (const auto& group : o.optimizer->param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      const auto found = names.find(p.unsafeGetTensorImpl());
      if (found == names.end()) {
        return absl::InvalidArgumentError(
            "the optimizer steps a tensor that is not one of the model's parameters");
      }
      slots.push_back({found->second, p, Shape(p), ShardRange{0, p.numel()}, false});
    }
  }
  return slots;
}

torch::optim::Optimizer& StateOwner(const CheckpointOptimizer& o) {
  return o.sharded != nullptr ? o.sharded->optimizer() : *o.optimizer;
}

std::string OptimizerName(const std::string& param, const std::string& field) {
  return absl::StrCat("optimizer/", param, "/", field);
}

// What this rank writes (checkpoint's header comment: who writes what), on the CPU and
// contiguous; with `staging`, copied into it (what the live model and optimizer share is copied,
// a GPU's tensors once, to the host): one buffer, grown when this rank's share does not fit and
// otherwise kept from one checkpoint to the next, so that only the first pays for fresh memory's
// page faults while training waits. With `deferred` too, the copies of live CPU tensors that only
// the next optimizer step changes are left to the caller (into their place in `staging`).
absl::StatusOr<std::vector<Item>> PlanWrites(Classifier& model, const CheckpointOptimizer& o,
                                             const CheckpointExtras& extras,
                                             const std::vector<torch::Tensor>& rank_buffers,
                                             torch::Tensor* staging,
                                             std::vector<Deferred>* deferred) {
  torch::NoGradGuard no_grad;
  const int rank = Rank(), world = Size();
  std::vector<Item> alike;  // what every rank holds alike
  for (const auto& item : model.named_parameters()) {
    alike.push_back(Whole("model/" + item.key(), item.value()));
    alike.back().until_step = true;
  }
  std::map<std::string, size_t> float_buffer;
  const auto buffers = FloatBuffers(model);
  for (size_t i = 0; i < buffers.size(); ++i) float_buffer[buffers[i].first] = i;
  for (const auto& item : model.named_buffers()) {
    const auto found = float_buffer.find(item.key());
    alike.push_back(Whole("model/" + item.key(),
                          found == float_buffer.end()
                              ? item.value()
                              : rank_buffers[found->second].mean(0).view_as(item.value())));
  }
  if (extras.averages != nullptr) {
    for (const auto& [name, t] : *extras.averages) {
      alike.push_back(Whole("averages/" + name, t));
      alike.back().until_step = true;
    }
  }
  if (extras.state != nullptr) {
    for (const auto& [name, t] : *extras.state) alike.push_back(Whole("state/" + name, t));
  }
  std::vector<Item> mine;
  HVX_ASSIGN_OR_RETURN(const std::vector<StateSlot> slots, Slots(model, o));
  torch::optim::Optimizer& owner = StateOwner(o);
  for (const StateSlot& slot : slots) {
    const auto found = owner.state().find(StateKeyOf(slot.key));
    if (found == owner.state().end()) continue;
    HVX_ASSIGN_OR_RETURN(StateFields fields, GetStateFields(*found->second, slot.name));
    std::vector<Item> items;
    if (fields.step) {
      items.push_back(Whole(OptimizerName(slot.name, "step"),
                            torch::tensor(*fields.step, torch::kInt64).reshape({})));
    }
    for (const auto& [field, t] : fields.tensors) {
      Item item = Whole(OptimizerName(slot.name, field), t);
      item.shape = slot.shape;
      item.begin = slot.range.begin;
      item.until_step = true;
      items.push_back(std::move(item));
    }
    if (!slot.sliced) {
      for (Item& item : items) alike.push_back(std::move(item));
    } else if (slot.range.size > 0) {
      // Each rank its slices; the step once, by the rank holding the first elements.
      for (Item& item : items) {
        if (item.name == OptimizerName(slot.name, "step") && slot.range.begin != 0) continue;
        mine.push_back(std::move(item));
      }
    }
  }
  // Alike: largest first to the rank that has least so far (ties: the lower rank, then by name),
  // the same plan on every rank.
  std::vector<size_t> order(alike.size());
  std::iota(order.begin(), order.end(), 0);
  auto bytes = [&](size_t i) { return alike[i].data.numel() * alike[i].data.element_size(); };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytes(a) > bytes(b); });
  std::vector<int64_t> load(world, 0);
  for (size_t i : order) {
    const int to = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[to] += std::max<int64_t>(bytes(i), 1);
    if (to == rank) mine.push_back(std::move(alike[i]));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    Item row;
    row.name = "rank_buffers/" + buffers[i].first;
    row.data = rank_buffers[i][rank].contiguous();
    row.shape = {world, buffers[i].second.numel()};
    row.begin = rank * buffers[i].second.numel();
    row.elements = buffers[i].second.numel();
    mine.push_back(std::move(row));
  }
  mine.erase(
      std::remove_if(mine.begin(), mine.end(), [](const Item& item) { return item.elements == 0; }),
      mine.end());
  if (staging == nullptr) {
    for (Item& item : mine) item.data = item.data.to(torch::kCPU).contiguous();
    return mine;
  }
  constexpr int64_t kAlign = 64;  // each copy starts on a cache line (and any element's alignment)
  auto rounded = [](int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  int64_t total = 0;
  for (const Item& item : mine) total += rounded(static_cast<int64_t>(item.data.nbytes()));
  if (!staging->defined() || staging->numel() < total) {
    *staging = torch::Tensor();  // the old buffer goes before the new one is made
    *staging = torch::empty({total}, torch::kUInt8);
  }
  int64_t offset = 0;
  for (Item& item : mine) {
    const auto bytes = static_cast<int64_t>(item.data.nbytes());
    torch::Tensor copy =
        staging->narrow(0, offset, bytes).view(item.data.scalar_type()).view(item.data.sizes());
    if (deferred != nullptr && item.until_step && item.data.is_cpu()) {
      deferred->push_back({item.data, copy});
    } else {
      copy.copy_(item.data);
    }
    item.data = std::move(copy);
    offset += rounded(bytes);
  }
  return mine;
}

// Rank 0, with every rank's file written: checks it sees them all, then writes the index.
absl::Status CommitIndex(const std::string& dir, int64_t step,
                         const std::vector<WrittenShard>& shards,
                         const std::vector<std::string>& hosts, Json metadata) {
  for (size_t r = 0; r < shards.size(); ++r) {
    const std::string path = absl::StrCat(dir, "/", shards[r].name);
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) != shards[r].bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " on host ", hosts[r], " wrote ", path, " (", shards[r].bytes,
          " bytes), which rank 0 on host ", Host(), " does not see",
          (stat(path.c_str(), &st) == 0 ? absl::StrCat(" whole (", st.st_size, " bytes)") : ""),
          ": checkpoint.dir must be one file system that every host mounts for "
          "checkpoint.format SHARDED; without one, use SINGLE_FILE (rank 0 writes)"));
    }
  }
  HVX_ASSIGN_OR_RETURN(CheckpointIndex index, BuildIndex(step, static_cast<int>(shards.size()),
                                                         shards, std::move(metadata)));
  Failpoint("checkpoint");
  return WriteIndex(dir, index);
}

// Removes the files of `replaced`, the index an earlier save of the same step left in `dir`, that
// the new index does not name (each save's files have a token of their own). Files no index names
// (a save that failed, another writer's in progress) are left to the directory's pruning.
void RemoveReplaced(const std::string& dir, const absl::StatusOr<CheckpointIndex>& replaced,
                    const std::string& token) {
  if (!replaced.ok()) return;
  for (const WrittenShard& file : replaced->files) {
    if (!absl::StartsWith(file.name, token + "-")) {
      unlink(absl::StrCat(dir, "/", file.name).c_str());
    }
  }
}

}  // namespace

std::string CheckpointDirPath(const CheckpointConfig& checkpoint, int64_t global_step) {
  return absl::StrCat(checkpoint.dir(), "/ckpt-", global_step);
}

namespace {

std::function<void()>& CopyHook() {
  static auto* hook = new std::function<void()>();
  return *hook;
}

}  // namespace

void SetCheckpointCopyHookForTesting(std::function<void()> hook) { CopyHook() = std::move(hook); }

struct CheckpointDirWriter::Write {
  SavedCheckpoint saved;
  std::string token;
  int64_t step = 0;
  Json metadata;
  std::vector<Item> items;  // this rank's share, copied: training goes on meanwhile
  // The copies the thread makes first (PlanWrites' deferred), and when they are made.
  std::vector<Deferred> deferred;
  std::promise<void> copied_promise;
  std::shared_future<void> copied = copied_promise.get_future().share();
  bool snapshot_taken = false;  // AwaitSnapshot saw the copies made
  absl::StatusOr<WrittenShard> shard = absl::UnknownError("not written");
  std::atomic<bool> done{false};
  std::thread thread;
  absl::Time started;
  double pause_s = 0;  // what Start took and AwaitSnapshot waited: training waited for it
};

CheckpointDirWriter::CheckpointDirWriter() = default;

CheckpointDirWriter::~CheckpointDirWriter() {
  if (write_ != nullptr && write_->thread.joinable()) write_->thread.join();
}

bool CheckpointDirWriter::writing() const {
  return write_ != nullptr && !write_->done.load(std::memory_order_acquire);
}

absl::Status CheckpointDirWriter::Start(const CheckpointConfig& checkpoint, Classifier& model,
                                        const CheckpointOptimizer& optimizer,
                                        const TrainingPosition& position,
                                        const CheckpointExtras& extras, bool background) {
  if (pending()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a checkpoint (", write_->saved.path, ") is still being written"));
  }
  auto w = std::make_unique<Write>();
  w->started = MonotonicNow();
  w->saved.path = CheckpointDirPath(checkpoint, position.global_step);
  w->step = position.global_step;
  w->token = Rank() == 0 ? RandomHex().substr(0, 8) : std::string();
  HVX_RETURN_IF_ERROR(BroadcastBytes("checkpoint.token", &w->token, 0));
  HVX_ASSIGN_OR_RETURN(std::vector<torch::Tensor> rank_buffers, GatherRankBuffers(model));
  w->metadata = Json{{"position", EncodePosition(position)},
                     {"fingerprint", ModelFingerprint(model)},
                     {"world_size", Size()},
                     {"optimizer_shard", optimizer.sharded == nullptr ? "NONE" : "SLICES"}};
  if (extras.data_order != nullptr) w->metadata["data_order"] = *extras.data_order;
  if (extras.run != nullptr && !extras.run->empty()) w->metadata["run"] = *extras.run;
  // A failure from here on (LibTorch's exceptions too: host memory for the copy) is every rank's
  // to report, so it is kept for Finish's agreement, not returned at once. In the background,
  // training changes the live tensors meanwhile: what is written is a copy.
  absl::StatusOr<std::vector<Item>> items = absl::UnknownError("not planned");
  try {
    items = PlanWrites(model, optimizer, extras, rank_buffers, background ? &staging_ : nullptr,
                       background ? &w->deferred : nullptr);
  } catch (const std::exception& e) {
    items = absl::ResourceExhaustedError(
        absl::StrCat("copying checkpoint ", w->saved.path, ": ", e.what()));
  }
  if (items.ok()) {
    w->items = *std::move(items);
  } else {
    w->shard = items.status();
  }
  Write* raw = w.get();
  auto write = [raw, failed = !items.ok()] {
    bool copied = true;
    if (CopyHook()) CopyHook()();
    try {
      torch::NoGradGuard no_grad;
      for (Deferred& d : raw->deferred) d.to.copy_(d.from);
    } catch (const std::exception& e) {
      copied = false;
      raw->shard = absl::ResourceExhaustedError(
          absl::StrCat("copying checkpoint ", raw->saved.path, ": ", e.what()));
    }
    raw->deferred.clear();
    raw->copied_promise.set_value();  // the live tensors may change from here on
    if (!failed && copied) {
      absl::Status made = MakeDirs(raw->saved.path);
      std::vector<PieceToWrite> pieces;
      for (const Item& item : raw->items) {
        if (!made.ok()) break;
        absl::StatusOr<std::string> dtype = SafetensorsDtype(item.data.scalar_type());
        if (!dtype.ok()) {
          made = Annotate(dtype.status(), item.name);
          break;
        }
        pieces.push_back(
            {item.name, *dtype, item.shape, item.begin, item.elements, item.data.data_ptr()});
      }
      raw->shard = made.ok() ? WriteShardFile(raw->saved.path,
                                              ShardFileName(raw->token, Rank(), Size()), pieces,
                                              {{"format", "hvx-checkpoint shard"},
                                               {"step", absl::StrCat(raw->step)},
                                               {"rank", absl::StrCat(Rank(), " of ", Size())}})
                             : absl::StatusOr<WrittenShard>(made);
    }
    raw->items.clear();  // the copies go as soon as they are on disk
    raw->done.store(true, std::memory_order_release);
  };
  write_ = std::move(w);
  if (background) {
    try {
      write_->thread = std::thread(write);
    } catch (const std::system_error& e) {
      HVX_LOG(WARNING) << "no thread for writing " << write_->saved.path << " in the background ("
                       << e.what() << "): this rank writes it now";
      write();
    }
  } else {
    write();
  }
  write_->pause_s = absl::ToDoubleSeconds(MonotonicNow() - write_->started);
  return absl::OkStatus();
}

void CheckpointDirWriter::AwaitSnapshot() {
  if (write_ == nullptr || write_->snapshot_taken) return;
  const absl::Time start = MonotonicNow();
  write_->copied.wait();
  write_->pause_s += absl::ToDoubleSeconds(MonotonicNow() - start);
  write_->snapshot_taken = true;
}

absl::StatusOr<SavedCheckpoint> CheckpointDirWriter::Finish(const std::function<void()>& prune) {
  if (write_ == nullptr) return absl::FailedPreconditionError("no checkpoint is being written");
  std::unique_ptr<Write> w = std::move(write_);
  if (w->thread.joinable()) w->thread.join();
  SavedCheckpoint saved = w->saved;
  saved.pause_s = w->pause_s;
  HVX_ASSIGN_OR_RETURN(
      std::vector<std::string> failures,
      AllgatherBytes("checkpoint.written", EncodeFailure(w->shard.status(), Host())));
  const std::vector<RankFailure> failed = Failures(failures);
  if (!failed.empty()) {
    // Nothing of a checkpoint that will never have its index stays behind: each rank removes its
    // own file, then rank 0 the directory, if nothing else is in it.
    if (w->shard.ok()) unlink(absl::StrCat(saved.path, "/", w->shard->name).c_str());
    if (AllgatherBytes("checkpoint.removed", "").ok() && Rank() == 0) rmdir(saved.path.c_str());
    return StatusOf(failed.front(), w->shard.status(), Rank());
  }
  saved.bytes_written = static_cast<int64_t>(w->shard->bytes);
  const std::string report = JsonText(Json{{"host", Host()}, {"shard", ShardToJson(*w->shard)}});
  HVX_ASSIGN_OR_RETURN(std::vector<std::string> reports,
                       AllgatherBytes("checkpoint.shards", report));
  absl::Status committed;
  if (Rank() == 0) {
    std::vector<WrittenShard> shards;
    std::vector<std::string> hosts;
    for (size_t r = 0; r < reports.size() && committed.ok(); ++r) {
      absl::StatusOr<Json> json = ParseJson(reports[r], "a rank's shard report");
      absl::StatusOr<WrittenShard> s =
          json.ok() ? ShardFromJson((*json)["shard"], "a rank's shard report") : json.status();
      if (!s.ok()) {
        committed = s.status();
        break;
      }
      hosts.push_back((*json)["host"].get<std::string>());
      shards.push_back(*std::move(s));
    }
    const absl::StatusOr<CheckpointIndex> replaced = ReadIndex(saved.path);
    if (committed.ok()) {
      committed = CommitIndex(saved.path, w->step, shards, hosts, w->metadata);
    }
    if (committed.ok()) {
      RemoveReplaced(saved.path, replaced, w->token);
      if (prune) prune();
    }
  }
  HVX_RETURN_IF_ERROR(ShareRank0Error("checkpoint.committed", committed));
  HVX_ASSIGN_OR_RETURN(
      at::Tensor total,
      Allgather("checkpoint.bytes", torch::full({1}, saved.bytes_written, torch::kInt64)));
  saved.bytes_total = total.sum().item<int64_t>();
  saved.seconds = absl::ToDoubleSeconds(MonotonicNow() - w->started);
  return saved;
}

absl::StatusOr<SavedCheckpoint> SaveCheckpointDir(const CheckpointConfig& checkpoint,
                                                  Classifier& model,
                                                  const CheckpointOptimizer& optimizer,
                                                  const TrainingPosition& position,
                                                  const CheckpointExtras& extras,
                                                  const std::function<void()>& prune) {
  CheckpointDirWriter writer;
  HVX_RETURN_IF_ERROR(writer.Start(checkpoint, model, optimizer, position, extras,
                                   /*background=*/false));
  return writer.Finish(prune);
}

namespace {

// What one rank read of a checkpoint directory, not yet taken.
struct DirLoad {
  std::string path;
  TrainingPosition position;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> model;  // destination, value
  // The optimizer's state by the tensor it is keyed by, made and on that tensor's device.
  std::vector<std::pair<torch::Tensor, std::unique_ptr<torch::optim::OptimizerParamState>>> states;
  bool averages = false, state = false;
  std::vector<torch::Tensor> average_values, state_values;
  std::string run;  // the run it belongs to; empty when it names none
  int64_t bytes_read = 0;
};

// Reads elements `range` (all when null) of tensor `name`, which must be of `type` and have
// `total` elements, as a 1-D tensor on the CPU.
absl::StatusOr<torch::Tensor> ReadElements(IndexReader& reader, const std::string& path,
                                           const std::string& name, torch::ScalarType type,
                                           int64_t total, const ShardRange* range = nullptr) {
  const IndexTensor* t = reader.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("checkpoint ", path, " has no ", name));
  HVX_ASSIGN_OR_RETURN(const std::string dtype, SafetensorsDtype(type));
  if (t->dtype != dtype || t->Elements() != total) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path, ": ", name, " is ", t->dtype, " of ", t->Elements(),
                     " elements there, ", dtype, " of ", total,
                     " here (a checkpoint of another model or precision: --fresh starts over)"));
  }
  const int64_t begin = range != nullptr ? range->begin : 0;
  const int64_t elements = range != nullptr ? range->size : total;
  torch::Tensor out = torch::empty({elements}, torch::dtype(type));
  HVX_RETURN_IF_ERROR(reader.Read(name, begin, elements, out.data_ptr()));
  return out;
}

// Tensor `name` whole, shaped and typed as `like`.
absl::StatusOr<torch::Tensor> ReadAs(IndexReader& reader, const std::string& path,
                                     const std::string& name, const torch::Tensor& like) {
  const IndexTensor* t = reader.Find(name);
  if (t != nullptr && t->shape != like.sizes().vec()) {
    return RefuseOtherModel(
        path, absl::StrCat(name, " has the shape [", absl::StrJoin(t->shape, ", "), "] there, [",
                           absl::StrJoin(like.sizes().vec(), ", "), "] here"));
  }
  HVX_ASSIGN_OR_RETURN(torch::Tensor v,
                       ReadElements(reader, path, name, like.scalar_type(), like.numel()));
  return v.view(like.sizes());
}

// Refuses, before anything is read, a checkpoint written for another model than `model`.
absl::Status CheckIndexFingerprint(const CheckpointIndex& index, Classifier& model,
                                   const std::string& path) {
  const Json* fingerprint = JsonMember(index.metadata, "fingerprint");
  if (fingerprint == nullptr) {
    return absl::DataLossError(
        absl::StrCat(path, "/", kIndexFileName, ": no fingerprint in its metadata"));
  }
  HVX_ASSIGN_OR_RETURN(std::vector<std::string> theirs,
                       JsonStrings(*fingerprint, absl::StrCat(path, "/", kIndexFileName)));
  return CheckFingerprint(ModelFingerprint(model), theirs, path);
}

// The values of `model`'s parameters (the moving averages with `use_averages`) and buffers, by
// destination: buffers averaged over ranks, or this rank's own row of each floating-point buffer
// with `own_rows` (the checkpoint's world size is this run's) where the checkpoint has it.
absl::StatusOr<std::vector<std::pair<torch::Tensor, torch::Tensor>>> ReadModel(
    IndexReader& reader, const std::string& path, Classifier& model, bool use_averages,
    bool own_rows) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> values;
  for (const auto& item : model.named_parameters()) {
    const std::string name = (use_averages ? "averages/" : "model/") + item.key();
    if (use_averages && reader.Find(name) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " has no moving average of the weights (written with ema_decay 0)"));
    }
    HVX_ASSIGN_OR_RETURN(torch::Tensor v, ReadAs(reader, path, name, item.value()));
    values.emplace_back(item.value(), v);
  }
  std::map<std::string, bool> float_buffer;
  for (const auto& [name, t] : FloatBuffers(model)) float_buffer[name] = true;
  for (const auto& item : model.named_buffers()) {
    const std::string row = "rank_buffers/" + item.key();
    if (own_rows && float_buffer.count(item.key()) && reader.Find(row) != nullptr) {
      const int64_t n = item.value().numel();
      const ShardRange mine{Rank() * n, n};
      HVX_ASSIGN_OR_RETURN(
          torch::Tensor v,
          ReadElements(reader, path, row, item.value().scalar_type(), Size() * n, &mine));
      values.emplace_back(item.value(), v.view(item.value().sizes()));
      continue;
    }
    HVX_ASSIGN_OR_RETURN(torch::Tensor v,
                         ReadAs(reader, path, "model/" + item.key(), item.value()));
    values.emplace_back(item.value(), v);
  }
  return values;
}

absl::StatusOr<std::unique_ptr<DirLoad>> ReadDirUnguarded(const std::string& path,
                                                          Classifier& model,
                                                          const CheckpointOptimizer& optimizer,
                                                          const CheckpointExtras& extras) {
  auto load = std::make_unique<DirLoad>();
  load->path = path;
  HVX_ASSIGN_OR_RETURN(const CheckpointIndex index, ReadIndex(path));
  const Json& meta = index.metadata;
  HVX_RETURN_IF_ERROR(CheckIndexFingerprint(index, model, path));
  std::vector<int64_t> position;
  try {
    position = meta.at("position").get<std::vector<int64_t>>();
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat(path, "/", kIndexFileName, ": no position in its metadata"));
  }
  auto decoded = DecodePosition(position);
  if (!decoded.ok()) return Annotate(decoded.status(), absl::StrCat("checkpoint ", path));
  load->position = *decoded;
  if (const Json* order = JsonMember(meta, "data_order"); order != nullptr && order->is_string()) {
    HVX_RETURN_IF_ERROR(
        CheckDataOrder(order->get<std::string>(), load->position, extras.data_order, path));
  }
  if (const Json* run = JsonMember(meta, "run"); run != nullptr && run->is_string()) {
    load->run = run->get<std::string>();
  }
  IndexReader reader(path, index);
  HVX_ASSIGN_OR_RETURN(load->model, ReadModel(reader, path, model, /*use_averages=*/false,
                                              /*own_rows=*/index.world_size == Size()));
  HVX_ASSIGN_OR_RETURN(const std::vector<StateSlot> slots, Slots(model, optimizer));
  for (const StateSlot& slot : slots) {
    StateFields fields;
    const std::string prefix = OptimizerName(slot.name, "");
    for (auto it = index.tensors.lower_bound(prefix);
         it != index.tensors.end() && absl::StartsWith(it->first, prefix); ++it) {
      const std::string field = it->first.substr(prefix.size());
      if (field == "step") {
        int64_t step = 0;
        if (it->second.dtype != "I64" || it->second.Elements() != 1) {
          return absl::DataLossError(absl::StrCat(path, ": ", it->first, " is not one int64"));
        }
        HVX_RETURN_IF_ERROR(reader.Read(it->first, 0, 1, &step));
        fields.step = step;
        continue;
      }
      int64_t total = 1;
      for (int64_t d : slot.shape) total *= d;
      HVX_ASSIGN_OR_RETURN(torch::Tensor v,
                           ReadElements(reader, path, it->first, slot.key.scalar_type(), total,
                                        slot.sliced ? &slot.range : nullptr));
      fields.tensors.emplace_back(field, slot.sliced ? v : v.view(slot.shape));
    }
    if (fields.tensors.empty() && !fields.step) continue;
    for (auto& [name, t] : fields.tensors) t = t.to(slot.key.device());
    HVX_ASSIGN_OR_RETURN(auto state, MakeState(StateOwner(optimizer), fields, path));
    load->states.emplace_back(slot.key, std::move(state));
  }
  auto read_all = [&](const NamedTensors* named, const char* prefix,
                      std::vector<torch::Tensor>* out) -> absl::StatusOr<bool> {
    if (named == nullptr) return false;
    for (const auto& [name, t] : *named) {
      if (reader.Find(prefix + name) == nullptr) {
        out->clear();
        return false;
      }
      HVX_ASSIGN_OR_RETURN(torch::Tensor v, ReadAs(reader, path, prefix + name, t));
      out->push_back(v);
    }
    return true;
  };
  HVX_ASSIGN_OR_RETURN(load->averages,
                       read_all(extras.averages, "averages/", &load->average_values));
  HVX_ASSIGN_OR_RETURN(load->state, read_all(extras.state, "state/", &load->state_values));
  load->bytes_read = reader.bytes_read();
  return load;
}

// ReadDirUnguarded, with LibTorch's exceptions (memory, a device) as a status: a rank must report
// its failure to the others' agreement, not end while they wait in it.
absl::StatusOr<std::unique_ptr<DirLoad>> ReadDir(const std::string& path, Classifier& model,
                                                 const CheckpointOptimizer& optimizer,
                                                 const CheckpointExtras& extras) {
  try {
    return ReadDirUnguarded(path, model, optimizer, extras);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat("reading checkpoint ", path, ": ", e.what()));
  }
}

// Takes what ReadDir read (and made: the optimizer's states) into the live model, optimizer and
// extras. Nothing is allocated here, so nothing fails once every rank agreed to take it.
void Take(DirLoad& load, const CheckpointOptimizer& optimizer, const CheckpointExtras& extras) {
  torch::NoGradGuard no_grad;
  for (auto& [live, value] : load.model) live.copy_(value);
  torch::optim::Optimizer& owner = StateOwner(optimizer);
  owner.state().clear();
  for (auto& [key, state] : load.states) owner.state()[StateKeyOf(key)] = std::move(state);
  if (load.averages) {
    for (size_t i = 0; i < extras.averages->size(); ++i) {
      (*extras.averages)[i].second.copy_(load.average_values[i]);
    }
  }
  if (load.state) {
    for (size_t i = 0; i < extras.state->size(); ++i) {
      (*extras.state)[i].second.copy_(load.state_values[i]);
    }
  }
  if (extras.run != nullptr && !load.run.empty()) extras.run->swap(load.run);
}

}  // namespace

absl::StatusOr<DirResume> ResumeFromCheckpointDirs(const std::vector<std::string>& candidates,
                                                   Classifier& model,
                                                   const CheckpointOptimizer& optimizer,
                                                   TrainingPosition* position,
                                                   const CheckpointExtras& extras) {
  // Rank 0's reason to stop trying: a damaged checkpoint it could not set aside, which would be
  // tried again at every start (and counted by checkpoint.keep) were it left to look whole.
  std::string stuck;
  for (size_t i = 0;; ++i) {
    std::string path = Rank() == 0 && i < candidates.size() ? candidates[i] : std::string();
    if (!stuck.empty()) path = InBandFailure(absl::FailedPreconditionError(stuck));
    HVX_RETURN_IF_ERROR(BroadcastBytes("resume.dir", &path, 0));
    HVX_RETURN_IF_ERROR(FromInBand(path));
    if (path.empty()) return DirResume{};
    const absl::Time start = MonotonicNow();
    absl::StatusOr<std::unique_ptr<DirLoad>> load = ReadDir(path, model, optimizer, extras);
    HVX_ASSIGN_OR_RETURN(std::vector<std::string> failures,
                         AllgatherBytes("resume.read", EncodeFailure(load.status(), Host())));
    const std::vector<RankFailure> failed = Failures(failures);
    const auto other = std::find_if(failed.begin(), failed.end(), [](const RankFailure& f) {
      return f.code != absl::StatusCode::kDataLoss;
    });
    if (other != failed.end()) return StatusOf(*other, load.status(), Rank());
    if (!failed.empty()) {
      if (Rank() == 0) {
        const std::string aside = path + kCorruptSuffix;
        const std::string why =
            absl::StrCat("checkpoint ", path, " is damaged (rank ", failed.front().rank,
                         " on host ", failed.front().host, ": ", failed.front().message, ")");
        if (rename(path.c_str(), aside.c_str()) != 0) {
          stuck = absl::StrCat(why, ", and setting it aside as ", aside,
                               " failed: ", strerror(errno), ". Move it away, then start again");
          continue;
        }
        HVX_LOG(WARNING) << why << "; moved it to " << aside
                         << (i + 1 < candidates.size() ? "; trying the next older checkpoint"
                                                       : "; no older checkpoint directory is left");
      }
      continue;
    }
    Take(**load, optimizer, extras);
    *position = (*load)->position;
    HVX_LOG(INFO) << absl::StrFormat(
        "resuming from %s (epoch %d, step %d): this rank read %.3f MB in %.3f s", path,
        position->epoch + 1, position->global_step, (*load)->bytes_read / 1e6,
        absl::ToDoubleSeconds(MonotonicNow() - start));
    DirResume resume;
    resume.loaded = true;
    resume.path = path;
    resume.averages = (*load)->averages;
    resume.state = (*load)->state;
    return resume;
  }
}

absl::Status LoadCheckpointDirModel(const std::string& dir, const torch::Device& device,
                                    Classifier& model, bool use_averages) {
  HVX_ASSIGN_OR_RETURN(const CheckpointIndex index, ReadIndex(dir));
  HVX_RETURN_IF_ERROR(CheckIndexFingerprint(index, model, dir));
  IndexReader reader(dir, index);
  HVX_ASSIGN_OR_RETURN(auto values,
                       ReadModel(reader, dir, model, use_averages, /*own_rows=*/false));
  torch::NoGradGuard no_grad;
  for (auto& [live, value] : values) live.copy_(value.to(device));
  return absl::OkStatus();
}

}  // namespace train
}  // namespace hvx
