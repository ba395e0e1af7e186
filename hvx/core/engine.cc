// The engine's background thread and its submission side, in one file because both sides share the
// queues, the process-set table and the shutdown order under one mutex; negotiation
// (coordinator.cc), response caching, fusion planning and the data planes are their own files.
#include "hvx/core/engine.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/clock.h"
#include "hvx/common/cluster.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/logging.h"
#include "hvx/common/stack_dump.h"
#include "hvx/common/status.h"
#include "hvx/core/agreement.h"

namespace hvx {
namespace internal {

void OpState::Complete(absl::Status s) {
  std::lock_guard<std::mutex> lock(mu);
  if (status.ok() && !s.ok()) status = Unshared(s);
  if (--parts_left == 0) {
    finished.store(true, std::memory_order_release);
    cv.notify_all();
  }
}

void OpState::Reject(absl::Status s) {
  std::lock_guard<std::mutex> lock(mu);
  rejected.store(true, std::memory_order_release);
  status = Unshared(s);
  parts_left = 0;
  finished.store(true, std::memory_order_release);
  cv.notify_all();
}

bool OpState::done() const { return finished.load(std::memory_order_acquire); }

absl::Status OpState::Wait() const {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [this] { return finished.load(std::memory_order_acquire); });
  return Unshared(status);
}

}  // namespace internal

namespace {

// Sets the calling thread's scheduling policy (SCHED_BATCH or SCHED_OTHER), warning once when
// the system refuses.
void SetThreadPolicy(int policy) {
  const sched_param none{};
  if (const int e = pthread_setschedparam(pthread_self(), policy, &none); e != 0) {
    static std::once_flag warned;
    std::call_once(warned, [e] {
      HVX_LOG(WARNING) << "HVX_ENGINE_SCHED=batch: cannot change the background thread's policy ("
                       << std::strerror(e) << ")";
    });
  }
}

}  // namespace

absl::Duration IdleCycleTime(absl::Duration cycle, int idle_cycles) {
  constexpr int kBusyCycles = 8;
  const absl::Duration longest = std::max(cycle, absl::Milliseconds(5));
  if (idle_cycles <= kBusyCycles) return cycle;
  const int doublings = std::min(idle_cycles - kBusyCycles, 16);
  return std::min(cycle * (1 << doublings), longest);
}

namespace {

absl::Status ShutDownError() {
  return absl::FailedPreconditionError(
      "hvx has been shut down: this rank or another one called hvx::Shutdown (or failed), so "
      "collectives "
      "can no longer run");
}

}  // namespace

Engine::Engine(const InitOptions& options, std::unique_ptr<Transport> transport,
               EngineOptions engine_options)
    : options_(options),
      engine_options_(std::move(engine_options)),
      transport_(std::move(transport)) {
  AttachFlightRecorder();
}

void Engine::AttachFlightRecorder() {
  if (!options_.flight_recorder) return;
  if (engine_options_.flight_memory != nullptr) {
    flight_.Attach(engine_options_.flight_memory, FlightRingBytes());
    return;
  }
  const char* text = std::getenv(kFlightFdVariable);
  int fd = -1;
  struct stat st {};
  if (text == nullptr || !absl::SimpleAtoi(text, &fd) || fd < 0 || fstat(fd, &st) != 0 ||
      st.st_size != static_cast<off_t>(FlightRingBytes())) {
    return;
  }
  // Only the wrapper's memfd: never a file the program happens to hold open under that number.
  char target[64] = {};
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n <= 0 ||
      !absl::StartsWith(absl::string_view(target, n), absl::StrCat("/memfd:", kFlightMemfdName))) {
    return;
  }
  void* memory = mmap(nullptr, FlightRingBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) {
    HVX_LOG(WARNING) << "the flight recorder is off: mapping " << kFlightFdVariable << "=" << text
                     << " failed: " << std::strerror(errno);
    return;
  }
  flight_mapping_ = memory;
  flight_.Attach(memory, FlightRingBytes());
  // The wrapper's pipe for every thread's stack, asked for when it sends the ring.
  if (const int stack_fd = StackFdFromEnvironment(); stack_fd >= 0) {
    const std::string why = InstallStackDumper(stack_fd);
    if (!why.empty()) HVX_LOG(DEBUG) << "no stacks in hvxrun's verdict: " << why;
  }
}

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
    // The transport's start (MPI_Init) waits for every rank and has no deadline of its own. The
    // set-up after it gives up at the collective timeout itself, naming what it waited for: the
    // margin lets that error arrive.
    const auto started = [e = engine.get()]()
                             ABSL_NO_THREAD_SAFETY_ANALYSIS { return e->setup_done_; };
    const absl::Duration timeout = absl::Seconds(options.collective_timeout_s);
    if (!engine->cv_.wait_for(
            lock, absl::ToChronoMilliseconds(timeout + std::min(timeout, absl::Seconds(1))),
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
    status = Unshared(engine->setup_status_);
  }
  if (!status.ok()) {
    if (absl::IsDeadlineExceeded(status)) {
      // A rank never came: the transport's finalization would wait for it too, up to the
      // shutdown timeout. The thread finishes in the background, left to the process's exit.
      engine->thread_.detach();
      engine.release();
      return status;
    }
    engine->thread_.join();
    return status;
  }
  return engine;
}

