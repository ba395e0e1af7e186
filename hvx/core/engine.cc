#include "hvx/core/engine.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/cluster.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/agreement.h"

namespace hvx {
namespace internal {
namespace {

// A status that shares no heap state with `s`. absl::Status shares its message between copies
// through a reference count inside the system Abseil library, which ThreadSanitizer cannot see;
// statuses that cross threads are therefore copied deeply.
absl::Status Isolated(const absl::Status& s) {
  return s.ok() ? absl::OkStatus() : absl::Status(s.code(), std::string(s.message()));
}

}  // namespace

void OpState::Complete(absl::Status s) {
  std::lock_guard<std::mutex> lock(mu);
  if (status.ok() && !s.ok()) status = Isolated(s);
  if (--parts_left == 0) {
    finished.store(true, std::memory_order_release);
    cv.notify_all();
  }
}

bool OpState::done() const { return finished.load(std::memory_order_acquire); }

absl::Status OpState::Wait() const {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [this] { return finished.load(std::memory_order_acquire); });
  return Isolated(status);
}

}  // namespace internal

namespace {

constexpr uint64_t kFlagUncached = 1;
constexpr uint64_t kFlagJoined = 2;
constexpr uint64_t kFlagShutdown = 4;

absl::Status ShutDownError() {
  return absl::FailedPreconditionError(
      "hvx has been shut down: this rank or another one called hvx::Shutdown (or failed), so "
      "collectives "
      "can no longer run");
}

std::string ShapeJson(const TensorRef& t) {
  return absl::StrCat("{\"dtype\":\"", DataTypeName(t.dtype()), "\",\"shape\":\"",
                      t.shape().DebugString(), "\"}");
}

}  // namespace

struct Engine::SetState {
  int id = 0;
  std::vector<int> global_ranks;
  std::unique_ptr<Communicator> owned_comm;  // null for the world set and for non-members
  Communicator* comm = nullptr;              // null when this rank is not a member
  std::unique_ptr<ResponseCache> cache;
  std::unique_ptr<Coordinator> coordinator;
  std::map<DeviceType, std::unique_ptr<DataPlane>> device_planes;
  // This rank's device of each non-CPU type: the one its first tensor of that type was on.
  std::map<DeviceType, Device> own_device;

  // Guarded by Engine::mu_.
  std::deque<Entry> incoming;
  std::set<std::string> inflight;

  // Background thread only.
  std::map<std::string, Entry> pending;
  std::vector<std::string> order;  // pending names by submission
  bool eviction_warned = false;

  int rank() const { return comm ? comm->rank() : -1; }
  int size() const { return static_cast<int>(global_ranks.size()); }
};

