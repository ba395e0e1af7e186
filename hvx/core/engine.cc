// The engine's lifecycle: start-up (Setup, Init's checks), the process-set table, the background
// thread's loop (ThreadMain) and the shutdown order. The submission side is submit.cc, one cycle
// of negotiation cycle.cc, running its responses execute.cc; rank 0's planning is coordinator.cc.
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
#include "hvx/common/layout.h"
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
      {"hvx build",
       absl::StrCat("wire format ", kWireFormatVersion, ", compiler ", __VERSION__,
                    ", GPU data plane ", FindDataPlane(DeviceType::kCuda) ? "linked" : "not linked",
                    ", shared-memory CPU plane ",
                    FindCpuPlane("shm").plane ? "linked" : "not linked")},
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
  const HostLayout layout = LayoutOf(HostsOf(set.global_ranks));
  const std::vector<int>& host_of = layout.host_of;
  const int hosts = static_cast<int>(layout.per_host.size());
  if (hosts == 1 || hosts == set.size()) return absl::OkStatus();
  const int me = set.comm->rank();
  HVX_ASSIGN_OR_RETURN(set.host_comm, set.comm->Split(host_of[me], me));
  const bool leader = set.host_comm->rank() == 0;
  HVX_ASSIGN_OR_RETURN(set.leaders_comm, set.comm->Split(leader ? 0 : -1, me));
  if (leader) set.host_members = layout.LocalMembers(me);
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
      s->cpu_plane = nullptr;
      s->device_planes.clear();
      s->vote.reset();
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

}  // namespace hvx