Engine::~Engine() {
  Shutdown().IgnoreError();
  if (thread_.joinable()) thread_.join();
  if (flight_mapping_ != nullptr) munmap(flight_mapping_, FlightRingBytes());
}

absl::Status Engine::Setup() {
  HVX_ASSIGN_OR_RETURN(world_, transport_->Start(options_));
  Failpoint("init");
  // Ranks are grouped into hosts by HostIdentity (name, boot, /dev/shm), named readably.
  const std::string identity =
      engine_options_.hostname.empty() ? HostIdentity(HostName()) : engine_options_.hostname;
  std::vector<std::string> identities;
  HVX_RETURN_IF_ERROR(world_->Allgather(identity, &identities));
  hosts_ = HostNamesOf(identities);
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
                             hosts_, options_.collective_timeout_s,
                             engine_options_.max_tensor_ids});
    }
    HVX_RETURN_IF_ERROR(SetUpHostGather(*world));
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
      {"HVX_CPU_PLANE", options_.cpu_plane},
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
                           options_.stall_shutdown_time_s, ranks, nullptr, HostsOf(ranks),
                           options_.collective_timeout_s, engine_options_.max_tensor_ids});
  }
  if (set->comm != nullptr) HVX_RETURN_IF_ERROR(SetUpHostGather(*set));
  std::lock_guard<std::mutex> lock(mu_);
  set->id = static_cast<int>(sets_.size());
  *id = set->id;
  sets_.push_back(std::move(set));
  return absl::OkStatus();
}

absl::Status Engine::SetUpHostGather(SetState& set) {
  std::map<std::string, int> host_index;
  std::vector<int> host_of(set.size());
  for (int i = 0; i < set.size(); ++i) {
    host_of[i] =
        host_index.try_emplace(hosts_[set.global_ranks[i]], static_cast<int>(host_index.size()))
            .first->second;
  }
  const int hosts = static_cast<int>(host_index.size());
  if (hosts == 1 || hosts == set.size()) return absl::OkStatus();
  const int me = set.comm->rank();
  HVX_ASSIGN_OR_RETURN(set.host_comm, set.comm->Split(host_of[me], me));
  const bool leader = set.host_comm->rank() == 0;
  HVX_ASSIGN_OR_RETURN(set.leaders_comm, set.comm->Split(leader ? 0 : -1, me));
  if (leader) {
    for (int i = 0; i < set.size(); ++i) {
      if (host_of[i] == host_of[me]) set.host_members.push_back(i);
    }
  }
  return absl::OkStatus();
}

