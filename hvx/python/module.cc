// hvx._C: the one native module behind hvx.torch and hvx.data. It only translates: Python objects
// to hvx's C++ API (hvx/core/api.h, hvx/torch/tensor.h, hvx/data) and absl::Status to
// exceptions. Semantics, names and checks live in the C++ layers or in the Python package.
//
// Errors: a call rejected before anything is submitted raises ValueError (InvalidArgument) or
// HvxInternalError; a collective that fails raises HvxInternalError (a RuntimeError, as Horovod's
// HorovodInternalError) with the engine's message, on every rank it failed on. Every call that
// waits releases the GIL.
#include <torch/extension.h>

#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hvx/common/env.h"
#include "hvx/common/json.h"
#include "hvx/common/logging.h"
#include "hvx/common/stack_dump.h"
#include "hvx/core/api.h"
#include "hvx/data/dataset.h"
#include "hvx/data/example.h"
#include "hvx/data/shard_plan.h"
#include "hvx/torch/host_allocator.h"
#include "hvx/torch/tensor.h"
#include "hvx/train/checkpoint_format.h"

namespace hvx {
namespace python {

namespace py = pybind11;

namespace {

// Raised for a failed collective or an hvx error that is not the caller's argument.
class InternalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised by a collective the coordinator failed because the ranks' arguments were wrong or
// disagreed (shapes, dtypes, roots, splits): in Python both a ValueError, as Horovod's argument
// errors are, and an HvxInternalError, as every failed collective is.
class InvalidArgumentError : public InternalError {
 public:
  using InternalError::InternalError;
};

void Raise(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message());
  if (absl::IsInvalidArgument(status)) throw py::value_error(message);
  if (absl::IsNotFound(status)) throw py::value_error(message);
  throw InternalError(message);
}

template <typename T>
T Take(absl::StatusOr<T> value) {
  Raise(value.status());
  return *std::move(value);
}

ReduceOp ToReduceOp(int op) {
  if (op < 0 || op > static_cast<int>(ReduceOp::kAdasum)) {
    throw py::value_error(absl::StrCat("unknown reduction op ", op));
  }
  return static_cast<ReduceOp>(op);
}

// The process sets this process knows, by id: the global set, and those add_process_set made.
class ProcessSets {
 public:
  ProcessSet Get(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (id == 0) return GlobalProcessSet();
    auto it = sets_.find(id);
    if (it == sets_.end()) {
      throw py::value_error(
          absl::StrCat("process set ", id, " does not exist (it was never added, or was removed)"));
    }
    return it->second;
  }
  void Put(ProcessSet set) {
    std::lock_guard<std::mutex> lock(mu_);
    sets_[set.id()] = set;
  }
  void Remove(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    sets_.erase(id);
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    sets_.clear();
  }