// Marks activities of every tensor of one response in the timeline.
class Engine::Recorder : public ActivityRecorder {
 public:
  Recorder(Timeline* timeline, const std::vector<std::string>* names)
      : timeline_(timeline), names_(names) {}
  void Start(absl::string_view activity) override {
    if (timeline_) {
      for (const auto& n : *names_) timeline_->ActivityStart(n, activity);
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
};

Engine::Engine(const InitOptions& options, std::unique_ptr<Transport> transport,
               EngineOptions engine_options)
    : options_(options),
      engine_options_(std::move(engine_options)),
      transport_(std::move(transport)) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(const InitOptions& options,
                                                      std::unique_ptr<Transport> transport,
                                                      EngineOptions engine_options) {
  if (transport == nullptr) return absl::InvalidArgumentError("Engine::Start: no transport");
  std::unique_ptr<Engine> engine(
      new Engine(options, std::move(transport), std::move(engine_options)));
  engine->thread_ = std::thread([e = engine.get()] { e->ThreadMain(); });
  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(engine->mu_);
    // The transport's start (MPI_Init) waits for every rank and has no deadline of its own.
    const auto started = [e = engine.get()]()
                             ABSL_NO_THREAD_SAFETY_ANALYSIS { return e->setup_done_; };
    if (!engine->cv_.wait_for(
            lock, absl::ToChronoMilliseconds(absl::Seconds(options.collective_timeout_s)),
            started)) {
      lock.unlock();
      // The background thread is still inside the transport's start and keeps the engine: both are
      // left to the process's exit.
      engine->thread_.detach();
      engine.release();
      return absl::DeadlineExceededError(absl::StrCat(
          "hvx::Init: the transport did not start within ", options.collective_timeout_s,
          " s (HVX_COLLECTIVE_TIMEOUT_S): a rank of the job did not join it (failed, froze or "
          "never started)"));
    }
    status = engine->setup_status_.ok()
                 ? absl::OkStatus()
                 : absl::Status(engine->setup_status_.code(),
                                std::string(engine->setup_status_.message()));
  }
  if (!status.ok()) {
    engine->thread_.join();
    return status;
  }
  return engine;
}

Engine::~Engine() {
  Shutdown().IgnoreError();
  if (thread_.joinable()) thread_.join();
}

absl::Status Engine::Setup() {
  HVX_ASSIGN_OR_RETURN(world_, transport_->Start(options_));
  Failpoint("init");
  const std::string host = engine_options_.hostname.empty() ? HostName() : engine_options_.hostname;
  HVX_RETURN_IF_ERROR(world_->Allgather(host, &hosts_));
  topology_ = ComputeTopology(world_->rank(), hosts_);
  SetLogRank(topology_.rank);

  // Local checks, then agreement: if any rank fails, every rank fails with that rank's message.
  const Environment& env = options_.environment ? *options_.environment : Environment::Process();
  absl::Status local = CheckLauncherEnvironment(topology_, env);
  const int gpus = CountVisibleGpus(env, options_.nvidia_gpus_dir);
  if (local.ok() && topology_.size == 1) {
    absl::Status single = CheckSingleton(
        env, gpus,
        engine_options_.command_line.empty() ? CurrentCommandLine() : engine_options_.command_line);
    if (!single.ok() && options_.allow_singleton) {
      HVX_LOG(WARNING) << single.message() << " (continuing: singleton allowed)";
    } else {
      local = single;
    }
  }
  // Backend checks are collective: every rank runs all of them, whatever the checks above found.
  for (const auto& [name, check] : RegisteredInitChecks()) {
    InitCheckContext ctx{world_.get(),         topology_.rank, topology_.size, topology_.local_rank,
                         topology_.local_size, topology_.host, gpus,           &env};
    absl::Status s = check(ctx);
    if (local.ok() && !s.ok()) local = Annotate(s, absl::StrCat("Init check ", name));
  }
  if (local.ok() && topology_.rank == 0 && !options_.timeline_path.empty()) {
    auto t = Timeline::Open(options_.timeline_path);
    if (t.ok()) {
      timeline_ = std::move(*t);
    } else {
      local = t.status();
    }
  }
  // One exchange carries each rank's verdict and the settings every rank must share.
  std::vector<std::string> exchanged;
  HVX_RETURN_IF_ERROR(world_->Allgather(
      EncodeSettings({{"verdict", local.ok() ? std::string() : std::string(local.message())},
                      {"settings", EncodeSettings(SettingsThatMustAgree())}}),
      &exchanged));
  std::vector<std::string> settings;
  for (int r = 0; r < static_cast<int>(exchanged.size()); ++r) {
    HVX_ASSIGN_OR_RETURN(Settings got, DecodeSettings(exchanged[r]));
    if (got.size() != 2) return absl::InternalError("Init's exchange is corrupt");
    settings.push_back(got[1].second);
    if (got[0].second.empty()) continue;
    if (r == topology_.rank) return local;
    return absl::FailedPreconditionError(
        absl::StrCat("hvx::Init failed on rank ", r, ": ", got[0].second));
  }
  HVX_RETURN_IF_ERROR(Annotate(CompareSettings(settings), "hvx::Init"));

  {
    auto world = std::make_unique<SetState>();
    world->id = 0;
    for (int r = 0; r < topology_.size; ++r) world->global_ranks.push_back(r);
    world->comm = world_.get();
    world->cache = std::make_unique<ResponseCache>(options_.cache_capacity);
    if (topology_.rank == 0) {
      world->coordinator = std::make_unique<Coordinator>(
          topology_.size,
          CoordinatorOptions{options_.fusion_threshold_bytes, options_.stall_check_time_s,
                             options_.stall_shutdown_time_s, world->global_ranks, timeline_.get(),
                             hosts_});
    }
    std::lock_guard<std::mutex> lock(mu_);
    sets_.push_back(std::move(world));
  }
  for (const auto& ranks : options_.process_sets) {
    int id;
    HVX_RETURN_IF_ERROR(AddSet(ranks, &id));
  }
  HVX_LOG(INFO) << "hvx initialized: rank " << topology_.rank << "/" << topology_.size
                << ", local rank " << topology_.local_rank << "/" << topology_.local_size
                << ", cross rank " << topology_.cross_rank << "/" << topology_.cross_size
                << ", host " << topology_.host << ", device "
                << (gpus > 0 ? absl::StrCat("cpu + ", gpus, " visible GPU(s)") : std::string("cpu"))
                << ", " << transport_->Describe();
  return absl::OkStatus();
}

std::vector<std::string> Engine::HostsOf(const std::vector<int>& ranks) const {
  std::vector<std::string> hosts;
  for (int r : ranks) hosts.push_back(hosts_[r]);
  return hosts;
}

Settings Engine::SettingsThatMustAgree() const {
  std::vector<std::string> sets;
  for (const auto& ranks : options_.process_sets)
    sets.push_back(absl::StrCat("[", absl::StrJoin(ranks, ","), "]"));
  return {
      {"hvx build", absl::StrCat("wire format ", kWireFormatVersion, ", compiler ", __VERSION__,
                                 ", GPU data plane ",
                                 FindDataPlane(DeviceType::kCuda) ? "linked" : "not linked")},
      {"transport", transport_->Describe()},
      {"HVX_FUSION_THRESHOLD", FormatBytes(options_.fusion_threshold_bytes)},
      {"HVX_CACHE_CAPACITY", absl::StrCat(options_.cache_capacity)},
      {"HVX_FIXED_REDUCTION_ORDER", options_.fixed_reduction_order ? "1" : "0"},
      {"HVX_COLLECTIVE_TIMEOUT_S", absl::StrCat(options_.collective_timeout_s)},
      {"HVX_HIERARCHICAL_ALLREDUCE", options_.hierarchical_allreduce ? "1" : "0"},
      {"HVX_NCCL_HALF_IN_FLOAT32", options_.nccl_half_in_float32 ? "1" : "0"},
      {"process sets", absl::StrJoin(sets, " ")},
  };
}

absl::Status Engine::AddSet(std::vector<int> ranks, int* id) {
  std::sort(ranks.begin(), ranks.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& s : sets_) {
      if (s->global_ranks == ranks) {
        *id = s->id;
        return absl::OkStatus();
      }
    }
  }
  auto set = std::make_unique<SetState>();
  set->global_ranks = ranks;
  HVX_ASSIGN_OR_RETURN(set->owned_comm, world_->Subset(ranks));
  set->comm = set->owned_comm.get();
  set->cache = std::make_unique<ResponseCache>(options_.cache_capacity);
  if (set->comm != nullptr && set->comm->rank() == 0) {
    set->coordinator = std::make_unique<Coordinator>(
        set->size(),
        CoordinatorOptions{options_.fusion_threshold_bytes, options_.stall_check_time_s,
                           options_.stall_shutdown_time_s, ranks, nullptr, HostsOf(ranks)});
  }
  std::lock_guard<std::mutex> lock(mu_);
  set->id = static_cast<int>(sets_.size());
  *id = set->id;
  sets_.push_back(std::move(set));
  return absl::OkStatus();
}

