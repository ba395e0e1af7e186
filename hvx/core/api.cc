// The free-function facade over one process-wide Engine.
#include "hvx/core/api.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/agreement.h"
#include "hvx/core/engine.h"

namespace hvx {
namespace {

std::mutex g_mu;
// Set once by Init and never freed: handles and other threads may still reach it at exit.
Engine* g_engine ABSL_GUARDED_BY(g_mu) = nullptr;
bool g_shut_down ABSL_GUARDED_BY(g_mu) = false;

Engine* Live() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_shut_down ? nullptr : g_engine;
}

Handle NotInitialized(const std::string& name) {
  auto st = std::make_shared<internal::OpState>();
  st->name = name;
  st->Complete(absl::FailedPreconditionError(absl::StrCat(
      "tensor '", name, "': hvx is not initialized (call hvx::Init first) or was shut down")));
  return Handle(st);
}

// Registered with on_exit, which passes the status the program is exiting with. A failing exit
// ends the process at once with that status: a shutdown would end the job for every rank as if all
// was well (their pending ops fail "hvx has been shut down" and they may report that first), while
// this way the launcher sees this rank's status first and stops the others. A successful exit
// shuts down, and a shutdown that fails there must not let the process report success.
void ShutdownAtExit(int exit_status, void*) {
  Engine* engine;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_engine == nullptr || g_shut_down) return;
    g_shut_down = true;
    engine = g_engine;
  }
  if (exit_status != 0) {
    std::fflush(nullptr);
    _exit(exit_status);
  }
  absl::Status s = engine->Shutdown();
  if (!s.ok()) {
    HVX_LOG(ERROR) << "hvx shutdown at exit failed: " << s << "; exiting with status "
                   << kShutdownTimeoutExitCode << " instead of 0";
    std::fflush(nullptr);
    _exit(kShutdownTimeoutExitCode);
  }
}

}  // namespace

absl::StatusOr<InitOptions> InitOptions::FromEnv(const Environment& env) {
  InitOptions o;
  KnobReader knobs(env);
  knobs.ReadBytes("HVX_FUSION_THRESHOLD", &o.fusion_threshold_bytes);
  knobs.Read("HVX_CYCLE_TIME_MS", &o.cycle_time_ms, 0.0, 10000.0);
  knobs.Read("HVX_ENGINE_SCHED", &o.engine_sched);
  knobs.Read("HVX_CACHE_CAPACITY", &o.cache_capacity, 0, int64_t{1} << 20);
  knobs.Read("HVX_TIMELINE", &o.timeline_path);
  knobs.Read("HVX_STALL_CHECK_TIME_S", &o.stall_check_time_s, 0.0, kMaxSeconds);
  knobs.Read("HVX_STALL_SHUTDOWN_TIME_S", &o.stall_shutdown_time_s, 0.0, kMaxSeconds);
  knobs.Read("HVX_LOG_LEVEL", &o.log_level);
  knobs.Read("HVX_ALLOW_SINGLETON", &o.allow_singleton);
  knobs.Read("HVX_FIXED_REDUCTION_ORDER", &o.fixed_reduction_order);
  knobs.Read("HVX_CPU_PLANE", &o.cpu_plane);
  knobs.Read("HVX_HIERARCHICAL_ALLREDUCE", &o.hierarchical_allreduce);
  knobs.Read("HVX_NCCL_HALF_IN_FLOAT32", &o.nccl_half_in_float32);
  knobs.Read("HVX_SHUTDOWN_TIMEOUT_S", &o.shutdown_timeout_s, 0.0, kMaxSeconds);
  knobs.Read("HVX_COLLECTIVE_TIMEOUT_S", &o.collective_timeout_s, 0.0, kMaxSeconds);
  knobs.Read("HVX_FLIGHT_RECORDER", &o.flight_recorder);
  knobs.Read("HVX_STRAGGLER_CHECK_S", &o.straggler_check_s, 0.0, kMaxSeconds);
  HVX_RETURN_IF_ERROR(knobs.status());
  HVX_RETURN_IF_ERROR(o.Validate());
  if (auto sev = ParseLogSeverity(o.log_level); !sev.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HVX_LOG_LEVEL='", o.log_level, "': ", sev.status().message()));
  }
  return o;
}

absl::Status Init() {
  HVX_ASSIGN_OR_RETURN(InitOptions options, InitOptions::FromEnv(Environment::Process()));
  return Init(options);
}