 private:
  std::mutex mu_;
  std::map<int, ProcessSet> sets_;
};

ProcessSets& Sets() {
  static ProcessSets* sets = new ProcessSets;
  return *sets;
}

// An op in flight, with the tensors it reads and writes kept alive until it completes.
struct PyHandle {
  Handle handle;
  std::vector<at::Tensor> keep;
  // Allgather, alltoall, reducescatter: allocated on hvx's thread once the shape is agreed.
  std::shared_ptr<at::Tensor> output = std::make_shared<at::Tensor>();
};

TensorRef Ref(const at::Tensor& tensor, const std::string& name) {
  return Take(AsTensorRef(tensor, absl::StrCat("tensor '", name, "'")));
}

// The Python file and line an op comes from: the innermost frame outside hvx.torch and torch
// (a gradient hook's op comes from the user's backward() line), the path's tail cut to fit the
// flight recorder's 63 characters ("models/train.py:42"); "" when no frame is outside them.
std::string PythonCaller() {
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  std::string caller;
  for (int depth = 0; frame != nullptr && depth < 64 && caller.empty(); ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* utf8 = PyUnicode_AsUTF8(code->co_filename);
    const std::string_view file = utf8 != nullptr ? utf8 : "";
    if (utf8 == nullptr) PyErr_Clear();
    if (!file.empty() && file.find("/torch/") == std::string_view::npos) {
      const std::string line = absl::StrCat(":", PyFrame_GetLineNumber(frame));
      std::string_view tail = file;
      const size_t room = 63 - line.size();
      while (tail.size() > room) {
        const size_t slash = tail.find('/', 1);
        tail =
            slash == std::string_view::npos ? tail.substr(tail.size() - room) : tail.substr(slash);
      }
      if (!tail.empty() && tail[0] == '/' && tail.size() < file.size()) tail.remove_prefix(1);
      caller = std::string(tail) + line;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return caller;
}

// Sets this thread's caller (SetCallerForThisThread) for the op a binding submits.
class CallerScope {
 public:
  CallerScope() { SetCallerForThisThread(PythonCaller()); }
  ~CallerScope() { SetCallerForThisThread(""); }
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;
};

// Submission errors (a dtype hvx has no reduction for, a name in flight) reject the handle at
// once; they raise here, at the call, as Horovod's do. (An op that failed in negotiation raises
// from its wait, even when that was quick.)
std::shared_ptr<PyHandle> Submitted(std::shared_ptr<PyHandle> h) {
  if (Poll(h->handle) && h->handle.rejected()) {
    const absl::Status status = h->handle.status();
    if (absl::IsInvalidArgument(status)) throw py::value_error(std::string(status.message()));
  }
  return h;
}

void Wait(PyHandle& h) {
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = hvx::Wait(h.handle);
  }
  if (absl::IsInvalidArgument(status)) throw InvalidArgumentError(std::string(status.message()));
  if (!status.ok()) throw InternalError(std::string(status.message()));
}

AllreduceOptions ReduceOptions(int op, double prescale, double postscale, int process_set) {
  AllreduceOptions o;
  o.op = ToReduceOp(op);
  o.prescale_factor = prescale;
  o.postscale_factor = postscale;
  o.process_set = Sets().Get(process_set);
  return o;
}

void InitHvx(const std::vector<std::vector<int>>& process_sets) {
  {
    py::gil_scoped_release release;
    // As the trainer does (hvx/torch/host_allocator.h): host memory a step frees is kept for the
    // next step, whose first touches of fresh pages otherwise cost more than the exchange.
    absl::StatusOr<std::string> memory = KeepHostMemoryForReuse(Environment::Process());
    Raise(memory.status());
    Raise(Init());
    HVX_LOG_RANK0(DEBUG) << *memory;
  }
  for (const std::vector<int>& ranks : process_sets) {
    py::gil_scoped_release release;
    Sets().Put(Take(AddProcessSet(ranks)));
  }
}

void ShutdownHvx() {
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = Shutdown();
  }
  Sets().Clear();
  Raise(status);
}

int AddSet(const std::vector<int>& ranks) {
  ProcessSet set;
  {
    py::gil_scoped_release release;
    set = Take(AddProcessSet(ranks));
  }
  Sets().Put(set);
  return set.id();
}

// ---- data

struct PlanResult {
  std::vector<int64_t> ids;
  int64_t num_padded = 0;
};

PlanResult Plan(int64_t num_samples, int rank, int size, int64_t epoch, uint64_t seed, bool pad,
                bool shuffle, int64_t consumed) {
  data::ShardPlanOptions o;
  o.num_samples = num_samples;
  o.rank = rank;
  o.size = size;
  o.epoch = epoch;
  o.seed = seed;
  o.remainder = pad ? data::RemainderPolicy::kPad : data::RemainderPolicy::kDrop;
  o.shuffle = shuffle;
  o.consumed = consumed;
  data::ShardPlan plan = Take(data::MakeShardPlan(o));
  return PlanResult{std::move(plan.sample_ids), plan.num_padded};
}

// A set of record files, read by global sample id (hvx/data/dataset.h).
class Records {
 public:
  Records(const std::vector<std::string>& patterns, bool verify_crc) : verify_crc_(verify_crc) {
    py::gil_scoped_release release;
    dataset_ = Take(data::Dataset::Open(patterns, data::DatasetOptions{}));
  }
  int64_t size() const { return dataset_->num_samples(); }
  std::vector<std::string> files() const { return dataset_->files(); }
  std::string Describe(int64_t id) const { return dataset_->DescribeSample(id); }

