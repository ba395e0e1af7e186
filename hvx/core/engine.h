// The process-wide collective engine behind api.h: submission queues, the background thread that
// negotiates and executes, and the per-process-set state. api.cc owns one Engine; tests may run
// several in one process, each over its own in-process transport.
//
//   HVX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(options,
//   std::move(transport))); Handle h = engine->Allreduce("x", in, out, {});
//
// Threading: Submit-side methods and topology getters may be called from any thread. Everything
// touching the transport runs on the background thread; see transport.h.
#ifndef HVX_CORE_ENGINE_H_
#define HVX_CORE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "hvx/common/flight_ring.h"
#include "hvx/core/agreement.h"
#include "hvx/core/api.h"
#include "hvx/core/coordinator.h"
#include "hvx/core/message.h"
#include "hvx/core/response_cache.h"
#include "hvx/core/straggler.h"
#include "hvx/core/timeline.h"
#include "hvx/core/topology.h"
#include "hvx/core/transport.h"

namespace hvx {
namespace internal {

// This thread's caller for the ops it submits (SetCallerForThisThread).
std::string& ThreadCaller();

// The shared state behind a Handle.
struct OpState {
  uint64_t id = 0;
  std::string name;

  // Completes one part (grouped ops have several); the first error wins. Thread-safe.
  void Complete(absl::Status status);
  // Completes the op with `status` at once, whatever parts are left: it was rejected before any
  // part ran.
  void Reject(absl::Status status);
  bool done() const;
  absl::Status Wait() const;

  // std::mutex rather than absl::Mutex: the system Abseil is not built with ThreadSanitizer, which
  // then cannot see its synchronization and reports false races.
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  int parts_left ABSL_GUARDED_BY(mu) = 1;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::atomic<bool> finished{false};
  // Set by Reject: the op failed at submission, before any rank negotiated it.
  std::atomic<bool> rejected{false};

