// The engine's submission side: what user threads call. Each call makes one OpState and its
// entries, checks what one rank can check alone (Submit), and queues the entries for the
// background thread's next cycle (cycle.cc). Lifecycle and process-set table: engine.cc.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/clock.h"
#include "hvx/common/status.h"
#include "hvx/core/engine.h"

namespace hvx {

std::shared_ptr<internal::OpState> Engine::NewState(const std::string& name, int parts) {
  auto st = std::make_shared<internal::OpState>();
  st->name = name;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->parts_left = parts;
  }
  std::lock_guard<std::mutex> lock(mu_);
  st->id = next_id_++;
  return st;
}

Handle Engine::Failed(const std::string& name, absl::Status status) {
  auto st = NewState(name, 1);
  st->Reject(std::move(status));
  return Handle(st);
}

Request Engine::BaseRequest(OpType type, const std::string& name, const TensorRef& t) const {
  Request r;
  r.type = type;
  r.name = name;
  r.dtype = t.dtype();
  r.shape = t.shape().dims();
  r.device = t.device();
  return r;
}

Handle Engine::Submit(int set_id, std::vector<Entry> entries,
                      std::shared_ptr<internal::OpState> state) {
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_requested_ || stopped_.load()) {
      error = StopReasonLocked();
    } else if (set_id < 0 || set_id >= static_cast<int>(sets_.size())) {
      error = absl::InvalidArgumentError(
          absl::StrCat("tensor '", state->name, "': unknown process set id ", set_id));
    } else {
      SetState& set = *sets_[set_id];
      if (set.comm == nullptr) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "tensor '", state->name, "': rank ", topology_.rank, " is not a member of process set ",
            set_id, " (ranks ", absl::StrJoin(set.global_ranks, ","), ")"));
      }
      for (const Entry& e : entries) {
        if (!error.ok()) break;
        if (set.inflight.count(e.request.name)) {
          error = absl::InvalidArgumentError(
              absl::StrCat("tensor '", e.request.name,
                           "': another collective with this name is still in flight on this rank; "
                           "names must be unique "
                           "among pending ops (wait for the first, or choose another name)"));
        }
        if (error.ok() && NumElements(e.request.shape) < 0) {
          error = absl::InvalidArgumentError(absl::StrCat("tensor '", e.request.name,
                                                          "': negative dimension in ",
                                                          ShapeString(e.request.shape)));
        }
      }
      if (error.ok()) {
        const int my_rank = set.comm->rank();
        for (Entry& e : entries) {
          e.request.rank = my_rank;
          e.state = state;
          e.submitted = MonotonicNow();
          ++set.submitted;
          if (flight_.enabled()) {
            const int64_t bytes =
                NumElements(e.request.shape) * static_cast<int64_t>(DataTypeSize(e.request.dtype));
            const absl::string_view op = OpTypeName(e.request.type);
            const absl::string_view dtype = DataTypeName(e.request.dtype);
            FlightRing::Op record;
            record.seq = set.submitted;
            record.set_id = set_id;
            record.op = std::string_view(op.data(), op.size());
            record.dtype = std::string_view(dtype.data(), dtype.size());
            record.bytes = bytes;
            record.name = e.request.name;
            record.now_ns = absl::ToUnixNanos(e.submitted);
            record.caller = internal::ThreadCaller();
            const FlightRing::Ticket ticket = flight_.Submitted(record);
            e.flight_slot = ticket.slot;
            e.flight_id = ticket.id;
          }
          set.inflight.insert(e.request.name);
          set.incoming.push_back(std::move(e));
        }
        cv_.notify_all();
      }
    }
  }
  if (!error.ok()) state->Reject(error);
  return Handle(state);
}

Handle Engine::Allreduce(std::string name, TensorRef input, TensorRef output,
                         const AllreduceOptions& o) {
  return GroupedAllreduce(std::move(name), {input}, {output}, o);
}