absl::Status InitOptions::Validate() const {
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"HVX_SHUTDOWN_TIMEOUT_S", shutdown_timeout_s},
        {"HVX_COLLECTIVE_TIMEOUT_S", collective_timeout_s}}) {
    if (!(value > 0))
      return absl::InvalidArgumentError(
          absl::StrCat(name, "='", value, "': must be more than 0 seconds"));
    if (!(value <= kMaxSeconds))
      return absl::InvalidArgumentError(
          absl::StrCat(name, "='", value, "': must be at most ", kMaxSeconds, " seconds"));
  }
  if (engine_sched != "batch" && engine_sched != "normal") {
    return absl::InvalidArgumentError(
        absl::StrCat("HVX_ENGINE_SCHED='", engine_sched, "': must be batch or normal"));
  }
  if (cpu_plane != "auto" && cpu_plane != "shm" && cpu_plane != "mpi") {
    return absl::InvalidArgumentError(
        absl::StrCat("HVX_CPU_PLANE='", cpu_plane, "': must be auto, shm or mpi"));
  }
  if (stall_shutdown_time_s > 0 &&
      (stall_check_time_s <= 0 || stall_shutdown_time_s <= stall_check_time_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HVX_STALL_SHUTDOWN_TIME_S=", stall_shutdown_time_s,
        " needs the stall check on and must exceed it (HVX_STALL_CHECK_TIME_S=", stall_check_time_s,
        "): stalled ops fail only after they have been reported; raise it or set it to 0"));
  }
  return absl::OkStatus();
}

absl::Status Init(const InitOptions& options) {
  HVX_RETURN_IF_ERROR(options.Validate());
  if (std::string e = FailpointEnvironmentError(Environment::Process()); !e.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("hvx::Init: ", e));
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_engine != nullptr) {
    return absl::FailedPreconditionError(g_shut_down
                                             ? "hvx::Init: hvx was shut down and cannot start again"
                                             : "hvx::Init: already initialized");
  }
  HVX_ASSIGN_OR_RETURN(LogSeverity severity, ParseLogSeverity(options.log_level));
  LogOptions log = CurrentLogOptions();
  log.min_severity = severity;
  ConfigureLogging(log);
  std::string name = options.transport;
  const std::vector<std::string> registered = RegisteredTransports();
  if (name.empty()) {
    if (registered.empty()) {
      return absl::FailedPreconditionError(
          "hvx::Init: no transport is linked into this program; depend on //hvx/mpi:hvx (MPICH)");
    }
    name = registered.front();
  }
  TransportFactory factory = FindTransport(name);
  if (!factory) {
    return absl::FailedPreconditionError(
        absl::StrCat("hvx::Init: transport '", name,
                     "' is not linked (linked: ", absl::StrJoin(registered, ", "), ")"));
  }
  HVX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(options, factory()));
  g_engine = engine.release();
  static bool registered_exit = false;
  if (!registered_exit) {
    registered_exit = true;
    on_exit(ShutdownAtExit, nullptr);
  }
  return absl::OkStatus();
}

absl::Status Shutdown() {
  Engine* engine;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_engine == nullptr || g_shut_down) return absl::OkStatus();
    g_shut_down = true;
    engine = g_engine;
  }
  return engine->Shutdown();
}

bool IsInitialized() { return Live() != nullptr; }

#define HVX_TOPOLOGY_GETTER(Fn, field)   \
  int Fn() {                             \
    Engine* e = Live();                  \
    return e ? e->topology().field : -1; \
  }
HVX_TOPOLOGY_GETTER(Rank, rank)
HVX_TOPOLOGY_GETTER(Size, size)
HVX_TOPOLOGY_GETTER(LocalRank, local_rank)
HVX_TOPOLOGY_GETTER(LocalSize, local_size)
HVX_TOPOLOGY_GETTER(CrossRank, cross_rank)
HVX_TOPOLOGY_GETTER(CrossSize, cross_size)
#undef HVX_TOPOLOGY_GETTER

bool IsHomogeneous() {
  Engine* e = Live();
  return e ? e->topology().homogeneous : false;
}

std::string Host() {
  Engine* e = Live();
  return e ? e->topology().host : std::string();
}

namespace internal {
std::string& ThreadCaller() {
  thread_local std::string caller;
  return caller;
}
}  // namespace internal

void SetCallerForThisThread(std::string caller) { internal::ThreadCaller() = std::move(caller); }

StragglerStatus Stragglers() {
  Engine* e = Live();
  return e ? e->Stragglers() : StragglerStatus{};
}

std::vector<int> ProcessSet::ranks() const {
  Engine* e = Live();
  return e ? e->ProcessSetRanks(id_) : std::vector<int>{};
}

