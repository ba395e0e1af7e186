// The engine's execution of agreed responses: one executor per op type. Every rank of a set runs
// the same responses in the same order; each executor runs this rank's part on the data plane of
// its tensors' device (PlaneFor).
#include <algorithm>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hvx/common/clock.h"
#include "hvx/common/json.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/agreement.h"
#include "hvx/core/engine.h"

namespace hvx {
namespace {

// The system Abseil's string_view is its own type.
std::string_view Std(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// Marks activities of every tensor of one response in the timeline (which may be null), and the
// first that is not a copy, where the response enters its data plane, in the flight recorder's
// ring.
template <typename EntryT>
class Recorder : public ActivityRecorder {
 public:
  Recorder(Timeline* timeline, const std::vector<std::string>* names, FlightRing* flight,
           const std::vector<EntryT*>* entries)
      : timeline_(timeline), names_(names), flight_(flight), entries_(entries) {}
  void Start(absl::string_view activity) override {
    if (timeline_) {
      for (const auto& n : *names_) timeline_->ActivityStart(n, activity);
    }
    // The data plane proper: a copy into the fusion buffer or the output comes before it.
    if (!marked_ && flight_->enabled() && !absl::StartsWith(activity, "MEMCPY")) {
      marked_ = true;
      const int64_t now = FlightNowNs();
      for (const EntryT* e : *entries_) {
        if (e != nullptr)
          flight_->Mark(e->flight_slot, e->flight_id, FlightState::kDataPlane, now, Std(activity));
      }
    }
  }
  void End() override {
    if (timeline_) {
      for (const auto& n : *names_) timeline_->ActivityEnd(n);
    }
  }

 private:
  Timeline* timeline_;
  const std::vector<std::string>* names_;
  FlightRing* flight_;
  const std::vector<EntryT*>* entries_;
  bool marked_ = false;
};

std::string ShapeJson(const TensorRef& t) {
  return absl::StrCat("{\"dtype\":", JsonQuote(DataTypeName(t.dtype())),
                      ",\"shape\":", JsonQuote(t.shape().DebugString()), "}");
}

// Average is a sum on the data plane, divided by the set's size in the postscale.
Scale Postscale(const Response& r, int set_size) {
  return Scale(r.postscale, r.reduce_op == ReduceOp::kAverage ? set_size : 1);
}

// The rows an allgather or alltoall output holds: the sum of `rows`, or -1 when one is negative
// or the sum passes 2^63. No output has that size: AllocateOutput refuses it on this rank, and
// AgreeBeforeDataPlane tells every rank before the data plane.
int64_t SumOfRows(const std::vector<int64_t>& rows) {
  int64_t total = 0;
  for (int64_t r : rows) {
    if (r < 0 || __builtin_add_overflow(total, r, &total)) return -1;
  }
  return total;
}

}  // namespace

absl::Status Engine::Execute(SetState& set, const Response& r) {
  Timeline* timeline = set.id == 0 ? timeline_.get() : nullptr;
  std::vector<Entry*> entries;
  for (const std::string& n : r.names) {
    auto it = set.pending.find(n);
    entries.push_back(it == set.pending.end() ? nullptr : &it->second);
  }
  if (timeline && r.type != OpType::kError) {
    for (const std::string& n : r.names) timeline->OpStart(n, r.type);
  }
  if (flight_.enabled() && r.type != OpType::kError) {
    const int64_t now = FlightNowNs();
    for (const Entry* e : entries) {
      if (e != nullptr) flight_.Mark(e->flight_slot, e->flight_id, FlightState::kNegotiated, now);
    }
  }
  if (set.id == 0 && r.type != OpType::kError) {
    const absl::Time agreed = MonotonicNow();
    for (const Entry* e : entries) {
      if (e != nullptr) wait_clock_.Agreed(e->submitted, agreed);
    }
  }
  Recorder<Entry> recorder(timeline, &r.names, &flight_, &entries);
  const Execution x{set, r, entries, &recorder};
  const bool first_is_join =
      !entries.empty() && entries[0] != nullptr && entries[0]->request.type == OpType::kJoin;
  absl::Status status = ExecuteOp(x);
  if (timeline && r.type != OpType::kError) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      timeline->OpEnd(r.names[i], entries[i] ? ShapeJson(entries[i]->input) : "");
    }
  }
  if (!status.ok() && r.type != OpType::kError) {
    HVX_LOG(DEBUG) << OpTypeName(r.type) << " failed: " << status;
  }
  // A join the coordinator failed (no progress within the collective timeout) ends this rank's
  // join: it takes part in no more allreduces as zeros.
  if (r.type == OpType::kError && first_is_join) joined_ = false;
  for (const std::string& n : r.names) CompleteEntry(set, n, status);
  // A collective whose peers never answered leaves requests pending in the transport: nothing
  // more can run on it. (An op the coordinator failed for absent ranks ran no collective.)
  return r.type != OpType::kError && absl::IsDeadlineExceeded(status) ? status : absl::OkStatus();
}