Handle Engine::GroupedAllreduce(std::string name, std::vector<TensorRef> inputs,
                                std::vector<TensorRef> outputs, const AllreduceOptions& o) {
  if (inputs.size() != outputs.size() || inputs.empty()) {
    return Failed(
        name, absl::InvalidArgumentError(absl::StrCat("allreduce '", name, "': ", inputs.size(),
                                                      " inputs but ", outputs.size(), " outputs")));
  }
  const bool grouped = inputs.size() > 1;
  std::vector<Entry> entries;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string n = grouped ? absl::StrCat(name, ".", i) : name;
    // The device too: a plane writes the output where the input lives (a CPU input with a CUDA
    // output had the CPU write through a device pointer).
    if (inputs[i].num_elements() != outputs[i].num_elements() ||
        inputs[i].dtype() != outputs[i].dtype() || inputs[i].device() != outputs[i].device()) {
      return Failed(name, absl::InvalidArgumentError(
                              absl::StrCat("allreduce '", n, "': output ", outputs[i].DebugString(),
                                           " does not match input ", inputs[i].DebugString())));
    }
    Entry e;
    e.request = BaseRequest(OpType::kAllreduce, n, inputs[i]);
    e.request.reduce_op = o.op;
    e.request.prescale = o.prescale_factor;
    e.request.postscale = o.postscale_factor;
    e.input = inputs[i];
    e.output = outputs[i];
    entries.push_back(std::move(e));
  }
  return Submit(o.process_set.id(), std::move(entries),
                NewState(name, static_cast<int>(inputs.size())));
}

Handle Engine::Allgather(std::string name, TensorRef input, const CollectiveOptions& o) {
  Entry e;
  e.request = BaseRequest(OpType::kAllgather, name, input);
  e.input = input;
  e.allocator = o.allocator;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return Submit(o.process_set.id(), std::move(v), NewState(name, 1));
}

Handle Engine::Broadcast(std::string name, TensorRef tensor, int root_rank,
                         const CollectiveOptions& o) {
  Entry e;
  e.request = BaseRequest(OpType::kBroadcast, name, tensor);
  e.request.root = root_rank;
  e.input = tensor;
  e.output = tensor;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return Submit(o.process_set.id(), std::move(v), NewState(name, 1));
}

Handle Engine::Alltoall(std::string name, TensorRef input, std::vector<int64_t> splits,
                        const CollectiveOptions& o) {
  Entry e;
  e.request = BaseRequest(OpType::kAlltoall, name, input);
  e.request.splits = std::move(splits);
  e.input = input;
  e.allocator = o.allocator;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return Submit(o.process_set.id(), std::move(v), NewState(name, 1));
}

Handle Engine::ReduceScatter(std::string name, TensorRef input, const ReduceScatterOptions& o) {
  Entry e;
  e.request = BaseRequest(OpType::kReduceScatter, name, input);
  e.request.reduce_op = o.op;
  e.request.prescale = o.prescale_factor;
  e.request.postscale = o.postscale_factor;
  e.input = input;
  e.allocator = o.allocator;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return Submit(o.process_set.id(), std::move(v), NewState(name, 1));
}

Handle Engine::Barrier(const ProcessSet& set) {
  Entry e;
  e.request.type = OpType::kBarrier;
  e.request.name = "barrier";
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return Submit(set.id(), std::move(v), NewState("barrier", 1));
}

Handle Engine::Join() {
  Entry e;
  e.request.type = OpType::kJoin;
  e.request.name = "join";
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return Submit(0, std::move(v), NewState("join", 1));
}

absl::StatusOr<ProcessSet> Engine::AddProcessSet(std::vector<int> ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("AddProcessSet: empty rank list");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= topology_.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AddProcessSet: rank ", sorted[i], " is outside the job of size ", topology_.size));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("AddProcessSet: rank ", sorted[i], " is listed twice"));
    }
  }
  Entry e;
  e.request.type = OpType::kAddProcessSet;
  e.request.name = absl::StrCat("process_set.add.", absl::StrJoin(sorted, ","));
  e.request.splits.assign(sorted.begin(), sorted.end());
  std::vector<Entry> v;
  v.push_back(std::move(e));
  auto state = NewState(v[0].request.name, 1);
  Handle h = Submit(0, std::move(v), state);
  HVX_RETURN_IF_ERROR(h.state()->Wait());
  return ProcessSet(state->process_set_id);
}

std::vector<int> Engine::ProcessSetRanks(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || id >= static_cast<int>(sets_.size())) return {};
  return sets_[id]->global_ranks;
}

}  // namespace hvx
