// The public API of hvx: process topology and asynchronous collectives on tensors.
//
//   HVX_RETURN_IF_ERROR(hvx::Init());                       // knobs from HVX_* variables
//   hvx::Handle h = hvx::Allreduce("grad.fc1", grad, grad);  // in place, averaged over ranks
//   HVX_RETURN_IF_ERROR(hvx::Wait(h));
//
// Every rank runs the same program. A collective is submitted under a name that must be the same on
// every rank taking part; a background thread agrees with the other ranks on which named tensors
// are ready and runs them in one global order, so ranks may submit in different orders. Each call
// returns a Handle at once; the caller's buffers must stay alive and untouched until the handle
// completes (Poll true, or Wait returned).
//
// Errors are absl::Status values carried by the handle. A disagreement between ranks (dtype, shape,
// op, root, scale factors, splits) fails the op on every rank with the same message; nothing hangs.
// A second op with the name of one still in flight fails at once on the submitting rank only.
//
// Linking: depend on //hvx/mpi (target `hvx`), which brings this API plus the MPICH transport.
// Depending on //hvx/core alone gives the API with no transport registered: Init then fails with
// FailedPrecondition naming the missing dependency.
//
// Thread safety: every function here may be called from any thread after Init returns. Init and
// Shutdown must not race with each other.
#ifndef HVX_CORE_API_H_
#define HVX_CORE_API_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/env.h"
#include "hvx/common/types.h"
#include "hvx/core/straggler.h"
#include "hvx/kernels/reduce_op.h"