absl::Status Engine::ExecuteOp(const Execution& x) {
  Entry* first = x.entries.empty() ? nullptr : x.entries[0];
  switch (x.r.type) {
    case OpType::kError: {
      const auto code = static_cast<absl::StatusCode>(x.r.error_code);
      return absl::Status(
          code == absl::StatusCode::kOk ? absl::StatusCode::kFailedPrecondition : code, x.r.error);
    }
    case OpType::kAllreduce: {
      absl::Status status = ExecuteAllreduce(x);
      RememberInCache(x.set, x.r);
      return status;
    }
    // A rank that has joined has no tensor in the ops below and takes no part in them.
    case OpType::kAllgather:
      return first == nullptr ? absl::OkStatus() : ExecuteAllgather(x, *first);
    case OpType::kBroadcast:
      return first == nullptr ? absl::OkStatus() : ExecuteBroadcast(x, *first);
    case OpType::kAlltoall:
      return first == nullptr ? absl::OkStatus() : ExecuteAlltoall(x, *first);
    case OpType::kReduceScatter:
      return first == nullptr ? absl::OkStatus() : ExecuteReduceScatter(x, *first);
    case OpType::kBarrier:
      return absl::OkStatus();
    case OpType::kJoin:
      joined_ = false;
      if (first != nullptr) first->state->last_joined_rank = x.r.last_joined_rank;
      return absl::OkStatus();
    case OpType::kAddProcessSet: {
      int id = -1;
      absl::Status status = AddSet(std::vector<int>(x.r.rows.begin(), x.r.rows.end()), &id);
      if (first != nullptr) first->state->process_set_id = id;
      return status;
    }
  }
  return absl::InternalError(absl::StrCat("unknown op type ", static_cast<int>(x.r.type)));
}

absl::Status Engine::ExecuteAllreduce(const Execution& x) {
  const Response& r = x.r;
  AllreduceWork work;
  work.names = r.names;
  work.dtype = r.dtype;
  work.device = LocalDevice(x.set, r, x.entries);
  work.op = r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
  work.prescale_factor = r.prescale;
  work.postscale_factor = Postscale(r, x.set.size());
  work.fusion_buffer_bytes = std::max(options_.fusion_threshold_bytes, r.TotalBytes());
  work.fixed_order = options_.fixed_reduction_order;
  for (size_t i = 0; i < r.names.size(); ++i) {
    const Entry* e = x.entries[i];
    if (e != nullptr) {
      work.inputs.push_back(e->input);
      work.outputs.push_back(e->output);
    } else {
      // Joined: this rank contributes zeros, which the plane reads from no buffer.
      work.inputs.push_back(
          TensorRef(r.dtype, TensorShape(std::vector<int64_t>(r.shapes[i])), nullptr, work.device));
      work.outputs.push_back(work.inputs.back());
    }
  }
  work.activity = x.activity;
  HVX_ASSIGN_OR_RETURN(DataPlane * plane, PlaneFor(x.set, work.device));
  return plane->Allreduce(work);
}