void Engine::ThreadMain() {
  // The transport's short sleeps between tests of a pending collective (hvx/mpi WaitPolitely)
  // then last what they ask for, not the default 50 us of slack more.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  // So that stacks, top -H and debuggers tell it from the program's threads.
  pthread_setname_np(pthread_self(), "hvx-engine");
  absl::Status status = Setup();
  {
    std::lock_guard<std::mutex> lock(mu_);
    setup_status_ = status;
    setup_done_ = true;
    cv_.notify_all();
  }
  if (status.ok()) {
    absl::Time last_cycle = MonotonicNow();
    absl::Duration cycle = absl::Milliseconds(options_.cycle_time_ms);
    int idle_cycles = 0;
    bool running = true;
    // A policy the user chose for the process (chrt --idle, --fifo, ...) is left as it is.
    const bool batch_when_idle =
        options_.engine_sched == "batch" && sched_getscheduler(0) == SCHED_OTHER;
    while (running) {
      std::vector<SetState*> sets;
      bool idle_batch = false;  // this cycle's wait ran SCHED_BATCH
      {
        std::unique_lock<std::mutex> lock(mu_);
        auto has_work = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          if (shutdown_requested_) return true;
          for (const auto& s : sets_) {
            if (!s->incoming.empty()) return true;
          }
          return false;
        };
        // A wait for a duration: std::condition_variable measures it on the steady clock, where
        // wait_until would take a wall-clock time.
        const absl::Duration left =
            std::max(absl::ZeroDuration(), last_cycle + cycle - MonotonicNow());
        // Waiting for a submission, the thread is SCHED_BATCH (HVX_ENGINE_SCHED=batch): the
        // wake-up a submission causes then does not preempt the thread that submitted, which goes
        // on to its next line (a poll sees its op pending) until it waits or its time slice ends;
        // on a free core the engine starts at once all the same. It works under SCHED_OTHER, so
        // its own waits inside a collective wake it as promptly as any thread's.
        idle_batch = batch_when_idle && left > absl::ZeroDuration() && !has_work();
        if (idle_batch) SetThreadPolicy(SCHED_BATCH);
        cv_.wait_for(lock, absl::ToChronoNanoseconds(left), has_work);
        for (const auto& s : sets_) {
          if (s->comm != nullptr) sets.push_back(s.get());
        }
      }
      if (idle_batch) SetThreadPolicy(SCHED_OTHER);
      const absl::Time cycle_start = MonotonicNow();
      bool idle = true;
      for (SetState* set : sets) {
        if (!RunCycleOrStop(*set)) {
          running = false;
          break;
        }
        idle = idle && set->pending.empty();
      }
      // With work pending the next cycle comes a cycle time after this one began (at once after
      // a long one). Idle, it is timed from this one's end, which every rank reaches together
      // (the vote is collective): timed from each rank's wake-up, a rank that once woke early
      // stayed early by the same offset and waited that long in every idle vote.
      last_cycle = idle ? MonotonicNow() : cycle_start;
      idle_cycles = idle ? idle_cycles + 1 : 0;
      cycle = IdleCycleTime(absl::Milliseconds(options_.cycle_time_ms), idle_cycles);
    }
    stopped_.store(true);
    FailEverything(StopReason());
    ReleaseCommunicators();
    timeline_.reset();
  } else {
    // Setup may have made some sets' communicators before it failed.
    ReleaseCommunicators();
  }
  stopped_.store(true);
  Failpoint("shutdown");
  absl::Status cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cause = stop_cause_;
  }
  absl::Status fin;
  if (!cause.ok()) {
    // A collective failed: a peer died, froze or was cut off, so the job cannot end together.
    // Finalizing would wait for every rank (hydra's PMI barrier) up to HVX_SHUTDOWN_TIMEOUT_S; the
    // rank ends now with the cause instead, and its failing exit stops the job.
    fin = absl::Status(cause.code(),
                       absl::StrCat("the job was not ended with the other ranks (no transport "
                                    "finalization) because hvx had stopped: ",
                                    cause.message()));
  } else {
    fin = transport_->Finalize(MonotonicNow() + absl::Seconds(options_.shutdown_timeout_s));
    if (!fin.ok()) HVX_LOG(ERROR) << "transport finalization: " << fin;
  }
  std::lock_guard<std::mutex> lock(mu_);
  finalize_status_ = fin;
  finalized_ = true;
  cv_.notify_all();
}

void Engine::ReleaseCommunicators() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : sets_) {
      s->device_planes.clear();
      s->leaders_comm.reset();
      s->host_comm.reset();
      s->owned_comm.reset();
      s->comm = nullptr;
    }
  }
  world_.reset();
}

