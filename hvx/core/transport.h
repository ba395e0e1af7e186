// The interfaces a transport backend implements to carry hvx's engine: a control plane (small
// messages for negotiation) and data planes (collectives on tensor memory), per group of ranks.
//
//   HVX_REGISTER_TRANSPORT(mpi, [] { return std::make_unique<MpiTransport>(); });
//   HVX_REGISTER_DATA_PLANE(cuda, DeviceType::kCuda, &NcclDataPlane::Create);
//   HVX_REGISTER_CPU_PLANE(shm, &MakeShmCpuPlane, &MakeShmHostVote);  // HVX_CPU_PLANE=shm|auto
//   HVX_REGISTER_INIT_CHECK(cuda_device_binding, &CheckDeviceBinding);  // runs in hvx::Init
//
// A Transport is created by the engine at Init and started on the engine's background thread.
// Every call into a Transport, its Communicators and their DataPlanes comes from that one thread,
// and every rank makes the same calls in the same order (the engine guarantees it: all ranks run
// the coordinator's identical response list). So a backend needs no locking of its own and may use
// blocking collectives.
//
// Host (CPU) tensors run on the Communicator's own data plane, or on the CPU plane registered under
// HVX_CPU_PLANE's name (hvx/shm's "shm", on by default), which the engine makes over the
// communicator's primitives and which falls back on the communicator's own. Tensors on another
// device run on a DataPlane made by the factory registered for that DeviceType, created lazily per
// (process set, device) the first time a response for it executes (at the same point on every
// member rank, so the factory may run collectives over the control plane, e.g. to share an NCCL
// unique id). Thus a GPU backend plugs in for Device::kCuda while the transport's control plane
// stays.
//
// The engine does the negotiation, fusion planning, Average -> Sum + postscale, and zero inputs for
// joined ranks; a data plane only moves and combines bytes.
#ifndef HVX_CORE_TRANSPORT_H_
#define HVX_CORE_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hvx/common/env.h"
#include "hvx/common/types.h"
#include "hvx/core/api.h"

namespace hvx {

// Marks the phases of one executing response in the timeline (MEMCPY_IN_FUSION_BUFFER,
// MPI_ALLREDUCE, NCCL_ALLREDUCE, ...). Start/End pairs nest. Cheap no-ops when no timeline runs.
class ActivityRecorder {
 public:
  virtual ~ActivityRecorder() = default;
  virtual void Start(absl::string_view activity) = 0;
  virtual void End() = 0;
};

// Start at construction, End at destruction.
class ScopedActivity {
 public:
  ScopedActivity(ActivityRecorder* recorder, absl::string_view activity) : recorder_(recorder) {
    recorder_->Start(activity);
  }
  ~ScopedActivity() { recorder_->End(); }
  ScopedActivity(const ScopedActivity&) = delete;
  ScopedActivity& operator=(const ScopedActivity&) = delete;

 private:
  ActivityRecorder* recorder_;
};

// One or more allreduces fused into one (same dtype, device, op and scales). inputs[i] and
// outputs[i] have the same element count and may alias. An input with data() == nullptr stands
// for zeros (this rank has joined); its output is then nullptr too and is not written.
struct AllreduceWork {
  std::vector<std::string> names;
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> outputs;
  DataType dtype = DataType::kFloat32;
  Device device;
  ReduceOp op =
      ReduceOp::kSum;  // never kAverage: the engine makes the set size postscale's divisor
  double prescale_factor = 1.0;
  Scale postscale_factor;
  // Bytes the fused buffer may use (the fusion threshold, at least the largest tensor).
  int64_t fusion_buffer_bytes = 0;
  // Reduce each element in an order that does not depend on what else is fused
  // (InitOptions::fixed_reduction_order). The MPI CPU plane does; the NCCL plane ignores it (NCCL
  // chooses its algorithm, and so the order, by message size).
  bool fixed_order = true;
  ActivityRecorder* activity = nullptr;
};

// Concatenation along the first dimension. rows[r] is rank r's first dimension; output holds
// sum(rows) * row_elements elements.
struct AllgatherWork {
  std::string name;
  TensorRef input;
  TensorRef output;
  std::vector<int64_t> rows;
  int64_t row_elements = 1;
  ActivityRecorder* activity = nullptr;
};

// In place from `root` (a rank of the communicator).
struct BroadcastWork {
  std::string name;
  TensorRef tensor;
  int root = 0;
  ActivityRecorder* activity = nullptr;
};

// send_rows[j] rows of input go to rank j (in order); recv_rows[j] rows arrive from rank j.
struct AlltoallWork {
  std::string name;
  TensorRef input;
  TensorRef output;
  std::vector<int64_t> send_rows;
  std::vector<int64_t> recv_rows;
  int64_t row_elements = 1;
  ActivityRecorder* activity = nullptr;
};

// Sum (after prescale; postscale applied to the result) and scatter: rank r receives recv_rows[r]
// rows, the rows of lower ranks first.
struct ReduceScatterWork {
  std::string name;
  TensorRef input;
  TensorRef output;
  std::vector<int64_t> recv_rows;
  int64_t row_elements = 1;
  double prescale_factor = 1.0;
  Scale postscale_factor;  // an Average's set size is its divisor
  ActivityRecorder* activity = nullptr;
};

// Collectives on tensor memory of one device kind among the ranks of one Communicator. Each call
// returns when the outputs are written (for a GPU plane: when the work is ordered on the stream the
// framework will use next, or complete, as that backend documents). Errors name the tensor(s).
class DataPlane {
 public:
  virtual ~DataPlane() = default;
  virtual absl::Status Allreduce(const AllreduceWork& work) = 0;
  virtual absl::Status Allgather(const AllgatherWork& work) = 0;
  virtual absl::Status Broadcast(const BroadcastWork& work) = 0;
  virtual absl::Status Alltoall(const AlltoallWork& work) = 0;
  virtual absl::Status ReduceScatter(const ReduceScatterWork& work) = 0;
};

// A group of ranks (the world, or a process set) with its control plane and host data plane.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Control plane. Messages are opaque bytes.
  // Rank 0 receives every rank's message in rank order in *all; other ranks get *all cleared.
  virtual absl::Status Gather(const std::string& mine, std::vector<std::string>* all) = 0;
  // Rank 0's *message replaces *message on every rank.
  virtual absl::Status Broadcast(std::string* message) = 0;
  // Every rank receives every rank's message in rank order.
  virtual absl::Status Allgather(const std::string& mine, std::vector<std::string>* all) = 0;
  // Element-wise AND of *bits over all ranks (same length everywhere), in place.
  virtual absl::Status BitwiseAnd(std::vector<uint64_t>* bits) = 0;
  virtual absl::Status Barrier() = 0;