void Engine::RememberInCache(SetState& set, const Response& r) {
  if (set.cache->capacity() == 0) return;
  Response single;  // r without its list of names: copying that per name is quadratic
  single.type = r.type;
  single.dtype = r.dtype;
  single.device_type = r.device_type;
  single.reduce_op = r.reduce_op;
  single.prescale = r.prescale;
  single.postscale = r.postscale;
  for (size_t i = 0; i < r.names.size(); ++i) {
    single.names = {r.names[i]};
    single.shapes = {r.shapes[i]};
    if (set.cache->Put(single) && !set.eviction_warned) {
      set.eviction_warned = true;
      HVX_LOG_RANK0(WARNING) << "the response cache (HVX_CACHE_CAPACITY=" << set.cache->capacity()
                             << ") is full and evicts entries, which slows negotiation; raise it "
                                "above the number of distinct tensor names per step";
    }
  }
}

absl::Status Engine::ExecuteAllgather(const Execution& x, Entry& e) {
  std::vector<int64_t> shape = x.r.shapes[0];
  shape[0] = SumOfRows(x.r.rows);
  HVX_ASSIGN_OR_RETURN(PreparedOutput prepared, PrepareOutput(x.set, e, shape));
  AllgatherWork w;
  w.name = x.r.names[0];
  w.input = e.input;
  w.output = prepared.output;
  w.rows = x.r.rows;
  w.row_elements = e.input.shape().row_elements();
  w.activity = x.activity;
  return prepared.plane->Allgather(w);
}

absl::Status Engine::ExecuteBroadcast(const Execution& x, Entry& e) {
  BroadcastWork w;
  w.name = x.r.names[0];
  w.tensor = e.input;
  w.root = x.r.root;
  w.activity = x.activity;
  HVX_ASSIGN_OR_RETURN(DataPlane * plane, PlaneFor(x.set, e.request.device));
  return plane->Broadcast(w);
}

absl::Status Engine::ExecuteAlltoall(const Execution& x, Entry& e) {
  const int n = x.set.size();
  const int me = x.set.rank();
  AlltoallWork w;
  w.name = x.r.names[0];
  w.input = e.input;
  w.row_elements = e.input.shape().row_elements();
  // r.rows is the n x n matrix of rows sent, by sender (row) and receiver (column).
  for (int j = 0; j < n; ++j) {
    w.send_rows.push_back(x.r.rows[me * n + j]);
    w.recv_rows.push_back(x.r.rows[j * n + me]);
  }
  std::vector<int64_t> shape = e.request.shape;
  shape[0] = SumOfRows(w.recv_rows);
  HVX_ASSIGN_OR_RETURN(PreparedOutput prepared, PrepareOutput(x.set, e, shape));
  w.output = prepared.output;
  e.state->received_splits = w.recv_rows;
  w.activity = x.activity;
  return prepared.plane->Alltoall(w);
}

absl::Status Engine::ExecuteReduceScatter(const Execution& x, Entry& e) {
  const int n = x.set.size();
  ReduceScatterWork w;
  w.name = x.r.names[0];
  w.input = e.input;
  w.row_elements = e.input.shape().row_elements();
  for (int j = 0; j < n; ++j) w.recv_rows.push_back(ReduceScatterRows(x.r.shapes[0][0], n, j));
  w.prescale_factor = x.r.prescale;
  w.postscale_factor = Postscale(x.r, n);
  std::vector<int64_t> shape = x.r.shapes[0];
  shape[0] = w.recv_rows[x.set.rank()];
  HVX_ASSIGN_OR_RETURN(PreparedOutput prepared, PrepareOutput(x.set, e, shape));
  w.output = prepared.output;
  w.activity = x.activity;
  return prepared.plane->ReduceScatter(w);
}