void Engine::ThreadMain() {
  // The transport's short sleeps between tests of a pending collective (hvx/mpi WaitPolitely)
  // then last what they ask for, not the default 50 us of slack more.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  absl::Status status = Setup();
  {
    std::lock_guard<std::mutex> lock(mu_);
    setup_status_ = status;
    setup_done_ = true;
    cv_.notify_all();
  }
  if (status.ok()) {
    absl::Time last_cycle = absl::Now();
    bool running = true;
    while (running) {
      std::vector<SetState*> sets;
      {
        std::unique_lock<std::mutex> lock(mu_);
        auto has_work = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          if (shutdown_requested_) return true;
          for (const auto& s : sets_) {
            if (!s->incoming.empty()) return true;
          }
          return false;
        };
        const absl::Time deadline = last_cycle + absl::Milliseconds(options_.cycle_time_ms);
        cv_.wait_until(lock, absl::ToChronoTime(deadline), has_work);
        for (const auto& s : sets_) {
          if (s->comm != nullptr) sets.push_back(s.get());
        }
      }
      last_cycle = absl::Now();
      for (SetState* set : sets) {
        if (!RunCycle(*set)) {
          running = false;
          break;
        }
      }
    }
    stopped_.store(true);
    FailEverything(StopReason());
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : sets_) {
        s->device_planes.clear();
        s->owned_comm.reset();
        s->comm = nullptr;
      }
    }
    world_.reset();
    timeline_.reset();
  } else {
    world_.reset();
  }
  stopped_.store(true);
  Failpoint("shutdown");
  absl::Status fin = transport_->Finalize(absl::Now() + absl::Seconds(options_.shutdown_timeout_s));
  if (!fin.ok()) HVX_LOG(ERROR) << "transport finalization: " << fin;
  std::lock_guard<std::mutex> lock(mu_);
  finalize_status_ = fin;
  finalized_ = true;
  cv_.notify_all();
}