void Engine::FailEverything(absl::Status status) {
  std::vector<std::shared_ptr<internal::OpState>> states;
  // The flight recorder keeps where each op was (its times) and that it failed, and why.
  const std::string_view why(status.message().data(), status.message().size());
  const int64_t now = FlightNowNs();
  auto record = [&](const Entry& e) {
    if (flight_.enabled()) {
      flight_.Finish(e.flight_slot, e.flight_id, static_cast<int>(status.code()), why, now);
    }
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : sets_) {
      for (auto& e : s->incoming) {
        states.push_back(e.state);
        record(e);
      }
      for (auto& [name, e] : s->pending) {
        states.push_back(e.state);
        record(e);
      }
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

bool Engine::RunCycle(SetState& set) {
  bool shutdown_local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!set.incoming.empty()) {
      Entry e = std::move(set.incoming.front());
      set.incoming.pop_front();
      set.order.push_back(e.request.name);
      if (set.id == 0) wait_clock_.Submitted(e.submitted);
      if (!e.request.device.is_cpu())
        set.own_device.emplace(e.request.device.type, e.request.device);
      std::string name = e.request.name;
      set.pending.emplace(std::move(name), std::move(e));
    }
    shutdown_local = shutdown_requested_;
  }
  const bool joined_here = set.id == 0 && joined_;
  if (set.id == 0 && window_start_ == absl::InfinitePast()) window_start_ = MonotonicNow();
  std::vector<Response> cached;
  bool slow = true;
  bool any_joined = joined_here;
  bool stats_due = false;
  if (set.cache->capacity() > 0) {
    absl::StatusOr<CacheOutcome> outcome = VoteOnCache(set, joined_here, shutdown_local);
    if (!outcome.ok()) {
      return Stop(Annotate(outcome.status(), absl::StrCat("negotiation on process set ", set.id)));
    }
    cached = std::move(outcome->ready);
    slow = outcome->negotiate;
    any_joined = outcome->any_joined;
    stats_due = outcome->stats_due;
  }

  ResponseList slow_list;
  if (slow) {
    std::vector<std::string> to_send;
    for (const std::string& name : set.order) {
      Entry& e = set.pending.at(name);
      if (e.sent) continue;
      int bit;
      if (!any_joined && set.cache->capacity() > 0 &&
          set.cache->Find(e.request, &bit) == ResponseCache::Lookup::kHit) {
        continue;  // agreed through the bit vector once every rank has it
      }
      e.sent = true;
      to_send.push_back(name);
    }
    auto list = GatherPlanBroadcast(set, to_send, joined_here);
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
  if (set.id == 0) {
    if (set.pending.empty()) wait_clock_.Drained(MonotonicNow());
    if (stats_due || slow_list.stats_due) {
      if (absl::Status s = ExchangeWaits(set); !s.ok()) {
        return Stop(Annotate(s, "exchanging straggler samples"));
      }
    }
  }
  if (slow_list.shutdown) return false;
  return true;
}

bool Engine::StragglerWindowDue(absl::Time now) const {
  return options_.straggler_check_s > 0 && topology_.size > 1 && wait_clock_.active() &&
         now - window_start_ >= absl::Seconds(options_.straggler_check_s);
}

absl::Status Engine::ExchangeWaits(SetState& set) {
  const absl::Time now = MonotonicNow();
  WaitSample mine = wait_clock_.TakeWindow(now);
  mine.window_s = absl::ToDoubleSeconds(now - window_start_);
  window_start_ = now;
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(set.comm->Allgather(EncodeWaitSample(mine), &all));
  std::vector<WaitSample> samples;
  for (size_t r = 0; r < all.size(); ++r) {
    absl::StatusOr<WaitSample> sample = DecodeWaitSample(all[r]);
    if (!sample.ok()) return Annotate(sample.status(), absl::StrCat("from rank ", r));
    samples.push_back(*sample);
  }
  if (straggler_ == nullptr) {
    std::vector<std::string> who;
    std::map<std::string, int> on_host;
    for (size_t r = 0; r < hosts_.size(); ++r) {
      who.push_back(absl::StrCat("rank ", r, " (host ", hosts_[r], ", local rank ",
                                 on_host[hosts_[r]]++, ")"));
    }
    straggler_ = std::make_unique<StragglerDetector>(StragglerOptions{}, std::move(who));
  }
  const std::string warning = straggler_->Add(samples, samples.empty() ? 0 : samples[0].window_s);
  if (!warning.empty() && set.rank() == 0) HVX_LOG(WARNING) << warning;
  std::lock_guard<std::mutex> lock(mu_);
  stragglers_ = straggler_->status();
  return absl::OkStatus();
}

StragglerStatus Engine::Stragglers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stragglers_;
}