namespace hvx {

// Settings of one hvx job. Every field has a default; FromEnv reads the HVX_* knobs over them.
struct InitOptions {
  // Fusion buffer size in bytes (HVX_FUSION_THRESHOLD, accepts "64MiB"). Allreduces that are ready
  // in the same cycle and agree in dtype/op/scale/device are reduced together up to this many
  // bytes. 0 disables fusion.
  int64_t fusion_threshold_bytes = int64_t{128} << 20;
  // Time between negotiation cycles when nothing is submitted (HVX_CYCLE_TIME_MS); an idle engine
  // backs off to 5 ms (IdleCycleTime, engine.h). A submission wakes the background thread at
  // once, so this bounds idle polling, not latency.
  double cycle_time_ms = 1.0;
  // How the background thread is scheduled while it waits for submissions (HVX_ENGINE_SCHED).
  // "batch": Linux's SCHED_BATCH, whose wake-up does not preempt the running thread, so a thread
  // that submits an op goes on until it waits (or its time slice ends) instead of yielding its
  // core to the engine it woke: an async op is still in flight on the submitter's next line (a
  // poll right after submitting sees it pending, as with Horovod). Where a core is free the engine
  // starts at once all the same, and it works (inside a collective) under SCHED_OTHER. "normal":
  // SCHED_OTHER throughout; a submission's wake-up may preempt the submitter on a busy core. A
  // process started under another policy (chrt) keeps it either way.
  std::string engine_sched = "batch";
  // Response cache entries (HVX_CACHE_CAPACITY); 0 disables the cache and its one-allreduce fast
  // path, so every cycle gathers requests at the coordinator.
  int64_t cache_capacity = 1024;
  // Chrome-trace JSON timeline written by rank 0 (HVX_TIMELINE); empty = none.
  std::string timeline_path;
  // After this many seconds of some ranks waiting on a tensor others have not submitted, rank 0
  // logs which ranks are missing which tensors (HVX_STALL_CHECK_TIME_S); 0 disables the check.
  double stall_check_time_s = 60.0;
  // If > 0, pending ops that stalled this long fail on every rank with the stall report
  // (HVX_STALL_SHUTDOWN_TIME_S). Must exceed an enabled stall_check_time_s (Validate).
  double stall_shutdown_time_s = 0.0;
  // Severity threshold of hvx's log lines (HVX_LOG_LEVEL): trace|debug|info|warning|error|fatal.
  std::string log_level = "info";
  // A process that finds itself alone (size 1) while the environment shows a multi-process job
  // (launcher variables, several hosts or GPUs) fails Init; true only warns (HVX_ALLOW_SINGLETON).
  bool allow_singleton = false;
  // CPU tensors, more than two ranks: reduce each floating-point element in one order whatever a
  // cycle fuses with it, so float sums are the same bits from run to run and resumed runs repeat
  // uninterrupted ones exactly (HVX_FIXED_REDUCTION_ORDER). false: the CPU ring cuts the fused
  // buffer instead of each tensor, fewer messages per step (BENCHMARKS.md has the difference), but
  // the rounding then follows the fusion, which follows timing.
  bool fixed_reduction_order = true;
  // How CPU tensors are allreduced (HVX_CPU_PLANE): "shm" through shared memory among the ranks
  // of each host, and hierarchically across hosts (shared memory inside each host, MPI between
  // them); "mpi" by MPI point-to-point (a ring); "auto" shm wherever a process set has several
  // ranks on a host and the same number on every host, else mpi, and where both give the same bits
  // (two ranks, or fixed_reduction_order off) the faster of the two on the job's first buffers of
  // each size, timed (hvx/shm/plane_trial.h). With shm, reduce-scatter among the ranks of one host
  // goes through shared memory too; every other op uses MPI.
  std::string cpu_plane = "auto";
  // GPU tensors (the NCCL data plane): reduce-scatter inside each host, the transport across hosts,
  // allgather inside the host, on several homogeneous hosts (HVX_HIERARCHICAL_ALLREDUCE).
  bool hierarchical_allreduce = false;
  // GPU tensors: reduce float16/bfloat16 in float32, as the CPU path does
  // (HVX_NCCL_HALF_IN_FLOAT32).
  bool nccl_half_in_float32 = false;
  // Upper bound, in seconds (> 0), on the transport's finalization in Shutdown
  // (HVX_SHUTDOWN_TIMEOUT_S): it includes waiting for every other rank to reach the end of the job.
  // A transport that gives up in time makes Shutdown return its error; one that does not return
  // at all ends the process, after flushing output, with kShutdownTimeoutExitCode: a rank whose
  // job did not end cleanly never reports success.
  double shutdown_timeout_s = 30.0;
  // Seconds (> 0) any wait for other ranks may last, in negotiation and in a data-plane collective
  // (HVX_COLLECTIVE_TIMEOUT_S). Past it the op fails on this rank with DeadlineExceeded naming the
  // peers it waited for, hvx stops (every pending and later op fails with that error) and the
  // program's failing exit ends the job, instead of hanging behind a rank that died or froze.
  // The blocking set-up calls (communicator splits, NCCL's init) are bounded by it too: a rank
  // held in one past it ends with kSetupTimeoutExitCode, saying why.
  // Generous, because a peer may legitimately be slow: starting late, or in a long evaluation.
  double collective_timeout_s = 300.0;
  // Keep the flight recorder, the ring of this rank's recent collectives that hvxrun reads when a
  // job fails or hangs (HVX_FLIGHT_RECORDER; it records only under hvxrun, which hands each rank
  // its ring).
  bool flight_recorder = true;
  // Straggler detection's window in seconds (HVX_STRAGGLER_CHECK_S; 0: off). After each window in
  // which collectives ran, the ranks exchange how long their collectives waited for the others;
  // a rank the others waited for in 3 windows in a row is named in a warning and by Stragglers().
  double straggler_check_s = 0.25;
  // Process sets created during Init, in this order, on every rank (ids 1, 2, ...).
  std::vector<std::vector<int>> process_sets;
  // Name of the registered transport; empty = the only one registered ("mpi" with //hvx/mpi).
  std::string transport;
  // Where Init reads launcher variables (HVX_RANK, ..., SLURM_*, SM_*, CUDA_VISIBLE_DEVICES) and
  // the GPU list; nullptr = the process environment. Must outlive Init.
  const Environment* environment = nullptr;
  // Directory listing this host's GPUs, one entry each (visible GPUs when CUDA_VISIBLE_DEVICES is
  // unset). For tests.
  std::string nvidia_gpus_dir = "/proc/driver/nvidia/gpus";