  py::bytes Read(int64_t id) const {
    std::string payload;
    ReadInto(id, &payload);
    return py::bytes(payload);
  }

  // The features `keys` of record `id`, parsed as a tf.train.Example: bytes -> list of bytes,
  // int64 -> int64 tensor, float -> float32 tensor. Errors name the record and the feature.
  py::dict ReadExample(int64_t id, const std::vector<std::string>& keys) const {
    std::string payload;
    ReadInto(id, &payload);
    data::Example example;
    absl::Status parsed = data::ParseExample(payload, &example);
    if (!parsed.ok()) throw py::value_error(absl::StrCat(Describe(id), ": ", parsed.message()));
    py::dict out;
    for (const std::string& key : keys) {
      auto feature = data::GetFeature(example, key);
      if (!feature.ok()) {
        throw py::value_error(absl::StrCat(Describe(id), ": ", feature.status().message()));
      }
      const data::Feature& f = **feature;
      if (f.has_int64_list()) {
        const auto& v = f.int64_list().value();
        at::Tensor t = at::empty({v.size()}, at::kLong);
        std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
        out[py::str(key)] = t;
      } else if (f.has_float_list()) {
        const auto& v = f.float_list().value();
        at::Tensor t = at::empty({v.size()}, at::kFloat);
        std::copy(v.begin(), v.end(), t.data_ptr<float>());
        out[py::str(key)] = t;
      } else if (f.has_bytes_list()) {
        py::list values;
        for (const std::string& b : f.bytes_list().value()) values.append(py::bytes(b));
        out[py::str(key)] = values;
      } else {
        throw py::value_error(absl::StrCat(Describe(id), ": feature '", key, "' holds no list"));
      }
    }
    return out;
  }

 private:
  void ReadInto(int64_t id, std::string* payload) const {
    if (id < 0 || id >= size()) {
      throw py::index_error(absl::StrCat("record ", id, " of ", size()));
    }
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = dataset_->Read(id, verify_crc_, payload);
    }
    if (!status.ok()) throw InternalError(std::string(status.message()));
  }