absl::StatusOr<Engine::CacheOutcome> Engine::VoteOnCache(SetState& set, bool joined_here,
                                                         bool shutdown_here) {
  ResponseCache& cache = *set.cache;
  CacheVote vote(cache.capacity());
  const absl::Time now = MonotonicNow();
  absl::Duration stalled_after = absl::InfiniteDuration();
  for (double s : {options_.stall_check_time_s, options_.collective_timeout_s}) {
    if (s > 0) stalled_after = std::min(stalled_after, absl::Seconds(s));
  }
  for (const std::string& name : set.order) {
    const Entry& e = set.pending.at(name);
    if (e.sent) continue;
    int bit = -1;
    ResponseCache::Lookup lookup = cache.Find(e.request, &bit);
    // A tensor on another device than this rank's own must reach the coordinator, which fails it
    // on every rank: invalidate its entry so that every rank sends it.
    if (lookup == ResponseCache::Lookup::kHit && !OnOwnDevice(set, e.request))
      lookup = ResponseCache::Lookup::kInvalid;
    // A stalled tensor leaves the cache so that the coordinator's stall inspector and collective
    // timeout see it.
    const bool stalled = now - e.submitted > stalled_after;
    if (lookup == ResponseCache::Lookup::kHit && !stalled) {
      vote.Ready(bit);
    } else if (lookup != ResponseCache::Lookup::kMiss) {
      vote.Invalidate(bit);
    } else {
      vote.Raise(CacheVote::kUncached);
    }
  }
  if (joined_here) vote.Raise(CacheVote::kJoined);
  if (shutdown_here && set.id == 0) vote.Raise(CacheVote::kShutdown);
  // Tensors the coordinator holds for absent ranks reach their stall warning or timeout even
  // when no rank has anything new to negotiate.
  if (set.coordinator != nullptr && set.coordinator->CheckDue(now))
    vote.Raise(CacheVote::kCheckDue);
  if (set.id == 0 && StragglerWindowDue(now)) vote.Raise(CacheVote::kStatsDue);
  HVX_RETURN_IF_ERROR(set.comm->BitwiseAnd(vote.words()));

  CacheOutcome outcome;
  outcome.any_joined = vote.AnyRank(CacheVote::kJoined);
  outcome.stats_due = vote.AnyRank(CacheVote::kStatsDue);
  const std::vector<int> invalidated = vote.Invalidated();
  for (int bit : invalidated) cache.Erase(bit);
  // While a rank has joined, every tensor goes through the coordinator, which stands in for it.
  if (!outcome.any_joined) {
    for (int bit : vote.ReadyOnEveryRank()) {
      if (!cache.InUse(bit)) continue;
      outcome.ready.push_back(cache.Get(bit));
      set.pending.at(outcome.ready.back().names[0]).sent = true;
    }
  }
  outcome.negotiate = !invalidated.empty() || vote.AnyRank(CacheVote::kUncached) ||
                      outcome.any_joined || vote.AnyRank(CacheVote::kShutdown) ||
                      vote.AnyRank(CacheVote::kCheckDue);
  return outcome;
}

bool Engine::RunCycleOrStop(SetState& set) {
  // The last line of defence: an exception thrown on this thread (a library's, or hvx's own) must
  // not end the process through std::terminate with nothing said; the engine stops with it, and
  // every pending op fails with it on this rank (the others' ops then end at their deadline).
  try {
    return RunCycle(set);
  } catch (const std::exception& e) {
    return Stop(absl::InternalError(absl::StrCat(
        "an exception on hvx's background thread (process set ", set.id, "): ", e.what())));
  }
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

absl::StatusOr<ResponseList> Engine::GatherPlanBroadcast(SetState& set,
                                                         const std::vector<std::string>& to_send,
                                                         bool joined) {
  RequestList mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine.shutdown = shutdown_requested_ && set.id == 0;
  }
  const absl::Time now = MonotonicNow();
  for (const std::string& name : to_send) {
    const Entry& e = set.pending.at(name);
    if (e.request.type == OpType::kJoin) joined_ = true;
    auto known = set.ids.find(name);
    if (known != set.ids.end() && SameRequest(known->second.request, e.request)) {
      Request by_id;
      by_id.id = known->second.id;
      by_id.rank = e.request.rank;
      mine.requests.push_back(by_id);
    } else {
      mine.requests.push_back(e.request);
    }
    mine.requests.back().waited_s = absl::ToDoubleSeconds(now - e.submitted);
  }
  mine.joined = joined || joined_;
  Failpoint("negotiation");
  absl::Status unreadable;
  HVX_RETURN_IF_ERROR(GatherAtCoordinator(set, EncodeRequestList(mine), &unreadable));
  std::string out;
  if (set.comm->rank() == 0) {
    ResponseList plan;
    if (unreadable.ok()) {
      const absl::Time built = MonotonicNow();
      plan = set.coordinator->Build(built);
      // Without the cache's vote, rank 0's window decides for every rank.
      plan.stats_due = set.id == 0 && set.cache->capacity() == 0 && StragglerWindowDue(built);
    } else {
      // Every rank stops now with the cause, instead of waiting for a broadcast until its
      // collective timeout.
      plan.error = absl::StrCat("the coordinator could not read this cycle's requests: ",
                                unreadable.message());
      plan.shutdown = true;
    }
    out = EncodeResponseList(plan);
  }
  HVX_RETURN_IF_ERROR(set.comm->Broadcast(&out));
  HVX_ASSIGN_OR_RETURN(ResponseList list, DecodeResponseList(out));
  if (!list.error.empty()) return absl::DataLossError(list.error);
  LearnIds(set, list);
  return list;
}