  // Defaults overridden by the knobs named above that are set in `env`. InvalidArgument names the
  // variable and its value when one does not parse or Validate fails.
  static absl::StatusOr<InitOptions> FromEnv(const Environment& env);
  // InvalidArgument, naming the knob, for a value hvx cannot honour: a timeout that is not > 0, a
  // stall shutdown time that would never apply (not above an enabled stall check). Init checks it.
  absl::Status Validate() const;
};

// Starts hvx on this rank: the transport, topology discovery, the background thread, the banner
// line. Collective: every rank of the job must call it. Errors:
//   FailedPrecondition  already initialized; no transport linked; a singleton where the
//                       environment shows a multi-process job (the message gives the hvxrun command
//                       that starts it correctly); a launcher variable (HVX_RANK, HVX_SIZE,
//                       HVX_LOCAL_RANK, ...) that disagrees with the transport.
//   InvalidArgument     a bad option or process set.
absl::Status Init(const InitOptions& options);
// Init(InitOptions::FromEnv(process environment)).
absl::Status Init();

// Stops the background thread and finalizes the transport. Ops still pending fail with
// FailedPrecondition ("hvx has been shut down"). When one rank shuts down, the others' pending and
// later ops fail too. Returns within InitOptions::shutdown_timeout_s (plus at most a second);
// the transport's error (e.g. DeadlineExceeded: another rank never reached the end of the job)
// when its finalization failed; if the transport does not return at all the process exits (see
// InitOptions::shutdown_timeout_s). After hvx stopped on a failure (a collective timed out, a
// peer was lost: the ops' error says "hvx has stopped"), the job cannot end together: Shutdown
// returns that failure at once and the transport is not finalized, rather than waiting for ranks
// that may never come. A second call, or a call before Init, returns OK. hvx cannot
// be initialized again afterwards. Called at exit when the program did not call it: a failure
// there turns an exit status of 0 into kShutdownTimeoutExitCode, and a program exiting with a
// non-zero status ends at once with it (stdio flushed, later exit handlers skipped) without
// shutting down, so the launcher names this rank as the job's failure.
absl::Status Shutdown();

// The exit status of a process whose hvx shutdown failed or hung while it was exiting with 0
// (the one coreutils' timeout uses).
inline constexpr int kShutdownTimeoutExitCode = 124;
// The exit status of a process that hvx ended because a set-up call with no deadline of its own
// (a communicator split, NCCL's communicator init) waited past HVX_COLLECTIVE_TIMEOUT_S for a rank
// that froze inside it (hvx/common/watchdog.h). The same as the shutdown's: a timeout.
inline constexpr int kSetupTimeoutExitCode = 124;

bool IsInitialized();

// Topology. Before Init (or after Shutdown) these return -1 (false for IsHomogeneous).
int Rank();            // 0 .. Size()-1
int Size();            // processes in the job
int LocalRank();       // index among the processes on this host (same Host())
int LocalSize();       // processes on this host
int CrossRank();       // index of this host among the hosts that have a process with this LocalRank
int CrossSize();       // hosts that have a process with this LocalRank
bool IsHomogeneous();  // every host runs the same number of processes
// This rank's host as hvx groups ranks (host name, boot, /dev/shm): its host name, or name#2,
// name#3, ... for a further host of one name (two hostNetwork pods of one node). "" before Init.
std::string Host();

// Where the collectives this thread submits from now on come from, as a frontend knows it
// ("train.py:42"): the flight recorder keeps it with each op, and hvxrun's verdict shows it. ""
// forgets it. hvx.torch sets it around each op to its caller's Python file and line.
void SetCallerForThisThread(std::string caller);

// What straggler detection concluded so far (InitOptions::straggler_check_s), the same on every
// rank: the rank the others keep waiting for (-1: none), each rank's lateness in the last window
// and the last warning. Empty before Init.
StragglerStatus Stragglers();

// A group of ranks that runs collectives among themselves, with its own coordinator (its lowest
// rank) and ranks numbered 0..size-1 in the order of `ranks()`. The default value is the global
// set.
class ProcessSet {
 public:
  ProcessSet() = default;
  int id() const { return id_; }
  bool is_global() const { return id_ == 0; }

  // Global ranks of the members, ascending. Empty for an unknown id.
  std::vector<int> ranks() const;
  // This process's index in the set, or -1 when it is not a member.
  int rank() const;
  int size() const;

  friend bool operator==(ProcessSet a, ProcessSet b) { return a.id_ == b.id_; }

 private:
  friend class Engine;
  explicit ProcessSet(int id) : id_(id) {}
  int id_ = 0;
};

inline ProcessSet GlobalProcessSet() { return ProcessSet(); }

// Creates a process set from global ranks (any order, no duplicates). Collective: every rank of the
// job calls it with the same list, in the same order relative to other AddProcessSet calls, even
// ranks that are not members. A list equal to an existing set returns that set. Blocks until the
// set exists. InvalidArgument for an empty list, a duplicate or an out-of-range rank.
absl::StatusOr<ProcessSet> AddProcessSet(std::vector<int> ranks);

// Allocates the output of an op whose output shape is only known after negotiation (allgather,
// alltoall, reducescatter). Called once on hvx's background thread with the final shape, dtype
// and the input's device; the returned memory must hold shape.num_elements() elements and stay
// alive until the handle completes. Without an allocator hvx allocates CPU memory owned by the
// handle (Handle::output()); tensors on other devices require one.
using OutputAllocator = std::function<absl::StatusOr<TensorRef>(
    DataType dtype, const TensorShape& shape, const Device& device)>;

namespace internal {
struct OpState;
}  // namespace internal

// An op in flight. Cheap to copy (shared). All methods are thread-safe; the accessors for results
// are meaningful only after Wait returned OK (or Poll returned true and status() is OK).
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<internal::OpState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // A per-process number, increasing with submission order; 0 for an invalid handle.
  uint64_t id() const;
  // The op's name as submitted.
  const std::string& name() const;