void Engine::FailEverything(absl::Status status) {
  std::vector<std::shared_ptr<internal::OpState>> states;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : sets_) {
      for (auto& e : s->incoming) states.push_back(e.state);
      for (auto& [name, e] : s->pending) states.push_back(e.state);
      s->incoming.clear();
      s->pending.clear();
      s->order.clear();
      s->inflight.clear();
    }
  }
  for (auto& st : states) st->Complete(status);
}

absl::Status Engine::Shutdown() {
  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!setup_done_ || !setup_status_.ok()) return absl::OkStatus();
    shutdown_requested_ = true;
    cv_.notify_all();
    // The transport gives up at shutdown_timeout_s itself; the margin lets its error arrive.
    const absl::Duration timeout = absl::Seconds(options_.shutdown_timeout_s);
    const absl::Duration bound =
        timeout + std::min(timeout, absl::Seconds(1)) + absl::Milliseconds(options_.cycle_time_ms);
    if (!cv_.wait_for(lock, absl::ToChronoMilliseconds(bound) + std::chrono::milliseconds(1),
                      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return finalized_; })) {
      HVX_LOG(ERROR) << "hvx::Shutdown: the transport did not finish within "
                     << options_.shutdown_timeout_s << " s (HVX_SHUTDOWN_TIMEOUT_S)";
      if (engine_options_.exit_on_finalize_timeout) {
        HVX_LOG(ERROR) << "exiting with status " << kShutdownTimeoutExitCode;
        std::fflush(nullptr);
        _exit(kShutdownTimeoutExitCode);
      }
      return absl::DeadlineExceededError("hvx::Shutdown: transport finalization timed out");
    }
    status = finalize_status_;
  }
  if (thread_.joinable()) thread_.join();
  return status;
}

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
  st->Complete(std::move(status));
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
          e.submitted = absl::Now();
          set.inflight.insert(e.request.name);
          set.incoming.push_back(std::move(e));
        }
        cv_.notify_all();
      }
    }
  }
  if (!error.ok()) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->status = absl::Status(error.code(), std::string(error.message()));
    state->parts_left = 0;
    state->finished.store(true, std::memory_order_release);
    state->cv.notify_all();
  }
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
    if (inputs[i].num_elements() != outputs[i].num_elements() ||
        inputs[i].dtype() != outputs[i].dtype()) {
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

bool Engine::RunCycle(SetState& set) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!set.incoming.empty()) {
      Entry e = std::move(set.incoming.front());
      set.incoming.pop_front();
      set.order.push_back(e.request.name);
      if (!e.request.device.is_cpu())
        set.own_device.emplace(e.request.device.type, e.request.device);
      std::string name = e.request.name;
      set.pending.emplace(std::move(name), std::move(e));
    }
  }
  bool shutdown_local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_local = shutdown_requested_;
  }
  const bool global = set.id == 0;
  const bool joined_here = global && joined_;
  const absl::Time now = absl::Now();
  std::vector<Response> cached;
  std::vector<std::string> to_send;
  bool slow = true;
  bool any_joined = joined_here;

  ResponseCache& cache = *set.cache;
  if (cache.capacity() > 0) {
    const size_t words = static_cast<size_t>(cache.capacity() + 63) / 64;
    std::vector<uint64_t> bits(2 * words + 1, 0);
    std::fill(bits.begin() + words, bits.end(), ~uint64_t{0});
    uint64_t flags = 0;
    for (const std::string& name : set.order) {
      Entry& e = set.pending.at(name);
      if (e.sent) continue;
      int bit = -1;
      auto lookup = cache.Find(e.request, &bit);
      // A tensor on another device than this rank's own must reach the coordinator, which fails it
      // on every rank: invalidate its entry so that every rank sends it.
      if (lookup == ResponseCache::Lookup::kHit && !OnOwnDevice(set, e.request))
        lookup = ResponseCache::Lookup::kInvalid;
      if (lookup == ResponseCache::Lookup::kHit) {
        const bool stalled = options_.stall_check_time_s > 0 &&
                             now - e.submitted > absl::Seconds(options_.stall_check_time_s);
        if (stalled) {
          bits[words + bit / 64] &= ~(uint64_t{1} << (bit % 64));
        } else {
          bits[bit / 64] |= uint64_t{1} << (bit % 64);
        }
      } else if (lookup == ResponseCache::Lookup::kInvalid) {
        bits[words + bit / 64] &= ~(uint64_t{1} << (bit % 64));
      } else {
        flags |= kFlagUncached;
      }
    }
    if (joined_here) flags |= kFlagJoined;
    if (shutdown_local && global) flags |= kFlagShutdown;
    bits[2 * words] = ~flags;
    absl::Status s = set.comm->BitwiseAnd(&bits);
    if (!s.ok()) return Stop(Annotate(s, absl::StrCat("negotiation on process set ", set.id)));
    const uint64_t all_flags = ~bits[2 * words];
    any_joined = (all_flags & kFlagJoined) != 0;
    bool any_invalid = false;
    for (size_t w = 0; w < words; ++w) {
      uint64_t invalid = ~bits[words + w];
      while (invalid) {
        const int b = __builtin_ctzll(invalid);
        invalid &= invalid - 1;
        any_invalid = true;
        cache.Erase(static_cast<int>(w * 64 + b));
      }
    }
    if (!any_joined) {
      for (size_t w = 0; w < words; ++w) {
        uint64_t common = bits[w] & bits[words + w];
        while (common) {
          const int b = __builtin_ctzll(common);
          common &= common - 1;
          const int bit = static_cast<int>(w * 64 + b);
          if (!cache.InUse(bit)) continue;
          cached.push_back(cache.Get(bit));
          set.pending.at(cached.back().names[0]).sent = true;
        }
      }
    }
    slow = any_invalid || (all_flags & (kFlagUncached | kFlagJoined | kFlagShutdown)) != 0;
  }

  ResponseList slow_list;
  if (slow) {
    for (const std::string& name : set.order) {
      Entry& e = set.pending.at(name);
      if (e.sent) continue;
      int bit;
      if (!any_joined && cache.capacity() > 0 &&
          cache.Find(e.request, &bit) == ResponseCache::Lookup::kHit) {
        continue;  // agreed through the bit vector once every rank has it
      }
      e.sent = true;
      to_send.push_back(name);
    }
    auto list = SlowPath(set, to_send, joined_here);
    if (!list.ok())
      return Stop(Annotate(list.status(), absl::StrCat("negotiation on process set ", set.id)));
    slow_list = std::move(*list);
  }

  for (const Response& r : FuseResponses(std::move(cached), options_.fusion_threshold_bytes)) {
    if (absl::Status s = Execute(set, r); !s.ok()) return Stop(s);
  }
  for (const Response& r : slow_list.responses) {
    if (absl::Status s = Execute(set, r); !s.ok()) return Stop(s);
  }
  if (slow_list.shutdown) return false;
  return true;
}