  // Results, written by the background thread before completion, read-only afterwards.
  TensorRef output;
  std::vector<uint8_t> owned_output;
  std::vector<int64_t> received_splits;
  int last_joined_rank = -1;
  int process_set_id = -1;
};

}  // namespace internal

// Engine-only settings beyond InitOptions.
// How long the background thread waits for a submission before its next cycle, after
// `idle_cycles` cycles in a row with nothing pending on this rank: `cycle` (HVX_CYCLE_TIME_MS) for
// the first 8, then doubling up to max(cycle, 5 ms). An idle rank still takes part in every
// cycle's vote, but wakes about 200 times a second instead of 1000, each wake-up time taken from
// training on a busy host; a submission still wakes it at once, and a peer's first op after an
// idle spell waits at most 5 ms (the cycle Horovod always uses) for this rank's vote.
absl::Duration IdleCycleTime(absl::Duration cycle, int idle_cycles);

struct EngineOptions {
  // Host name for topology; empty = gethostname(). Lets in-process tests simulate several hosts.
  std::string hostname;
  // Command line shown in the singleton error; empty = /proc/self/cmdline.
  std::string command_line;
  // Exit the process when the transport's finalization does not return within shutdown_timeout_s
  // (true in production; tests of several in-process engines turn it off).
  bool exit_on_finalize_timeout = true;
  // Most tensor ids a set's coordinator holds (CoordinatorOptions::max_tensor_ids); tests make it
  // small to see ids retired and reused.
  size_t max_tensor_ids = 65536;
  // The flight recorder's ring (flight_ring.h), FlightRingBytes() bytes that outlive the engine;
  // null: the memfd the rank wrapper hands over as HVX_FLIGHT_FD, and no recorder without one.
  // Either way InitOptions::flight_recorder false turns it off.
  void* flight_memory = nullptr;
};

class Engine {
 public:
  // Starts the background thread, the transport and topology discovery; returns once all ranks
  // agreed that Init succeeded (or with the first rank's error).
  static absl::StatusOr<std::unique_ptr<Engine>> Start(const InitOptions& options,
                                                       std::unique_ptr<Transport> transport,
                                                       EngineOptions engine_options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Stops the engine and finalizes the transport; returns the transport's finalization error.
  // When finalization does not return in time, exits the process with kShutdownTimeoutExitCode
  // (EngineOptions::exit_on_finalize_timeout) or returns DeadlineExceeded.
  absl::Status Shutdown();
  bool running() const { return !stopped_.load(); }

  const Topology& topology() const { return topology_; }
  const InitOptions& options() const { return options_; }

  Handle Allreduce(std::string name, TensorRef input, TensorRef output,
                   const AllreduceOptions& options);
  Handle GroupedAllreduce(std::string name, std::vector<TensorRef> inputs,
                          std::vector<TensorRef> outputs, const AllreduceOptions& options);
  Handle Allgather(std::string name, TensorRef input, const CollectiveOptions& options);
  Handle Broadcast(std::string name, TensorRef tensor, int root_rank,
                   const CollectiveOptions& options);
  Handle Alltoall(std::string name, TensorRef input, std::vector<int64_t> splits,
                  const CollectiveOptions& options);
  Handle ReduceScatter(std::string name, TensorRef input, const ReduceScatterOptions& options);
  Handle Barrier(const ProcessSet& set);
  Handle Join();
  absl::StatusOr<ProcessSet> AddProcessSet(std::vector<int> ranks);

  // Members of set `id` (global ranks), empty if unknown.
  std::vector<int> ProcessSetRanks(int id) const;
  // What straggler detection concluded so far (straggler.h).
  StragglerStatus Stragglers() const;

  static ProcessSet MakeProcessSet(int id) { return ProcessSet(id); }

 private:
  struct Entry {
    Request request;
    TensorRef input;
    TensorRef output;
    OutputAllocator allocator;
    std::shared_ptr<internal::OpState> state;
    absl::Time submitted;
    bool sent = false;
    // Its slot in the flight recorder's ring and its id there.
    uint32_t flight_slot = 0;
    uint64_t flight_id = 0;
  };
  struct SetState;

  Engine(const InitOptions& options, std::unique_ptr<Transport> transport,
         EngineOptions engine_options);

  Handle Submit(int set_id, std::vector<Entry> entries, std::shared_ptr<internal::OpState> state);
  std::shared_ptr<internal::OpState> NewState(const std::string& name, int parts);
  Handle Failed(const std::string& name, absl::Status status);
  Request BaseRequest(OpType type, const std::string& name, const TensorRef& t) const;

  void ThreadMain();
  absl::Status Setup();
  absl::Status AddSet(std::vector<int> ranks, int* id);
  // Collective over `set`'s members: when its ranks sit on several hosts and some host holds
  // several, makes the communicators GatherPlanBroadcast gathers through, per host and across
  // the hosts' first ranks; otherwise leaves the gather flat.
  absl::Status SetUpHostGather(SetState& set);
  // Destroys every set's communicators, device planes and the world communicator: all of them
  // before the transport's Finalize (an MPI communicator freed after MPI_Finalize aborts).
  void ReleaseCommunicators();
  // Gathers this rank's encoded request list `mine` at `set`'s rank 0, per host when set up so,
  // and there adds every rank's requests to the coordinator. Returns the transport's failures;
  // a list that rank 0 or a host's first rank cannot read, or the coordinator refuses, is
  // *unreadable on rank 0, which then stops every rank with it.
  absl::Status GatherAtCoordinator(SetState& set, const std::string& mine,
                                   absl::Status* unreadable);
  // Records the tensor ids `list` announces and forgets those it retires.
  static void LearnIds(SetState& set, const ResponseList& list);
  // One negotiation+execution cycle of one set. Returns false when the job shuts down.
  bool RunCycle(SetState& set);
  // RunCycle, with an exception that escapes it turned into a Stop naming it.
  bool RunCycleOrStop(SetState& set);
  // What the cache vote decided this cycle: the cached responses every rank has ready, whether
  // the coordinator must run too, and whether any rank has joined.
  struct CacheOutcome {
    std::vector<Response> ready;
    bool negotiate = false;
    bool any_joined = false;
    bool stats_due = false;  // some rank's straggler window ended
  };
  // Votes with the other members of `set` on the pending tensors the response cache knows (one
  // bitwise AND); erases entries any rank invalidated and marks the agreed ones sent.
  absl::StatusOr<CacheOutcome> VoteOnCache(SetState& set, bool joined_here, bool shutdown_here);
  // The coordinator's round: gathers the requests in `to_send` from every member of `set` at its
  // rank 0, which validates them and plans the responses (order, fusion, errors), and broadcasts
  // that plan back to every member. A request the coordinator gave an id, unchanged since, goes
  // as its id.
  absl::StatusOr<ResponseList> GatherPlanBroadcast(SetState& set,
                                                   const std::vector<std::string>& to_send,
                                                   bool joined);
  // Runs `response` and completes its handles; returns an error only when the engine must stop
  // (a collective timed out).
  absl::Status Execute(SetState& set, const Response& response);
  // One response being executed (execute.cc): `entries` are this rank's pending entries for its
  // names, null where this rank has joined; `activity` marks the timeline.
  struct Execution {
    SetState& set;
    const Response& r;
    const std::vector<Entry*>& entries;
    ActivityRecorder* activity;
  };
  // This rank's part of the response, by op type: the executors below, each returning the op's
  // status.
  absl::Status ExecuteOp(const Execution& x);
  absl::Status ExecuteAllreduce(const Execution& x);
  absl::Status ExecuteAllgather(const Execution& x, Entry& entry);
  absl::Status ExecuteBroadcast(const Execution& x, Entry& entry);
  absl::Status ExecuteAlltoall(const Execution& x, Entry& entry);
  absl::Status ExecuteReduceScatter(const Execution& x, Entry& entry);
  // Records an executed allreduce's tensors in the set's response cache.
  void RememberInCache(SetState& set, const Response& r);
  struct PreparedOutput {
    DataPlane* plane;
    TensorRef output;
  };
  // This rank's data plane and output buffer for `entry`'s op (allgather, alltoall,
  // reducescatter), agreed across `set` so that a failure of either on one rank fails every rank.
  absl::StatusOr<PreparedOutput> PrepareOutput(SetState& set, Entry& entry,
                                               const std::vector<int64_t>& shape);
  // Collective over `set`: OK when `local` (this rank's preparation of tensor `name` for the data
  // plane) is OK on every member; else every member fails, the others with the failing rank's
  // message, so that no rank enters the data-plane collective alone.
  absl::Status AgreeBeforeDataPlane(SetState& set, const std::string& name,
                                    const absl::Status& local);
  // Records why the engine stops (the first cause wins); returns false for RunCycle.
  bool Stop(absl::Status cause);
  // The error pending and later ops fail with: the stop's cause, or "shut down".
  absl::Status StopReason() const;
  absl::Status StopReasonLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The data plane of `device` (this rank's own device of its type) in `set`, made on first use.
  absl::StatusOr<DataPlane*> PlaneFor(SetState& set, const Device& device);
  // PlaneFor's CPU plane: the communicator's own, or over it the one HVX_CPU_PLANE names.
  absl::StatusOr<DataPlane*> CpuPlaneFor(SetState& set, const Device& device);
  // What a plane factory gets for `set` and `device`.
  DataPlaneContext ContextFor(SetState& set, const Device& device) const;
  // The AND of every member's `bits` (collective over `set`): through the registered CPU plane's
  // vote where it applies (made at the set's first vote), else Communicator::BitwiseAnd.
  absl::Status Vote(SetState& set, std::vector<uint64_t>* bits);
  std::vector<std::string> HostsOf(const std::vector<int>& ranks) const;
  // What Init compares across ranks: knobs whose difference would hang or corrupt collectives,
  // the build and the transport.
  Settings SettingsThatMustAgree() const;
  // False when `request` is on another device of its type than this rank's earlier tensors.
  static bool OnOwnDevice(const SetState& set, const Request& request);
  // The device this rank runs response `r` on: its own tensors', whatever other ranks use.
  Device LocalDevice(const SetState& set, const Response& r,
                     const std::vector<Entry*>& entries) const;
  // The output of `entry` for an op whose output shape is known only now (allgather, alltoall,
  // reducescatter): from its allocator, else owned by its state. An error, never an exception,
  // when the shape is negative or past memory's size, or the allocation fails.
  absl::StatusOr<TensorRef> AllocateOutput(Entry& entry, const std::vector<int64_t>& shape);
  absl::StatusOr<TensorRef> AllocateOutputOrThrow(Entry& entry, const TensorShape& s,
                                                  int64_t bytes);
  void CompleteEntry(SetState& set, const std::string& name, absl::Status status);
  // Maps the wrapper's ring (HVX_FLIGHT_FD) or engine_options_.flight_memory into flight_.
  void AttachFlightRecorder();
  void FailEverything(absl::Status status);
  // Whether this rank's straggler window has ended by `now` with collectives run in it.
  bool StragglerWindowDue(absl::Time now) const;
  // After a cycle whose vote (or plan) said a window ended: every rank of the world set
  // allgathers its WaitSample and feeds every rank's to the detector; rank 0 logs its warning.
  absl::Status ExchangeWaits(SetState& set);

  const InitOptions options_;
  const EngineOptions engine_options_;
  std::unique_ptr<Transport> transport_;
  Topology topology_;
  std::vector<std::string> hosts_;  // of every rank, from Setup on
  std::unique_ptr<Timeline> timeline_;
  // The last collectives of this rank (flight_ring.h); written under mu_ at submission and on the
  // background thread after, each slot's writers excluding each other.
  FlightRing flight_;
  void* flight_mapping_ = nullptr;  // what AttachFlightRecorder mapped, unmapped at destruction

  mutable std::mutex mu_;
  std::condition_variable cv_;  // any change below
  std::vector<std::unique_ptr<SetState>> sets_ ABSL_GUARDED_BY(mu_);
  bool shutdown_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool setup_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status setup_status_ ABSL_GUARDED_BY(mu_);
  bool finalized_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status finalize_status_ ABSL_GUARDED_BY(mu_);
  absl::Status stop_cause_ ABSL_GUARDED_BY(mu_);  // why the engine stopped, when not a shutdown
  StragglerStatus stragglers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::atomic<bool> stopped_{false};

  // Background thread only.
  std::unique_ptr<Communicator> world_;
  bool joined_ = false;
  // Straggler detection over the world set's ops (straggler.h).
  WaitClock wait_clock_;
  absl::Time window_start_ = absl::InfinitePast();  // set at the first cycle
  std::unique_ptr<StragglerDetector> straggler_;
  std::thread thread_;
};

// One process set as this rank sees it: its communicator, cache, coordinator (at its rank 0) and
// pending ops.
struct Engine::SetState {
  int id = 0;
  std::vector<int> global_ranks;
  std::unique_ptr<Communicator> owned_comm;  // null for the world set and for non-members
  Communicator* comm = nullptr;              // null when this rank is not a member
  std::unique_ptr<ResponseCache> cache;
  std::unique_ptr<Coordinator> coordinator;
  // The planes made on first use: a device type's, and the CPU's where not the communicator's own.
  std::map<DeviceType, std::unique_ptr<DataPlane>> device_planes;
  DataPlane* cpu_plane = nullptr;  // CpuPlaneFor's choice: comm's own, or device_planes[kCpu]
  bool vote_made = false;
  std::unique_ptr<HostVote> vote;  // null: votes with comm->BitwiseAnd
  // This rank's device of each non-CPU type: the one its first tensor of that type was on.
  std::map<DeviceType, Device> own_device;
  // Gathering per host (SetUpHostGather); both null when the gather is flat. host_comm: the
  // members on this rank's host; leaders_comm: each host's first member, null on the others.
  std::unique_ptr<Communicator> host_comm;
  std::unique_ptr<Communicator> leaders_comm;
  std::vector<int32_t> host_members;  // set ranks in host_comm, on its first member
  // Tensor ids the coordinator announced, by name, with this rank's request when it learned one:
  // while its request for the name is the same, it sends the id.
  struct KnownId {
    uint32_t id = 0;
    Request request;
  };
  std::unordered_map<std::string, KnownId> ids;
  std::unordered_map<uint32_t, std::string> id_names;

  // Guarded by Engine::mu_.
  std::deque<Entry> incoming;
  uint64_t submitted = 0;  // ops this rank submitted to the set: the flight recorder's seq
  std::set<std::string> inflight;

  // Background thread only.
  std::map<std::string, Entry> pending;
  std::vector<std::string> order;  // pending names by submission
  bool eviction_warned = false;

  int rank() const { return comm ? comm->rank() : -1; }
  int size() const { return static_cast<int>(global_ranks.size()); }
};

}  // namespace hvx

#endif  // HVX_CORE_ENGINE_H_