  // The status once complete; Unavailable("pending") before.
  absl::Status status() const;
  // True when the op failed at submission, before any negotiation (a bad argument, an unknown
  // process set, a name still in flight, hvx stopped); its status says why.
  bool rejected() const;
  // Allgather / Alltoall / ReduceScatter: the output tensor (the allocator's or hvx-owned memory,
  // which lives as long as any copy of this handle).
  const TensorRef& output() const;
  // Alltoall: rows received from each rank of the process set.
  const std::vector<int64_t>& received_splits() const;
  // Join: the global rank that joined last (the same on every rank).
  int last_joined_rank() const;

  const std::shared_ptr<internal::OpState>& state() const { return state_; }

 private:
  std::shared_ptr<internal::OpState> state_;
};

// True once the op has completed (successfully or not). Never blocks. False for an invalid handle.
bool Poll(const Handle& handle);
// Blocks until the op completes and returns its status. InvalidArgument for an invalid handle.
absl::Status Wait(const Handle& handle);
// Waits for every handle; returns the first error in the given order (all are waited for).
absl::Status WaitAll(const std::vector<Handle>& handles);

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kAverage;
  // Inputs are multiplied by prescale before the reduction, the result by postscale after (in
  // float64 for integer types, float32 for float16/bfloat16). Must agree on every rank.
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  ProcessSet process_set;
};

// Reduces `input` across the process set into `output` (same dtype and shape; may be the same
// memory). Every DataType works on CPU; float16/bfloat16 are reduced in float32 and rounded back.
// Shapes must be equal on all ranks.
Handle Allreduce(std::string name, TensorRef input, TensorRef output,
                 const AllreduceOptions& options = {});

// Allreduces several tensors as one op: they are negotiated and fused together, and the handle
// completes when all are done. Tensor i is named "<name>.<i>". inputs and outputs pair up.
Handle GroupedAllreduce(std::string name, std::vector<TensorRef> inputs,
                        std::vector<TensorRef> outputs, const AllreduceOptions& options = {});

struct CollectiveOptions {
  ProcessSet process_set;
  OutputAllocator allocator;  // see OutputAllocator; unused by Broadcast
};

// Concatenates every rank's `input` along the first dimension, in rank order. The first dimension
// may differ between ranks; the other dimensions must agree. Rank-0 (scalar) inputs are rejected.
// Output shape: [sum of first dims, rest...].
Handle Allgather(std::string name, TensorRef input, const CollectiveOptions& options = {});

// Collective over every rank: OK when every rank passed the same (name, value) pairs; otherwise
// FailedPrecondition on every rank naming each setting that differs, its distinct values and the
// ranks holding them ("dataset samples: ranks 0-5,7 have 60000, rank 6 has 59999"). For what a
// program must agree on beyond hvx's own knobs (which Init compares): a dataset's size and files,
// a config. `name` names the two allgathers it runs.
absl::Status CheckSameOnEveryRank(const std::string& name,
                                  const std::vector<std::pair<std::string, std::string>>& settings);

// Copies `tensor` from `root_rank` (a rank within the process set) to every rank, in place. Shape,
// dtype and root must agree on every rank.
Handle Broadcast(std::string name, TensorRef tensor, int root_rank,
                 const CollectiveOptions& options = {});

// Sends splits[j] rows (along the first dimension) of `input` to rank j of the process set, in
// order, and receives the rows others send here, concatenated in rank order. Empty `splits` means
// an equal split (the first dimension must divide by the set size). Non-first dimensions must
// agree. Received row counts are in Handle::received_splits().
Handle Alltoall(std::string name, TensorRef input, std::vector<int64_t> splits = {},
                const CollectiveOptions& options = {});

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kAverage;  // kSum or kAverage
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  ProcessSet process_set;
  OutputAllocator allocator;
};

// Reduces `input` (same shape on every rank) and leaves rank r of the set with its slice of rows:
// rows divide as evenly as possible and the first (rows % size) ranks get one more row.
Handle ReduceScatter(std::string name, TensorRef input, const ReduceScatterOptions& options = {});
// The rows rank `rank` of `size` receives from a reduce-scatter of `rows` rows.
int64_t ReduceScatterRows(int64_t rows, int size, int rank);

// Completes once every rank of the process set has called Barrier.
Handle Barrier(const ProcessSet& process_set = {});

// Declares that this rank has no more data this epoch. Until every rank has joined, this rank takes
// part in every allreduce the others run with zeros of the agreed shape (Average still divides by
// the full set size); other collectives fail while a rank is joined. Completes when all ranks have
// joined; Handle::last_joined_rank() is then the same on every rank. Global process set only.
Handle Join();

}  // namespace hvx

#endif  // HVX_CORE_API_H_