bool Engine::Stop(absl::Status cause) {
  HVX_LOG(ERROR) << "hvx stops: " << cause;
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_cause_.ok()) stop_cause_ = std::move(cause);
  return false;
}

absl::Status Engine::StopReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return StopReasonLocked();
}

absl::Status Engine::StopReasonLocked() const {
  if (stop_cause_.ok()) return ShutDownError();
  return absl::Status(
      stop_cause_.code(),
      absl::StrCat("hvx has stopped, so collectives can no longer run: ", stop_cause_.message()));
}

absl::StatusOr<ResponseList> Engine::SlowPath(SetState& set,
                                              const std::vector<std::string>& to_send,
                                              bool joined) {
  RequestList mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine.shutdown = shutdown_requested_ && set.id == 0;
  }
  for (const std::string& name : to_send) {
    const Request& r = set.pending.at(name).request;
    if (r.type == OpType::kJoin) joined_ = true;
    mine.requests.push_back(r);
  }
  mine.joined = joined || joined_;
  Failpoint("negotiation");
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(set.comm->Gather(EncodeRequestList(mine), &all));
  std::string out;
  if (set.comm->rank() == 0) {
    const absl::Time now = absl::Now();
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      HVX_ASSIGN_OR_RETURN(RequestList list, DecodeRequestList(all[r]));
      set.coordinator->Add(r, list, now);
    }
    out = EncodeResponseList(set.coordinator->Build(now));
  }
  HVX_RETURN_IF_ERROR(set.comm->Broadcast(&out));
  return DecodeResponseList(out);
}