  bool verify_crc_;
  std::shared_ptr<const data::Dataset> dataset_;
};

// hvx.torch.checkpoint's file layer: the trainer's sharded checkpoint format
// (hvx/train/checkpoint_format.h), without its collectives, which hvx.torch runs in Python.

// Writes this rank's `pieces`, each (tensor, dtype, shape, begin, elements, data: a contiguous CPU
// tensor of `elements` elements of `dtype`), as the safetensors file `dir`/`name`; returns what
// rank 0 needs for the index (ShardToJson) as JSON text. `metadata` goes in the file's header.
std::string WriteShard(const std::string& dir, const std::string& name, const py::list& pieces,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<train::PieceToWrite> out;
  std::vector<torch::Tensor> keep;
  for (const py::handle& item : pieces) {
    const auto t = item.cast<py::tuple>();
    train::PieceToWrite p;
    p.tensor = t[0].cast<std::string>();
    p.dtype = t[1].cast<std::string>();
    p.shape = t[2].cast<std::vector<int64_t>>();
    p.begin = t[3].cast<int64_t>();
    p.elements = t[4].cast<int64_t>();
    torch::Tensor data = t[5].cast<torch::Tensor>();
    if (!data.device().is_cpu() || !data.is_contiguous() || data.numel() != p.elements ||
        data.element_size() != train::SafetensorsDtypeBytes(p.dtype)) {
      throw py::value_error(absl::StrCat("checkpoint piece of ", p.tensor,
                                         ": the data must be a contiguous CPU tensor of ",
                                         p.elements, " ", p.dtype, " elements"));
    }
    p.data = data.data_ptr();
    keep.push_back(std::move(data));
    out.push_back(std::move(p));
  }
  absl::StatusOr<train::WrittenShard> shard;
  {
    py::gil_scoped_release release;
    shard = train::WriteShardFile(dir, name, out, metadata);
  }
  Raise(shard.status());
  return JsonText(train::ShardToJson(*shard));
}

// Rank 0, with every rank's WriteShard result: the index of `shards` (checked: every tensor's
// pieces cover it exactly once), written to `dir` last, atomically and durably.
void CommitIndex(const std::string& dir, int64_t step, const std::vector<std::string>& shards,
                 const std::string& metadata) {
  std::vector<train::WrittenShard> written;
  for (size_t r = 0; r < shards.size(); ++r) {
    absl::StatusOr<Json> json = ParseJson(shards[r], absl::StrCat("rank ", r, "'s shard"));
    Raise(json.status());
    absl::StatusOr<train::WrittenShard> shard =
        train::ShardFromJson(*json, absl::StrCat("rank ", r, "'s shard"));
    Raise(shard.status());
    written.push_back(std::move(*shard));
  }
  absl::StatusOr<Json> meta = ParseJson(metadata, "the checkpoint's metadata");
  Raise(meta.status());
  absl::StatusOr<train::CheckpointIndex> index =
      train::BuildIndex(step, static_cast<int>(written.size()), written, std::move(*meta));
  Raise(index.status());
  py::gil_scoped_release release;
  Raise(train::WriteIndex(dir, *index));
}

// A checkpoint directory open for reading: its index, and element ranges of its tensors read into
// torch tensors, every block read checked against the index.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir) : dir_(dir) {
    absl::StatusOr<train::CheckpointIndex> index = train::ReadIndex(dir);
    Raise(index.status());
    index_ = std::make_unique<train::CheckpointIndex>(std::move(*index));
    reader_ = std::make_unique<train::IndexReader>(dir, *index_);
  }
  std::string Index() const { return train::EncodeIndex(*index_); }
  // Elements [begin, begin + out.numel()) of tensor `name` into `out` (contiguous, on the CPU,
  // of the tensor's dtype).
  void Read(const std::string& name, int64_t begin, torch::Tensor out) {
    const train::IndexTensor* t = reader_->Find(name);
    if (t == nullptr) throw py::value_error(absl::StrCat("checkpoint ", dir_, " has no ", name));
    if (!out.device().is_cpu() || !out.is_contiguous() ||
        out.element_size() != train::SafetensorsDtypeBytes(t->dtype)) {
      throw py::value_error(absl::StrCat("reading ", name, " from checkpoint ", dir_,
                                         ": the destination must be a contiguous CPU tensor of ",
                                         t->dtype));
    }
    void* data = out.data_ptr();
    const int64_t n = out.numel();
    py::gil_scoped_release release;
    Raise(reader_->Read(name, begin, n, data));
  }
  int64_t bytes_read() const { return reader_->bytes_read(); }

 private:
  std::string dir_;
  std::unique_ptr<train::CheckpointIndex> index_;
  std::unique_ptr<train::IndexReader> reader_;
};

}  // namespace