  // Host-memory collectives among these ranks: the transport's own. The engine may run CPU
  // tensors on a plane registered with HVX_REGISTER_CPU_PLANE instead, which falls back on this.
  virtual DataPlane& cpu() = 0;

  // Point-to-point bytes on the data path, for planes built over this communicator (hvx/shm's
  // cross-host link). Send starts sending `n` bytes to rank `to`; `data` must stay unchanged until
  // Flush returns. Recv returns when `n` bytes from rank `from` have arrived; messages between two
  // ranks arrive in sending order. Flush completes every Send started so far. Waits fail with
  // DeadlineExceeded after InitOptions::collective_timeout_s, naming the peer.
  virtual absl::Status Send(int to, const char* data, size_t n) = 0;
  virtual absl::Status Recv(int from, char* data, size_t n) = 0;
  virtual absl::Status Flush() = 0;

  // A communicator of the members `ranks` (ascending ranks of this communicator). Collective over
  // this communicator: every rank calls it with the same list. Members get the new communicator,
  // with ranks numbered by position in `ranks`; others get nullptr.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Subset(const std::vector<int>& ranks) = 0;

  // Communicators of the ranks that pass the same `color` (>= 0), each numbered by `key` (ties by
  // rank in this communicator), as MPI_Comm_split. Collective over this communicator: every rank
  // calls it, each with its own color and key, in one call where Subset would take one per group.
  // A rank passing a negative color gets nullptr. The engine gathers requests per host through
  // these (one communicator per host, one of the hosts' first ranks).
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) = 0;
};

// A process-wide backend. Created once per Init.
class Transport {
 public:
  virtual ~Transport() = default;
  // Starts the transport (MPI_Init and friends) and returns the world communicator. Called once, on
  // the engine's background thread. Every wait of its communicators for peers (control and data
  // plane) fails with DeadlineExceeded after options.collective_timeout_s.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Start(const InitOptions& options) = 0;
  // Releases the transport after every communicator has been destroyed; every rank calls it at
  // the same point of the job. Should give up with an error at `deadline` (MonotonicNow() +
  // InitOptions::shutdown_timeout_s, hvx/common/clock.h: compare it with MonotonicNow(), never
  // absl::Now()); the engine also bounds the wait in case it cannot.
  virtual absl::Status Finalize(absl::Time deadline) = 0;
  // Short description for the Init banner, e.g. "mpi (MPICH 4.0.2)".
  virtual std::string Describe() const = 0;
};

using TransportFactory = std::function<std::unique_ptr<Transport>()>;

// Makes a transport available to Init under `name`. Returns true (for static registration);
// a second registration under the same name replaces the first.
bool RegisterTransport(const std::string& name, TransportFactory factory);
// Names registered so far, sorted.
std::vector<std::string> RegisteredTransports();
// The factory registered under `name`, or an empty function.
TransportFactory FindTransport(const std::string& name);

// What a device data plane factory gets: the process set's communicator (for its control plane
// and, e.g., host staging through its cpu() plane) and where this rank sits.
struct DataPlaneContext {
  Communicator* comm = nullptr;    // lives as long as the data plane
  std::vector<int> global_ranks;   // of the set's members, by set rank
  std::vector<std::string> hosts;  // of the set's members, by set rank: one name per host
  int global_rank = 0;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  Device device;  // this rank's own device of the type (that of its tensors)
  const InitOptions* options =
      nullptr;  // what Init was given (GPU knobs); lives as long as the plane
};