bool Engine::OnOwnDevice(const SetState& set, const Request& request) {
  if (request.device.is_cpu()) return true;
  auto it = set.own_device.find(request.device.type);
  return it == set.own_device.end() || it->second == request.device;
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

absl::StatusOr<DataPlane*> Engine::PlaneFor(SetState& set, const Device& device) {
  if (device.is_cpu()) return &set.comm->cpu();
  auto it = set.device_planes.find(device.type);
  if (it != set.device_planes.end()) return it->second.get();
  DataPlaneFactory factory = FindDataPlane(device.type);
  if (!factory) {
    return absl::FailedPreconditionError(
        absl::StrCat("no data plane is linked for ", device.ToString(),
                     " tensors; link the GPU backend (//hvx/nccl, built with --config=cuda) or use "
                     "CPU tensors"));
  }
  DataPlaneContext ctx;
  ctx.comm = set.comm;
  ctx.global_ranks = set.global_ranks;
  ctx.global_rank = topology_.rank;
  ctx.local_rank = topology_.local_rank;
  ctx.local_size = topology_.local_size;
  ctx.cross_rank = topology_.cross_rank;
  ctx.cross_size = topology_.cross_size;
  ctx.device = device;
  ctx.options = &options_;
  HVX_ASSIGN_OR_RETURN(std::unique_ptr<DataPlane> plane, factory(ctx));
  DataPlane* raw = plane.get();
  set.device_planes[device.type] = std::move(plane);
  return raw;
}

absl::StatusOr<TensorRef> Engine::AllocateOutput(Entry& entry, const std::vector<int64_t>& shape) {
  TensorShape s{std::vector<int64_t>(shape)};
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
  buf.assign(std::max<size_t>(
                 1, static_cast<size_t>(s.num_elements()) * DataTypeSize(entry.request.dtype)),
             0);
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
  HVX_RETURN_IF_ERROR(set.comm->BitwiseAnd(&ok));
  if (ok[0] != 0) return absl::OkStatus();
  std::vector<std::string> why;
  HVX_RETURN_IF_ERROR(
      set.comm->Allgather(local.ok() ? std::string() : std::string(local.message()), &why));
  for (int r = 0; r < static_cast<int>(why.size()); ++r) {
    if (why[r].empty()) continue;
    if (r == set.rank()) return local;
    const int global = set.global_ranks[r];
    return absl::FailedPreconditionError(absl::StrCat("tensor '", name, "': rank ", global,
                                                      " (host ", hosts_[global],
                                                      ") could not take part: ", why[r]));
  }
  return absl::InternalError("AgreeBeforeDataPlane: no rank failed");
}

void Engine::CompleteEntry(SetState& set, const std::string& name, absl::Status status) {
  auto it = set.pending.find(name);
  if (it == set.pending.end()) return;
  std::shared_ptr<internal::OpState> state = it->second.state;
  set.pending.erase(it);
  set.order.erase(std::find(set.order.begin(), set.order.end(), name));
  {
    std::lock_guard<std::mutex> lock(mu_);
    set.inflight.erase(name);
  }
  state->Complete(std::move(status));
}

absl::Status Engine::ExecuteAllreduce(SetState& set, const Response& r,
                                      const std::vector<Entry*>& entries) {
  AllreduceWork work;
  work.names = r.names;
  work.dtype = r.dtype;
  work.device = LocalDevice(set, r, entries);
  work.op = r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
  work.prescale_factor = r.prescale;
  work.postscale_factor = r.postscale / (r.reduce_op == ReduceOp::kAverage ? set.size() : 1);
  work.fusion_buffer_bytes = std::max(options_.fusion_threshold_bytes, r.TotalBytes());
  work.fixed_order = options_.fixed_reduction_order;
  for (size_t i = 0; i < r.names.size(); ++i) {
    Entry* e = entries[i];
    if (e != nullptr) {
      work.inputs.push_back(e->input);
      work.outputs.push_back(e->output);
    } else {
      work.inputs.push_back(
          TensorRef(r.dtype, TensorShape(std::vector<int64_t>(r.shapes[i])), nullptr, work.device));
      work.outputs.push_back(work.inputs.back());
    }
  }
  Recorder recorder(set.id == 0 ? timeline_.get() : nullptr, &work.names);
  work.activity = &recorder;
  HVX_ASSIGN_OR_RETURN(DataPlane * plane, PlaneFor(set, work.device));
  return plane->Allreduce(work);
}

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
  absl::Status status;
  Entry* e = entries.empty() ? nullptr : entries[0];
  const int me = set.rank();
  switch (r.type) {
    case OpType::kError:
      status = absl::FailedPreconditionError(r.error);
      break;
    case OpType::kAllreduce: {
      status = ExecuteAllreduce(set, r, entries);
      if (set.cache->capacity() > 0) {
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
            HVX_LOG_RANK0(WARNING)
                << "the response cache (HVX_CACHE_CAPACITY=" << set.cache->capacity()
                << ") is full and evicts entries, which slows negotiation; raise it above the "
                   "number of distinct tensor names per step";
          }
        }
      }
      break;
    }
    case OpType::kAllgather: {
      if (e == nullptr) break;
      std::vector<int64_t> shape = r.shapes[0];
      int64_t total = 0;
      for (int64_t rows : r.rows) total += rows;
      shape[0] = total;
      auto prepared = PrepareOutput(set, *e, shape);
      if (!prepared.ok()) {
        status = prepared.status();
        break;
      }
      AllgatherWork w;
      w.name = r.names[0];
      w.input = e->input;
      w.output = prepared->output;
      w.rows = r.rows;
      w.row_elements = e->input.shape().row_elements();
      Recorder rec(timeline, &r.names);
      w.activity = &rec;
      status = prepared->plane->Allgather(w);
      break;
    }
    case OpType::kBroadcast: {
      if (e == nullptr) break;
      BroadcastWork w;
      w.name = r.names[0];
      w.tensor = e->input;
      w.root = r.root;
      Recorder rec(timeline, &r.names);
      w.activity = &rec;
      auto plane = PlaneFor(set, e->request.device);
      status = plane.ok() ? (*plane)->Broadcast(w) : plane.status();
      break;
    }
    case OpType::kAlltoall: {
      if (e == nullptr) break;
      const int n = set.size();
      AlltoallWork w;
      w.name = r.names[0];
      w.input = e->input;
      w.row_elements = e->input.shape().row_elements();
      int64_t total = 0;
      for (int j = 0; j < n; ++j) {
        w.send_rows.push_back(r.rows[me * n + j]);
        w.recv_rows.push_back(r.rows[j * n + me]);
        total += w.recv_rows.back();
      }
      std::vector<int64_t> shape = e->request.shape;
      shape[0] = total;
      auto prepared = PrepareOutput(set, *e, shape);
      if (!prepared.ok()) {
        status = prepared.status();
        break;
      }
      w.output = prepared->output;
      e->state->received_splits = w.recv_rows;
      Recorder rec(timeline, &r.names);
      w.activity = &rec;
      status = prepared->plane->Alltoall(w);
      break;
    }
    case OpType::kReduceScatter: {
      if (e == nullptr) break;
      const int n = set.size();
      ReduceScatterWork w;
      w.name = r.names[0];
      w.input = e->input;
      w.row_elements = e->input.shape().row_elements();
      for (int j = 0; j < n; ++j) w.recv_rows.push_back(ReduceScatterRows(r.shapes[0][0], n, j));
      w.prescale_factor = r.prescale;
      w.postscale_factor = r.postscale / (r.reduce_op == ReduceOp::kAverage ? n : 1);
      std::vector<int64_t> shape = r.shapes[0];
      shape[0] = w.recv_rows[me];
      auto prepared = PrepareOutput(set, *e, shape);
      if (!prepared.ok()) {
        status = prepared.status();
        break;
      }
      w.output = prepared->output;
      Recorder rec(timeline, &r.names);
      w.activity = &rec;
      status = prepared->plane->ReduceScatter(w);
      break;
    }
    case OpType::kBarrier:
      break;
    case OpType::kJoin:
      joined_ = false;
      if (e != nullptr) e->state->last_joined_rank = r.last_joined_rank;
      break;
    case OpType::kAddProcessSet: {
      int id = -1;
      status = AddSet(std::vector<int>(r.rows.begin(), r.rows.end()), &id);
      if (e != nullptr) e->state->process_set_id = id;
      break;
    }
  }
  if (timeline && r.type != OpType::kError) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      timeline->OpEnd(r.names[i], entries[i] ? ShapeJson(entries[i]->input) : "");
    }
  }
  if (!status.ok() && r.type != OpType::kError) {
    HVX_LOG(DEBUG) << OpTypeName(r.type) << " failed: " << status;
  }
  for (const std::string& n : r.names) CompleteEntry(set, n, status);
  // A collective whose peers never answered leaves requests pending in the transport: nothing
  // more can run on it.
  return absl::IsDeadlineExceeded(status) ? status : absl::OkStatus();
}

}  // namespace hvx