absl::Status Engine::GatherAtCoordinator(SetState& set, const std::string& mine,
                                         absl::Status* unreadable) {
  std::vector<std::string> all;
  if (set.host_comm == nullptr) {
    HVX_RETURN_IF_ERROR(set.comm->Gather(mine, &all));
    const absl::Time now = MonotonicNow();  // after the gather, which waited for every rank
    for (int r = 0; r < static_cast<int>(all.size()) && unreadable->ok(); ++r) {
      absl::StatusOr<RequestList> list = DecodeRequestList(all[r]);
      if (!list.ok()) {
        *unreadable = Annotate(list.status(), absl::StrCat("set rank ", r));
      } else {
        *unreadable = set.coordinator->Add(r, *list, now);
      }
    }
    return absl::OkStatus();
  }
  HVX_RETURN_IF_ERROR(set.host_comm->Gather(mine, &all));
  if (set.leaders_comm == nullptr) return absl::OkStatus();
  // A host's first rank that cannot read its members' lists still takes part in the gather
  // across hosts, with the error for the coordinator to stop every rank with.
  HostRequestList merged;
  std::vector<RequestList> lists;
  for (size_t i = 0; i < all.size() && merged.error.empty(); ++i) {
    absl::StatusOr<RequestList> list = DecodeRequestList(all[i]);
    if (!list.ok()) {
      merged.error =
          absl::StrCat("set rank ", set.host_members[i], ", read by its host's first rank ",
                       set.host_members[0], ": ", list.status().message());
    } else {
      lists.push_back(*std::move(list));
    }
  }
  if (merged.error.empty()) {
    absl::StatusOr<HostRequestList> m = MergeHostRequests(set.host_members, lists);
    if (m.ok()) {
      merged = *std::move(m);
    } else {
      merged.error = absl::StrCat("set rank ", set.host_members[0], ": ", m.status().message());
    }
  }
  std::vector<std::string> hosts;
  HVX_RETURN_IF_ERROR(set.leaders_comm->Gather(EncodeHostRequestList(merged), &hosts));
  const absl::Time now = MonotonicNow();
  for (size_t h = 0; h < hosts.size() && unreadable->ok(); ++h) {
    *unreadable = set.coordinator->AddEncodedHostList(hosts[h], h, now);
  }
  return absl::OkStatus();
}

void Engine::LearnIds(SetState& set, const ResponseList& list) {
  for (uint32_t id : list.retired) {
    auto it = set.id_names.find(id);
    if (it == set.id_names.end()) continue;
    set.ids.erase(it->second);
    set.id_names.erase(it);
  }
  for (const TensorId& t : list.assigned) {
    auto pending = set.pending.find(t.name);
    // A rank that had joined made no request for the name: it sends the name next time.
    if (pending == set.pending.end()) {
      auto known = set.ids.find(t.name);
      if (known != set.ids.end()) {
        set.id_names.erase(known->second.id);
        set.ids.erase(known);
      }
      continue;
    }
    set.ids[t.name] = {t.id, pending->second.request};
    set.id_names[t.id] = t.name;
  }
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

}  // namespace hvx