void DefineModule(py::module_& m) {
  m.doc() = "hvx's native module; use hvx.torch and hvx.data";
  auto internal = py::register_exception<InternalError>(m, "HvxInternalError", PyExc_RuntimeError);
  const py::tuple bases = py::make_tuple(internal, py::handle(PyExc_ValueError));
  py::register_exception<InvalidArgumentError>(m, "HvxInvalidArgumentError", bases);

  // hvx::ReduceOp's values, so that hvx.torch's op constants are the ones the engine takes.
  for (ReduceOp op : {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kProduct, ReduceOp::kAdasum}) {
    std::string name(ReduceOpName(op));
    name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
    m.attr(name.c_str()) = static_cast<int>(op);
  }

  m.def("init", &InitHvx, py::arg("process_sets"));
  m.def("shutdown", &ShutdownHvx);
  m.def("is_initialized", &IsInitialized);
  m.def("rank", &Rank);
  m.def("size", &Size);
  m.def("local_rank", &LocalRank);
  m.def("local_size", &LocalSize);
  m.def("cross_rank", &CrossRank);
  m.def("cross_size", &CrossSize);
  m.def("is_homogeneous", &IsHomogeneous);
  // The host tensor cache's counters (None when HVX_HOST_ALLOCATOR=0 left LibTorch's own).
  m.def("host_allocator_stats", []() -> py::object {
    const CachingHostAllocator* a = InstalledHostAllocator();
    if (a == nullptr) return py::none();
    const HostAllocatorStats s = a->stats();
    py::dict d;
    d["hits"] = s.hits;
    d["maps"] = s.maps;
    d["unmaps"] = s.unmaps;
    d["cached_bytes"] = s.cached_bytes;
    d["live_bytes"] = s.live_bytes;
    return d;
  });

  // Straggler detection's conclusion so far (hvx/core/straggler.h), the same on every rank.
  m.def("stragglers", []() {
    const StragglerStatus s = Stragglers();
    py::dict d;
    d["rank"] = s.rank;
    d["windows"] = s.windows;
    d["window_s"] = s.window_s;
    d["late_ms"] = s.late_ms;
    d["wait_share"] = s.share;
    d["warning"] = s.warning;
    return d;
  });

  m.def("stack_dump_fd", &StackDumpFd);
  // What the flight recorder keeps as an op's caller if one were submitted here.
  m.def("python_caller", &PythonCaller);
  m.def("python_stack_signal", &PythonStackSignal);
  m.def("enable_python_stacks", &EnablePythonStacks);

  m.def("add_process_set", &AddSet);
  m.def("remove_process_set", [](int id) { Sets().Remove(id); });
  m.def("process_set_ranks", [](int id) { return Sets().Get(id).ranks(); });
  m.def("process_set_rank", [](int id) { return Sets().Get(id).rank(); });
  m.def("process_set_size", [](int id) { return Sets().Get(id).size(); });

  py::class_<PyHandle, std::shared_ptr<PyHandle>>(m, "Handle")
      .def_property_readonly("id", [](const PyHandle& h) { return h.handle.id(); })
      .def_property_readonly("name", [](const PyHandle& h) { return h.handle.name(); })
      .def("poll", [](const PyHandle& h) { return Poll(h.handle); })
      .def("wait", [](PyHandle& h) { Wait(h); })
      // Set on hvx's thread when the shape is agreed: read only once the op has completed.
      .def_property_readonly("output",
                             [](const PyHandle& h) {
                               if (!Poll(h.handle)) {
                                 throw pybind11::value_error(
                                     "the output is there once the op has completed: "
                                     "synchronize first");
                               }
                               return *h.output;
                             })
      .def_property_readonly("received_splits",
                             [](const PyHandle& h) { return h.handle.received_splits(); })
      .def_property_readonly("last_joined_rank",
                             [](const PyHandle& h) { return h.handle.last_joined_rank(); });

  m.def("allreduce_async",
        [](const at::Tensor& input, const at::Tensor& output, const std::string& name, int op,
           double prescale, double postscale, int process_set) {
          const CallerScope caller;
          auto h = std::make_shared<PyHandle>();
          const AllreduceOptions o = ReduceOptions(op, prescale, postscale, process_set);
          h->keep = {input, output};
          h->handle = Allreduce(name, Ref(input, name), Ref(output, name), o);
          return Submitted(h);
        });
  m.def("grouped_allreduce_async",
        [](const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
           const std::string& name, int op, double prescale, double postscale, int process_set) {
          const CallerScope caller;
          auto h = std::make_shared<PyHandle>();
          const AllreduceOptions o = ReduceOptions(op, prescale, postscale, process_set);
          if (outputs.size() != inputs.size()) {
            throw pybind11::value_error(absl::StrCat("grouped_allreduce '", name,
                                                     "': ", inputs.size(), " inputs but ",
                                                     outputs.size(), " outputs"));
          }
          std::vector<TensorRef> in, out;
          for (size_t i = 0; i < inputs.size(); ++i) {
            in.push_back(Ref(inputs[i], absl::StrCat(name, ".", i)));
            out.push_back(Ref(outputs[i], absl::StrCat(name, ".", i)));
            h->keep.push_back(inputs[i]);
            h->keep.push_back(outputs[i]);
          }
          h->handle = GroupedAllreduce(name, std::move(in), std::move(out), o);
          return Submitted(h);
        });
  m.def("allgather_async", [](const at::Tensor& input, const std::string& name, int process_set) {
    const CallerScope caller;
    auto h = std::make_shared<PyHandle>();
    CollectiveOptions o;
    o.process_set = Sets().Get(process_set);
    o.allocator = AllocateLike(h->output, input);
    h->keep = {input};
    h->handle = Allgather(name, Ref(input, name), o);
    return Submitted(h);
  });
  m.def("broadcast_async",
        [](const at::Tensor& tensor, int root_rank, const std::string& name, int process_set) {
          const CallerScope caller;
          auto h = std::make_shared<PyHandle>();
          CollectiveOptions o;
          o.process_set = Sets().Get(process_set);
          h->keep = {tensor};
          h->handle = Broadcast(name, Ref(tensor, name), root_rank, o);
          return Submitted(h);
        });
  m.def("alltoall_async", [](const at::Tensor& input, const std::vector<int64_t>& splits,
                             const std::string& name, int process_set) {
    const CallerScope caller;
    auto h = std::make_shared<PyHandle>();
    CollectiveOptions o;
    o.process_set = Sets().Get(process_set);
    o.allocator = AllocateLike(h->output, input);
    h->keep = {input};
    h->handle = Alltoall(name, Ref(input, name), splits, o);
    return Submitted(h);
  });
  m.def("reducescatter_async", [](const at::Tensor& input, const std::string& name, int op,
                                  double prescale, double postscale, int process_set) {
    const CallerScope caller;
    auto h = std::make_shared<PyHandle>();
    ReduceScatterOptions o;
    o.op = ToReduceOp(op);
    o.prescale_factor = prescale;
    o.postscale_factor = postscale;
    o.process_set = Sets().Get(process_set);
    o.allocator = AllocateLike(h->output, input);
    h->keep = {input};
    h->handle = ReduceScatter(name, Ref(input, name), o);
    return Submitted(h);
  });
  m.def("barrier_async", [](int process_set) {
    const CallerScope caller;
    auto h = std::make_shared<PyHandle>();
    h->handle = Barrier(Sets().Get(process_set));
    return h;
  });
  m.def("join_async", []() {
    const CallerScope caller;
    auto h = std::make_shared<PyHandle>();
    h->handle = Join();
    return h;
  });
  m.def("reducescatter_rows", &ReduceScatterRows);

  m.def("checkpoint_write_shard", &WriteShard, py::arg("dir"), py::arg("name"), py::arg("pieces"),
        py::arg("metadata"));
  m.def("checkpoint_commit_index", &CommitIndex, py::arg("dir"), py::arg("step"), py::arg("shards"),
        py::arg("metadata"));
  m.def("checkpoint_shard_file_name", [](const std::string& token, int rank, int size) {
    return train::ShardFileName(token, rank, size);
  });
  py::class_<CheckpointReader>(m, "CheckpointReader")
      .def(py::init<const std::string&>(), py::arg("dir"))
      .def("index", &CheckpointReader::Index)
      .def("read", &CheckpointReader::Read, py::arg("name"), py::arg("begin"), py::arg("out"))
      .def_property_readonly("bytes_read", &CheckpointReader::bytes_read);

  py::class_<PlanResult>(m, "ShardPlan")
      .def_readonly("ids", &PlanResult::ids)
      .def_readonly("num_padded", &PlanResult::num_padded);
  m.def("shard_plan", &Plan, py::arg("num_samples"), py::arg("rank"), py::arg("size"),
        py::arg("epoch"), py::arg("seed"), py::arg("pad"), py::arg("shuffle"), py::arg("consumed"));

  py::class_<Records>(m, "Records")
      .def(py::init<const std::vector<std::string>&, bool>(), py::arg("patterns"),
           py::arg("verify_crc") = true)
      .def("__len__", &Records::size)
      .def_property_readonly("files", &Records::files)
      .def("describe", &Records::Describe)
      .def("read", &Records::Read)
      .def("read_example", &Records::ReadExample);
}

}  // namespace python
}  // namespace hvx

PYBIND11_MODULE(_C, m) { hvx::python::DefineModule(m); }