using DataPlaneFactory =
    std::function<absl::StatusOr<std::unique_ptr<DataPlane>>(const DataPlaneContext&)>;

// Registers the data plane for tensors on `type` devices (kCuda). Returns true.
bool RegisterDataPlane(DeviceType type, DataPlaneFactory factory);
DataPlaneFactory FindDataPlane(DeviceType type);

// The negotiation vote (Communicator::BitwiseAnd) by another way than the control plane's, e.g.
// through shared memory among the ranks of one host (hvx/shm).
class HostVote {
 public:
  virtual ~HostVote() = default;
  // At most MaxWords() words, the same number on every rank; errors name the peer.
  virtual absl::Status And(std::vector<uint64_t>* bits) = 0;
  virtual size_t MaxWords() const = 0;
};

// A data plane for host tensors over a process set's communicator (ctx.device is the CPU), which
// runs on `fallback` (the communicator's cpu(), outliving the plane) what it does not serve
// itself. The engine makes it lazily, at the first CPU response of the set (at the same point on
// every member, so it may run collectives over ctx.comm), when InitOptions::cpu_plane is not
// "mpi"; the plane decides, agreed by every member, whether it applies (it keeps `fallback` where
// it does not, or fails every op where cpu_plane is "shm").
using CpuPlaneFactory = std::function<absl::StatusOr<std::unique_ptr<DataPlane>>(
    const DataPlaneContext& ctx, DataPlane* fallback)>;
// Collective over ctx.comm at the set's first vote: the vote to use for it, or nullptr where it
// does not apply (the engine then votes with Communicator::BitwiseAnd). Every member must get the
// same answer.
using HostVoteFactory =
    std::function<absl::StatusOr<std::unique_ptr<HostVote>>(const DataPlaneContext& ctx)>;
struct CpuPlaneProvider {
  CpuPlaneFactory plane;
  HostVoteFactory vote;
};

// Registers the provider of the CPU plane HVX_CPU_PLANE=`name` selects ("shm"). Returns true.
bool RegisterCpuPlane(const std::string& name, CpuPlaneProvider provider);
// The provider registered under `name`, or one with empty functions.
CpuPlaneProvider FindCpuPlane(const std::string& name);

// What an Init-time check sees: the world, where this rank sits, and what Init read.
struct InitCheckContext {
  Communicator* comm = nullptr;  // the world; valid during the call only
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string host;
  int visible_gpus = 0;  // hvx::CountVisibleGpus of Init's environment and driver directory
  const Environment* environment = nullptr;
};

// A check a backend needs before any op runs, e.g. that each rank has a GPU of its own. Init runs
// every registered check (in name order) on every rank right after the topology is known, before
// the ranks agree on Init's outcome: a failure on any rank fails Init on every rank with that
// rank's message. A check may run collectives on comm, so it must make the same calls on every
// rank whatever it finds (gather first, judge after), and return OK where it does not apply.
using InitCheck = std::function<absl::Status(const InitCheckContext&)>;

// Registers `check` under `name`; a second registration replaces it and an empty function removes
// it. Returns true (for static registration).
bool RegisterInitCheck(const std::string& name, InitCheck check);
// The registered checks, by name.
std::vector<std::pair<std::string, InitCheck>> RegisteredInitChecks();

}  // namespace hvx

#define HVX_TRANSPORT_CONCAT_INNER_(a, b) a##b
#define HVX_TRANSPORT_CONCAT_(a, b) HVX_TRANSPORT_CONCAT_INNER_(a, b)

// Registers at static-initialization time. Put it in a cc_library with alwayslink = True.
#define HVX_REGISTER_TRANSPORT(name, factory)                                                     \
  static const bool HVX_TRANSPORT_CONCAT_(hvx_transport_registered_, __LINE__) [[maybe_unused]] = \
      ::hvx::RegisterTransport(#name, factory)
#define HVX_REGISTER_INIT_CHECK(name, check)                                                       \
  static const bool HVX_TRANSPORT_CONCAT_(hvx_init_check_registered_, __LINE__) [[maybe_unused]] = \
      ::hvx::RegisterInitCheck(#name, check)
#define HVX_REGISTER_CPU_PLANE(name, plane_factory, vote_factory)                                 \
  static const bool HVX_TRANSPORT_CONCAT_(hvx_cpu_plane_registered_, __LINE__) [[maybe_unused]] = \
      ::hvx::RegisterCpuPlane(#name, ::hvx::CpuPlaneProvider{plane_factory, vote_factory})
#define HVX_REGISTER_DATA_PLANE(name, device_type, factory)                                        \
  static const bool HVX_TRANSPORT_CONCAT_(hvx_data_plane_registered_, __LINE__) [[maybe_unused]] = \
      ::hvx::RegisterDataPlane(device_type, factory)

#endif  // HVX_CORE_TRANSPORT_H_