int ProcessSet::rank() const {
  const std::vector<int> r = ranks();
  const int me = Rank();
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] == me) return static_cast<int>(i);
  }
  return -1;
}

int ProcessSet::size() const { return static_cast<int>(ranks().size()); }

absl::StatusOr<ProcessSet> AddProcessSet(std::vector<int> ranks) {
  Engine* e = Live();
  if (e == nullptr) return absl::FailedPreconditionError("AddProcessSet: hvx is not initialized");
  return e->AddProcessSet(std::move(ranks));
}

uint64_t Handle::id() const { return state_ ? state_->id : 0; }

const std::string& Handle::name() const {
  static const std::string* empty = new std::string();
  return state_ ? state_->name : *empty;
}

bool Handle::rejected() const {
  return state_ != nullptr && state_->rejected.load(std::memory_order_acquire);
}

absl::Status Handle::status() const {
  if (!state_) return absl::InvalidArgumentError("invalid hvx::Handle");
  if (!state_->done()) return absl::UnavailableError("pending");
  return state_->Wait();
}

const TensorRef& Handle::output() const { return state_->output; }
const std::vector<int64_t>& Handle::received_splits() const { return state_->received_splits; }
int Handle::last_joined_rank() const { return state_ ? state_->last_joined_rank : -1; }

bool Poll(const Handle& handle) { return handle.valid() && handle.state()->done(); }

absl::Status Wait(const Handle& handle) {
  if (!handle.valid()) return absl::InvalidArgumentError("hvx::Wait: invalid handle");
  return handle.state()->Wait();
}

absl::Status WaitAll(const std::vector<Handle>& handles) {
  absl::Status first;
  for (const Handle& h : handles) {
    absl::Status s = Wait(h);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Handle Allreduce(std::string name, TensorRef input, TensorRef output,
                 const AllreduceOptions& options) {
  Engine* e = Live();
  return e ? e->Allreduce(std::move(name), input, output, options) : NotInitialized(name);
}

Handle GroupedAllreduce(std::string name, std::vector<TensorRef> inputs,
                        std::vector<TensorRef> outputs, const AllreduceOptions& options) {
  Engine* e = Live();
  return e ? e->GroupedAllreduce(std::move(name), std::move(inputs), std::move(outputs), options)
           : NotInitialized(name);
}

Handle Allgather(std::string name, TensorRef input, const CollectiveOptions& options) {
  Engine* e = Live();
  return e ? e->Allgather(std::move(name), input, options) : NotInitialized(name);
}

Handle Broadcast(std::string name, TensorRef tensor, int root_rank,
                 const CollectiveOptions& options) {
  Engine* e = Live();
  return e ? e->Broadcast(std::move(name), tensor, root_rank, options) : NotInitialized(name);
}

Handle Alltoall(std::string name, TensorRef input, std::vector<int64_t> splits,
                const CollectiveOptions& options) {
  Engine* e = Live();
  return e ? e->Alltoall(std::move(name), input, std::move(splits), options) : NotInitialized(name);
}

Handle ReduceScatter(std::string name, TensorRef input, const ReduceScatterOptions& options) {
  Engine* e = Live();
  return e ? e->ReduceScatter(std::move(name), input, options) : NotInitialized(name);
}

absl::Status CheckSameOnEveryRank(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string mine = EncodeSettings(settings);
  int64_t length = static_cast<int64_t>(mine.size());
  Handle lengths =
      Allgather(absl::StrCat(name, ".lengths"), TensorRef(DataType::kInt64, {1}, &length));
  HVX_RETURN_IF_ERROR(Wait(lengths));
  Handle bytes = Allgather(absl::StrCat(name, ".settings"),
                           TensorRef(DataType::kUint8, {length}, mine.data()));
  HVX_RETURN_IF_ERROR(Wait(bytes));
  const int64_t* each = lengths.output().data_as<int64_t>();
  const char* all = static_cast<const char*>(bytes.output().data());
  std::vector<std::string> by_rank;
  for (int r = 0, off = 0; r < Size(); off += each[r], ++r)
    by_rank.emplace_back(all + off, each[r]);
  return CompareSettings(by_rank);
}

int64_t ReduceScatterRows(int64_t rows, int size, int rank) {
  if (size <= 0) return 0;
  return rows / size + (rank < rows % size ? 1 : 0);
}

Handle Barrier(const ProcessSet& process_set) {
  Engine* e = Live();
  return e ? e->Barrier(process_set) : NotInitialized("barrier");
}

Handle Join() {
  Engine* e = Live();
  return e ? e->Join() : NotInitialized("join");
}

}  // namespace hvx