absl::StatusOr<TensorRef> Engine::AllocateOutput(Entry& entry, const std::vector<int64_t>& shape) {
  TensorShape s{std::vector<int64_t>(shape)};
  const int64_t esize = DataTypeSize(entry.request.dtype);
  int64_t bytes = s.num_elements();
  if (bytes < 0 || __builtin_mul_overflow(bytes, esize, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", entry.request.name, "': its output shape (", DataTypeName(entry.request.dtype),
        s.DebugString(), ") is negative or past any memory's size"));
  }
  // An allocator (LibTorch's at::empty, the host's) throws when memory runs out; the error goes
  // to every rank through AgreeBeforeDataPlane instead of ending this process.
  try {
    return AllocateOutputOrThrow(entry, s, bytes);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tensor '", entry.request.name, "': allocating its output of ", bytes, " bytes (",
        DataTypeName(entry.request.dtype), s.DebugString(), ") failed: ", e.what()));
  }
}

absl::StatusOr<TensorRef> Engine::AllocateOutputOrThrow(Entry& entry, const TensorShape& s,
                                                        int64_t bytes) {
  if (entry.allocator) {
    HVX_ASSIGN_OR_RETURN(TensorRef t,
                         entry.allocator(entry.request.dtype, s, entry.request.device));
    if (t.num_elements() != s.num_elements() || t.dtype() != entry.request.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", entry.request.name, "': the output allocator returned ", t.DebugString(),
          " for ", DataTypeName(entry.request.dtype), s.DebugString()));
    }
    entry.state->output = t;
    return t;
  }
  if (!entry.request.device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", entry.request.name, "' is on ", entry.request.device.ToString(),
                     ": pass an OutputAllocator for non-CPU outputs"));
  }
  auto& buf = entry.state->owned_output;
  buf.assign(std::max<size_t>(1, static_cast<size_t>(bytes)), 0);
  entry.state->output = TensorRef(entry.request.dtype, s, buf.data());
  return entry.state->output;
}

absl::StatusOr<Engine::PreparedOutput> Engine::PrepareOutput(SetState& set, Entry& entry,
                                                             const std::vector<int64_t>& shape) {
  // The plane first, on every rank: a factory may run collectives of its own.
  absl::StatusOr<DataPlane*> plane = PlaneFor(set, entry.request.device);
  absl::StatusOr<TensorRef> output = AllocateOutput(entry, shape);
  HVX_RETURN_IF_ERROR(
      AgreeBeforeDataPlane(set, entry.request.name, plane.ok() ? output.status() : plane.status()));
  return PreparedOutput{*plane, *output};
}

absl::Status Engine::AgreeBeforeDataPlane(SetState& set, const std::string& name,
                                          const absl::Status& local) {
  std::vector<uint64_t> ok = {local.ok() ? ~uint64_t{0} : 0};
  HVX_RETURN_IF_ERROR(Vote(set, &ok));
  if (ok[0] != 0) return absl::OkStatus();
  return AgreeOnEveryRank(*set.comm, local, [&](int r, absl::string_view why) {
    const int global = set.global_ranks[r];
    return absl::StrCat("tensor '", name, "': rank ", global, " (host ", hosts_[global],
                        ") could not take part: ", why);
  });
}

void Engine::CompleteEntry(SetState& set, const std::string& name, absl::Status status) {
  auto it = set.pending.find(name);
  if (it == set.pending.end()) return;
  std::shared_ptr<internal::OpState> state = it->second.state;
  if (flight_.enabled()) {
    flight_.Finish(it->second.flight_slot, it->second.flight_id, static_cast<int>(status.code()),
                   Std(status.message()), FlightNowNs());
  }
  set.pending.erase(it);
  set.order.erase(std::find(set.order.begin(), set.order.end(), name));
  {
    std::lock_guard<std::mutex> lock(mu_);
    set.inflight.erase(name);
  }
  state->Complete(std::move(status));
}

Device Engine::LocalDevice(const SetState& set, const Response& r,
                           const std::vector<Entry*>& entries) const {
  if (r.device_type == DeviceType::kCpu) return Device::Cpu();
  for (const Entry* e : entries) {
    if (e != nullptr) return e->request.device;
  }
  // Joined: no tensor of this rank in the response.
  auto it = set.own_device.find(r.device_type);
  return it != set.own_device.end() ? it->second : Device{r.device_type, topology_.local_rank};
}

DataPlaneContext Engine::ContextFor(SetState& set, const Device& device) const {
  DataPlaneContext ctx;
  ctx.comm = set.comm;
  ctx.global_ranks = set.global_ranks;
  ctx.hosts = HostsOf(set.global_ranks);
  ctx.global_rank = topology_.rank;
  ctx.local_rank = topology_.local_rank;
  ctx.local_size = topology_.local_size;
  ctx.cross_rank = topology_.cross_rank;
  ctx.cross_size = topology_.cross_size;
  ctx.device = device;
  ctx.options = &options_;
  return ctx;
}

absl::StatusOr<DataPlane*> Engine::PlaneFor(SetState& set, const Device& device) {
  if (device.is_cpu() && set.cpu_plane != nullptr) return set.cpu_plane;
  auto it = set.device_planes.find(device.type);
  if (it != set.device_planes.end()) return it->second.get();
  if (device.is_cpu()) return CpuPlaneFor(set, device);
  DataPlaneFactory factory = FindDataPlane(device.type);
  if (!factory) {
    return absl::FailedPreconditionError(
        absl::StrCat("no data plane is linked for ", device.ToString(),
                     " tensors; link the GPU backend (//hvx/nccl, built with --config=cuda) or use "
                     "CPU tensors"));
  }
  HVX_ASSIGN_OR_RETURN(std::unique_ptr<DataPlane> plane, factory(ContextFor(set, device)));
  DataPlane* raw = plane.get();
  set.device_planes[device.type] = std::move(plane);
  return raw;
}

absl::StatusOr<DataPlane*> Engine::CpuPlaneFor(SetState& set, const Device& device) {
  DataPlane* own = &set.comm->cpu();
  CpuPlaneFactory factory = FindCpuPlane("shm").plane;
  if (options_.cpu_plane == "mpi" || (!factory && options_.cpu_plane == "auto")) {
    set.cpu_plane = own;
    return own;
  }
  if (!factory) {
    return absl::FailedPreconditionError(
        "HVX_CPU_PLANE=shm, but no shared-memory CPU plane is linked: link //hvx/shm:cpu_plane "
        "(//hvx/mpi:hvx does) or use HVX_CPU_PLANE=mpi");
  }
  HVX_ASSIGN_OR_RETURN(std::unique_ptr<DataPlane> plane, factory(ContextFor(set, device), own));
  set.cpu_plane = plane.get();
  set.device_planes[device.type] = std::move(plane);
  return set.cpu_plane;
}

absl::Status Engine::Vote(SetState& set, std::vector<uint64_t>* bits) {
  if (!set.vote_made) {
    // Collective: every member votes at the same points, its first vote included.
    set.vote_made = true;
    HostVoteFactory factory = FindCpuPlane("shm").vote;
    if (options_.cpu_plane != "mpi" && factory) {
      HVX_ASSIGN_OR_RETURN(set.vote, factory(ContextFor(set, Device::Cpu())));
    }
  }
  // Every member passes the same number of words, so all take the same path.
  if (set.vote != nullptr && bits->size() <= set.vote->MaxWords()) return set.vote->And(bits);
  return set.comm->BitwiseAnd(bits);
}

}  // namespace hvx
