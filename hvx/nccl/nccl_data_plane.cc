// The NCCL data plane, in one file because every op shares the plane's stream, events, fusion
// buffer and communicator cache and the one error path (an asynchronous NCCL error aborts every
// communicator); the pure decisions (policy.cc, grid.cc, nccl_error.cc) and the kernels live apart.
#include "hvx/nccl/nccl_data_plane.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "hvx/common/clock.h"
#include "hvx/common/cluster.h"
#include "hvx/common/env.h"
#include "hvx/common/layout.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/common/watchdog.h"
#include "hvx/core/agreement.h"
#include "hvx/nccl/comm_cache.h"
#include "hvx/nccl/kernels.h"
#include "hvx/nccl/nccl_error.h"

namespace hvx {
namespace nccl {
namespace {

// Alignment (in elements) of each host's shards in hierarchical allreduce, so every shard starts on
// a 256-byte boundary for the widest type.
constexpr int64_t kShardAlignElements = 64;

std::string ThisHost() { return HostName("unknown-host"); }

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", static_cast<int>(err), " ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

std::string Label(const std::vector<std::string>& names) {
  if (names.size() <= 3) return absl::StrJoin(names, "', '");
  return absl::StrCat(names[0], "', '", names[1], "' and ", names.size() - 2, " more");
}

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kUint8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBfloat16:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      return ncclBfloat16;
#else
      break;  // ChooseReduction widens bfloat16 to float32 before this NCCL
#endif
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt16:
      break;  // ChooseReduction refuses int16; data moves go as bytes
  }
  return ncclFloat32;
}

ncclRedOp_t NcclRedOp(NcclOp op) {
  switch (op) {
    case NcclOp::kSum:
      return ncclSum;
    case NcclOp::kProd:
      return ncclProd;
    case NcclOp::kMax:
      return ncclMax;
    case NcclOp::kMin:
      return ncclMin;
    case NcclOp::kAvg:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      return ncclAvg;
#else
      break;  // ChooseReduction picks kAvg only where the loaded NCCL has it
#endif
  }
  return ncclSum;
}

ReduceOp CpuReduceOp(NcclOp op) {
  switch (op) {
    case NcclOp::kProd:
      return ReduceOp::kProduct;
    case NcclOp::kMax:
      return ReduceOp::kMax;
    case NcclOp::kMin:
      return ReduceOp::kMin;
    default:
      return ReduceOp::kSum;
  }
}

// A phase in the timeline; the recorder may be absent.
class Phase {
 public:
  Phase(ActivityRecorder* recorder, absl::string_view name) : recorder_(recorder) {
    if (recorder_ != nullptr) recorder_->Start(name);
  }
  ~Phase() {
    if (recorder_ != nullptr) recorder_->End();
  }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  ActivityRecorder* recorder_;
};

// Everything one GPU needs, shared by the data planes of every process set on it: the stream, the
// events ordering it against the caller's stream, the fusion buffer, pinned host staging, and the
// communicators. Released when the last plane on the GPU goes.
class DeviceContext {
 public:
  static absl::StatusOr<std::shared_ptr<DeviceContext>> Get(int device) {
    static std::mutex* mu = new std::mutex;
    static auto* live = new std::map<int, std::weak_ptr<DeviceContext>>;
    std::lock_guard<std::mutex> lock(*mu);
    if (auto existing = (*live)[device].lock()) return existing;
    std::shared_ptr<DeviceContext> made(new DeviceContext(device));
    HVX_RETURN_IF_ERROR(made->Init());
    (*live)[device] = made;
    return made;
  }

  ~DeviceContext() {
    cudaSetDevice(device_);
    comms_.Clear();
    if (fusion_ != nullptr) cudaFree(fusion_);
    if (host_ != nullptr) cudaFreeHost(host_);
    if (caller_ready_ != nullptr) cudaEventDestroy(caller_ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const DeviceLimits& limits() const { return limits_; }
  CommunicatorCache<ncclComm_t>& comms() { return comms_; }

  // Makes the stream wait for the caller's work on `tensors`: each one's ready event (recorded on
  // the framework's current stream when the op was submitted, so a producer on a side stream is
  // ordered too), and what is queued so far on the legacy default stream (for callers that set
  // no event).
  absl::Status OrderAfterCaller(std::initializer_list<absl::Span<const TensorRef>> tensors) {
    HVX_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
    HVX_RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(caller_ready_, cudaStreamLegacy), "cudaEventRecord"));
    HVX_RETURN_IF_ERROR(
        CudaStatus(cudaStreamWaitEvent(stream_, caller_ready_, 0), "cudaStreamWaitEvent"));
    const void* last = nullptr;  // fused tensors of one backward often share one event
    for (absl::Span<const TensorRef> group : tensors) {
      for (const TensorRef& t : group) {
        if (t.ready() == nullptr || t.ready()->native() == last) continue;
        last = t.ready()->native();
        HVX_RETURN_IF_ERROR(CudaStatus(
            cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(t.ready()->native()), 0),
            "cudaStreamWaitEvent (a tensor's ready event)"));
      }
    }
    return absl::OkStatus();
  }

  // Device memory of at least `bytes`, grown by doubling (work is complete between ops, so the old
  // buffer is free to release).
  absl::StatusOr<char*> Fusion(size_t bytes) {
    if (bytes > fusion_bytes_) {
      size_t want = std::max<size_t>(bytes, std::max<size_t>(fusion_bytes_ * 2, size_t{1} << 20));
      if (fusion_ != nullptr) cudaFree(fusion_);
      fusion_ = nullptr;
      fusion_bytes_ = 0;
      HVX_RETURN_IF_ERROR(
          CudaStatus(cudaMalloc(reinterpret_cast<void**>(&fusion_), want),
                     absl::StrCat("allocating a ", want, "-byte fusion buffer on cuda:", device_)));
      fusion_bytes_ = want;
    }
    return fusion_;
  }

  absl::StatusOr<char*> Host(size_t bytes) {
    if (bytes > host_bytes_) {
      size_t want = std::max<size_t>(bytes, std::max<size_t>(host_bytes_ * 2, size_t{1} << 20));
      if (host_ != nullptr) cudaFreeHost(host_);
      host_ = nullptr;
      host_bytes_ = 0;
      HVX_RETURN_IF_ERROR(
          CudaStatus(cudaMallocHost(reinterpret_cast<void**>(&host_), want),
                     absl::StrCat("allocating ", want, " bytes of pinned host memory")));
      host_bytes_ = want;
    }
    return host_;
  }

  cudaEvent_t done() const { return done_; }

  // After an asynchronous NCCL error the GPU's communicators are in an unknown state: they are
  // aborted (not destroyed, which could wait on the dead peer) and every later op on this GPU, in
  // any process set, fails with the first error, as it does on the peers.
  void Poison(const absl::Status& status) {
    if (!broken_.ok()) return;
    broken_ = status;
    abort_on_release_ = true;
    comms_.Clear();
  }
  const absl::Status& broken() const { return broken_; }

 private:
  explicit DeviceContext(int device)
      : device_(device), comms_([this](ncclComm_t c) {
          abort_on_release_ ? ncclCommAbort(c) : ncclCommDestroy(c);
        }) {}

  absl::Status Init() {
    HVX_RETURN_IF_ERROR(
        CudaStatus(cudaSetDevice(device_), absl::StrCat("cudaSetDevice(", device_, ")")));
    HVX_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    HVX_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&caller_ready_, cudaEventDisableTiming),
                                   "cudaEventCreate"));
    HVX_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate"));
    return CudaStatus(QueryDeviceLimits(device_, &limits_), "reading the device limits");
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_ready_ = nullptr;
  cudaEvent_t done_ = nullptr;
  DeviceLimits limits_;
  char* fusion_ = nullptr;
  size_t fusion_bytes_ = 0;
  char* host_ = nullptr;
  size_t host_bytes_ = 0;
  absl::Status broken_;
  bool abort_on_release_ = false;
  CommunicatorCache<ncclComm_t> comms_;
};

class NcclDataPlane : public DataPlane {
 public:
  NcclDataPlane(const DataPlaneContext& ctx, const NcclOptions& options)
      : ctx_(ctx), options_(options) {}

  absl::Status Setup();

  absl::Status Allreduce(const AllreduceWork& work) override;
  absl::Status Allgather(const AllgatherWork& work) override;
  absl::Status Broadcast(const BroadcastWork& work) override;
  absl::Status Alltoall(const AlltoallWork& work) override;
  absl::Status ReduceScatter(const ReduceScatterWork& work) override;

 private:
  int set_rank() const { return ctx_.comm->rank(); }
  int set_size() const { return ctx_.comm->size(); }

  absl::Status NcclCheck(ncclResult_t result, absl::string_view call, absl::string_view tensor,
                         ncclComm_t comm, int comm_size, bool asynchronous = false);
  absl::StatusOr<ncclComm_t> CommFor(const std::vector<int>& set_members, int my_index,
                                     bool leader_id_ready, const ncclUniqueId* id);
  absl::Status CheckDevice(const TensorRef& t, const std::string& name) const;
  absl::Status Usable() const { return dev_->broken(); }
  // Queues out = out_type(factor * in); bool is copied.
  absl::Status ScaleCopy(const void* in, DataType in_type, void* out, DataType out_type, int64_t n,
                         double factor, const std::string& tensor);
  // Waits for everything queued so far, polling the communicators for asynchronous errors.
  absl::Status Complete(absl::string_view call, const std::string& tensor);
  absl::Status HierarchicalAllreduce(char* buf, int64_t shard, DataType wire, NcclOp op,
                                     const AllreduceWork& work, const std::string& label);

  const DataPlaneContext ctx_;
  const NcclOptions options_;
  std::string host_;
  int version_ = 0;
  std::shared_ptr<DeviceContext> dev_;
  ncclComm_t comm_ = nullptr;
  AllreducePlan plan_;
  ncclComm_t local_comm_ = nullptr;
  int local_index_ = 0;
  int local_size_ = 1;
  std::unique_ptr<Communicator> cross_;
};

absl::Status NcclDataPlane::NcclCheck(ncclResult_t result, absl::string_view call,
                                      absl::string_view tensor, ncclComm_t comm, int comm_size,
                                      bool asynchronous) {
  if (result == ncclSuccess) return absl::OkStatus();
  NcclErrorContext where;
  where.call = std::string(call);
  where.tensor = std::string(tensor);
  where.rank = ctx_.global_rank;
  where.set_size = comm_size;
  where.device = dev_ != nullptr ? dev_->device() : -1;
  where.host = host_;
  where.asynchronous = asynchronous;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (const char* last = ncclGetLastError(comm)) where.last_error = last;
#endif
  where.dev_shm_bytes = FilesystemBytes("/dev/shm");
  where.socket_ifname = Environment::Process().Get("NCCL_SOCKET_IFNAME").value_or("");
  return NcclErrorToStatus(static_cast<int>(result), ncclGetErrorString(result), version_, where);
}

absl::Status NcclDataPlane::Setup() {
  host_ = ThisHost();
  ncclGetVersion(&version_);
  // Every member reports its GPU (or why it has none) before anything can fail, so that an error on
  // one rank fails all of them at the same point instead of leaving the others in a collective.
  MemberInfo mine;
  mine.host = host_;
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  absl::StatusOr<int> device = SelectDevice(ctx_.local_rank, ctx_.local_size, visible, host_);
  if (!device.ok()) {
    mine.error = std::string(device.status().message());
  } else if (*device != ctx_.device.index) {
    mine.error = absl::StrCat(
        "a tensor is on cuda:", ctx_.device.index, " but local rank ", ctx_.local_rank, " on host ",
        host_, " uses cuda:", *device,
        "; put this rank's tensors on the GPU of its local rank (see BindLocalDevice)");
  } else {
    mine.device = *device;
    char bus[64] = {};
    cudaError_t err = cudaDeviceGetPCIBusId(bus, sizeof(bus), *device);
    if (err != cudaSuccess) {
      mine.error = std::string(
          CudaStatus(err, absl::StrCat("cudaDeviceGetPCIBusId(", *device, ")")).message());
    }
    mine.gpu = bus;
  }
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(ctx_.comm->Allgather(EncodeMemberInfo(mine), &all));
  std::vector<MemberInfo> members;
  for (const std::string& text : all) {
    HVX_ASSIGN_OR_RETURN(MemberInfo m, DecodeMemberInfo(text));
    members.push_back(std::move(m));
  }
  HVX_RETURN_IF_ERROR(CheckMembers(members, ctx_.global_ranks));
  HVX_ASSIGN_OR_RETURN(dev_, DeviceContext::Get(mine.device));

  // The set's communicator. Cache hits agree on every member (see comm_cache.h), so the id
  // broadcast happens on all or none.
  std::vector<int> everyone(set_size());
  for (int i = 0; i < set_size(); ++i) everyone[i] = i;
  HVX_ASSIGN_OR_RETURN(comm_, CommFor(everyone, set_rank(), false, nullptr));

  // Hosts as the engine grouped them at Init (name, boot and /dev/shm: hvx::HostIdentity), as
  // for the CPU planes and Init's topology.
  const HostLayout layout = LayoutOf(ctx_.hosts);
  plan_ = PlanAllreduce(options_.hierarchical_allreduce, layout);
  if (set_rank() == 0) {
    HVX_LOG(INFO) << "NCCL " << NcclVersionString(version_) << " data plane for " << set_size()
                  << " ranks on cuda:" << mine.device << ", allreduce " << plan_.reason;
  }
  if (plan_.algorithm != AllreduceAlgorithm::kHierarchical) return absl::OkStatus();

  // Host communicators: each host's first member makes an id; one allgather shares them all.
  const std::vector<int> local = layout.LocalMembers(set_rank());
  local_index_ = layout.local_of[set_rank()];
  local_size_ = static_cast<int>(local.size());
  CommKey local_key{{}, mine.device};
  for (int r : local) local_key.global_ranks.push_back(ctx_.global_ranks[r]);
  const bool have_local = dev_->comms().Contains(local_key);
  std::string offer;
  if (!have_local && local_index_ == 0) {
    ncclUniqueId id;
    HVX_RETURN_IF_ERROR(
        NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId", "", nullptr, local_size_));
    offer.assign(id.internal, sizeof(id.internal));
  }
  std::vector<std::string> offers;
  HVX_RETURN_IF_ERROR(ctx_.comm->Allgather(offer, &offers));
  ncclUniqueId local_id;
  const std::string& leader_offer = offers[local.front()];
  if (!have_local) {
    if (leader_offer.size() != sizeof(local_id.internal)) {
      return absl::InternalError(
          absl::StrCat("rank ", ctx_.global_rank, ": the NCCL id from host leader rank ",
                       ctx_.global_ranks[local.front()], " has ", leader_offer.size(), " bytes"));
    }
    std::copy(leader_offer.begin(), leader_offer.end(), local_id.internal);
  }
  HVX_ASSIGN_OR_RETURN(local_comm_, CommFor(local, local_index_, true, &local_id));

  // Cross-host communicators on the control plane's transport, one per local index; every member
  // takes part in creating each (Subset is collective over the set).
  for (int l = 0; l < local_size_; ++l) {
    HVX_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> cross,
                         ctx_.comm->Subset(layout.CrossMembers(l)));
    if (l == local_index_) cross_ = std::move(cross);
  }
  if (cross_ == nullptr) {
    return absl::InternalError(
        absl::StrCat("rank ", ctx_.global_rank, " is in no cross-host communicator"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ncclComm_t> NcclDataPlane::CommFor(const std::vector<int>& set_members, int my_index,
                                                  bool leader_id_ready, const ncclUniqueId* id) {
  CommKey key{{}, dev_->device()};
  for (int r : set_members) key.global_ranks.push_back(ctx_.global_ranks[r]);
  const int n = static_cast<int>(set_members.size());
  auto create = [&]() -> absl::StatusOr<ncclComm_t> {
    ncclUniqueId uid;
    if (leader_id_ready) {
      uid = *id;
    } else {
      // The whole set: rank 0 makes the id and broadcasts it, or its failure, over the control
      // plane.
      std::string message;
      if (set_rank() == 0) {
        ncclResult_t r = ncclGetUniqueId(&uid);
        message =
            r == ncclSuccess
                ? absl::StrCat("I", std::string(uid.internal, sizeof(uid.internal)))
                : absl::StrCat("E", NcclCheck(r, "ncclGetUniqueId", "", nullptr, n).message());
      }
      HVX_RETURN_IF_ERROR(ctx_.comm->Broadcast(&message));
      if (message.empty() || message[0] != 'I' || message.size() != 1 + sizeof(uid.internal)) {
        return absl::UnavailableError(
            absl::StrCat("rank ", ctx_.global_rank, ": no NCCL id from rank ", ctx_.global_ranks[0],
                         ": ", message.empty() ? std::string("empty message") : message.substr(1)));
      }
      std::copy(message.begin() + 1, message.end(), uid.internal);
    }
    HVX_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(dev_->device()), "cudaSetDevice"));
    ncclComm_t comm = nullptr;
    ncclResult_t r;
    {
      // ncclCommInitRank waits for every rank of the set with no deadline: past the collective
      // timeout a rank that froze inside it ends this process, saying so (watchdog.h).
      const absl::Duration timeout = ctx_.options != nullptr
                                         ? absl::Seconds(ctx_.options->collective_timeout_s)
                                         : absl::InfiniteDuration();
      Watchdog dog(
          timeout,
          absl::StrCat("rank ", ctx_.global_rank, ": ncclCommInitRank did not complete within ",
                       absl::FormatDuration(timeout),
                       " (HVX_COLLECTIVE_TIMEOUT_S): one of global ranks ",
                       absl::StrJoin(ctx_.global_ranks, ","),
                       " froze or failed inside it, after every rank had its id"),
          kSetupTimeoutExitCode);
      r = ncclCommInitRank(&comm, n, uid, my_index);
    }
    if (r != ncclSuccess) return NcclCheck(r, "ncclCommInitRank", "", comm, n);
    return comm;
  };
  HVX_ASSIGN_OR_RETURN(ncclComm_t * comm, dev_->comms().GetOrCreate(key, create));
  return *comm;
}

absl::Status NcclDataPlane::CheckDevice(const TensorRef& t, const std::string& name) const {
  if (t.data() == nullptr || t.device() == Device::Cuda(dev_->device())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' on rank ", ctx_.global_rank,
                                                 " is on ", t.device().ToString(),
                                                 ", but this rank's GPU is cuda:", dev_->device()));
}

absl::Status NcclDataPlane::ScaleCopy(const void* in, DataType in_type, void* out,
                                      DataType out_type, int64_t n, double factor,
                                      const std::string& tensor) {
  if (n == 0) return absl::OkStatus();
  if (in_type == DataType::kBool) {
    if (in == out) return absl::OkStatus();
    return CudaStatus(
        cudaMemcpyAsync(out, in, static_cast<size_t>(n), cudaMemcpyDeviceToDevice, dev_->stream()),
        absl::StrCat("copying tensor '", tensor, "'"));
  }
  return CudaStatus(
      ScaleConvert(in, in_type, out, out_type, n, factor, dev_->limits(), dev_->stream()),
      absl::StrCat("scaling tensor '", tensor, "' (", DataTypeName(in_type), " -> ",
                   DataTypeName(out_type), ")"));
}

absl::Status NcclDataPlane::Complete(absl::string_view call, const std::string& tensor) {
  HVX_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(dev_->done(), dev_->stream()), "cudaEventRecord"));
  HVX_RETURN_IF_ERROR(
      CudaStatus(cudaStreamWaitEvent(cudaStreamLegacy, dev_->done(), 0), "cudaStreamWaitEvent"));
  // A peer that died or froze leaves the collective waiting on the GPU forever: give up at the
  // collective timeout and abort the communicators (Poison), as the CPU plane gives up its waits.
  const absl::Duration timeout = ctx_.options != nullptr
                                     ? absl::Seconds(ctx_.options->collective_timeout_s)
                                     : absl::InfiniteDuration();
  const absl::Time deadline = MonotonicNow() + timeout;
  while (true) {
    cudaError_t q = cudaEventQuery(dev_->done());
    if (q == cudaSuccess) return absl::OkStatus();
    if (MonotonicNow() >= deadline) {
      absl::Status late = absl::DeadlineExceededError(
          absl::StrCat(call, " for tensor '", tensor, "' on rank ", ctx_.global_rank,
                       " did not complete within ", absl::FormatDuration(timeout),
                       " (HVX_COLLECTIVE_TIMEOUT_S): not every one of global ranks ",
                       RankRanges(ctx_.global_ranks),
                       " took part; a rank failed, froze or is waiting in another collective"));
      dev_->Poison(late);
      return late;
    }
    if (q != cudaErrorNotReady) {
      return CudaStatus(
          q, absl::StrCat(call, " for tensor '", tensor, "' on rank ", ctx_.global_rank));
    }
    for (ncclComm_t c : {comm_, local_comm_}) {
      if (c == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(c, &async);
      if (r == ncclSuccess && async == ncclSuccess) continue;
      const int n = c == comm_ ? set_size() : local_size_;
      absl::Status failed =
          NcclCheck(r != ncclSuccess ? r : async, call, tensor, c, n, /*asynchronous=*/true);
      dev_->Poison(failed);
      return failed;
    }
    sched_yield();
  }
}

absl::Status NcclDataPlane::Allreduce(const AllreduceWork& work) {
  HVX_RETURN_IF_ERROR(Usable());
  const std::string label = Label(work.names);
  for (size_t i = 0; i < work.inputs.size(); ++i) {
    HVX_RETURN_IF_ERROR(CheckDevice(work.inputs[i], work.names[i]));
    HVX_RETURN_IF_ERROR(CheckDevice(work.outputs[i], work.names[i]));
  }
  const bool hierarchical = plan_.algorithm == AllreduceAlgorithm::kHierarchical;
  absl::StatusOr<ReductionChoice> choice =
      ChooseReduction(work.op, work.dtype, work.prescale_factor, work.postscale_factor.value(),
                      set_size(), version_, options_.half_in_float32, /*allow_avg=*/!hierarchical);
  if (!choice.ok()) return Annotate(choice.status(), absl::StrCat("tensor '", label, "'"));
  const ReductionChoice rc = *choice;
  int64_t total = 0;
  for (const TensorRef& t : work.inputs) total += t.num_elements();
  if (total == 0) return absl::OkStatus();
  const DataType wire = rc.widen_to_float32 ? DataType::kFloat32 : work.dtype;
  const size_t wire_size = DataTypeSize(wire);
  Phase phase(work.activity, hierarchical ? "NCCL_HIERARCHICAL_ALLREDUCE" : "NCCL_ALLREDUCE");
  HVX_RETURN_IF_ERROR(dev_->OrderAfterCaller({work.inputs, work.outputs}));

  const bool direct = work.inputs.size() == 1 && work.inputs[0].data() != nullptr &&
                      !rc.widen_to_float32 && !hierarchical;
  if (direct) {
    const void* in = work.inputs[0].data();
    void* out = work.outputs[0].data();
    if (rc.prescale != 1.0) {
      HVX_RETURN_IF_ERROR(ScaleCopy(in, work.dtype, out, work.dtype, total, rc.prescale, label));
      in = out;
    }
    HVX_RETURN_IF_ERROR(NcclCheck(
        ncclAllReduce(in, out, total, NcclType(wire), NcclRedOp(rc.op), comm_, dev_->stream()),
        "ncclAllReduce", label, comm_, set_size()));
    HVX_RETURN_IF_ERROR(ScaleCopy(out, work.dtype, out, work.dtype, total, rc.postscale, label));
    return Complete("ncclAllReduce", label);
  }

  HierarchicalShards shards{total, total};
  if (hierarchical) shards = ShardForHierarchical(total, local_size_, kShardAlignElements);
  HVX_ASSIGN_OR_RETURN(char* buf,
                       dev_->Fusion(static_cast<size_t>(shards.padded_elements) * wire_size));
  int64_t offset = 0;
  for (size_t i = 0; i < work.inputs.size(); ++i) {
    const TensorRef& in = work.inputs[i];
    const int64_t n = in.num_elements();
    char* at = buf + offset * wire_size;
    if (in.data() == nullptr) {
      HVX_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(at, 0, n * wire_size, dev_->stream()),
                                     "zeroing a joined slot"));
    } else {
      HVX_RETURN_IF_ERROR(
          ScaleCopy(in.data(), work.dtype, at, wire, n, rc.prescale, work.names[i]));
    }
    offset += n;
  }
  if (shards.padded_elements > total) {
    HVX_RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(buf + total * wire_size, 0,
                                   (shards.padded_elements - total) * wire_size, dev_->stream()),
                   "zeroing the shard padding"));
  }
  if (hierarchical) {
    HVX_RETURN_IF_ERROR(
        HierarchicalAllreduce(buf, shards.shard_elements, wire, rc.op, work, label));
  } else {
    HVX_RETURN_IF_ERROR(NcclCheck(
        ncclAllReduce(buf, buf, total, NcclType(wire), NcclRedOp(rc.op), comm_, dev_->stream()),
        "ncclAllReduce", label, comm_, set_size()));
  }
  offset = 0;
  for (size_t i = 0; i < work.outputs.size(); ++i) {
    const TensorRef& out = work.outputs[i];
    const int64_t n = work.inputs[i].num_elements();
    if (out.data() != nullptr) {
      HVX_RETURN_IF_ERROR(ScaleCopy(buf + offset * wire_size, wire, out.data(), work.dtype, n,
                                    rc.postscale, work.names[i]));
    }
    offset += n;
  }
  return Complete("ncclAllReduce", label);
}

absl::Status NcclDataPlane::HierarchicalAllreduce(char* buf, int64_t shard, DataType wire,
                                                  NcclOp op, const AllreduceWork& work,
                                                  const std::string& label) {
  const size_t wire_size = DataTypeSize(wire);
  char* mine = buf + static_cast<int64_t>(local_index_) * shard * wire_size;
  HVX_RETURN_IF_ERROR(NcclCheck(ncclReduceScatter(buf, mine, shard, NcclType(wire), NcclRedOp(op),
                                                  local_comm_, dev_->stream()),
                                "ncclReduceScatter (inside the host)", label, local_comm_,
                                local_size_));
  HVX_ASSIGN_OR_RETURN(char* host, dev_->Host(shard * wire_size));
  HVX_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host, mine, shard * wire_size, cudaMemcpyDeviceToHost, dev_->stream()),
      "copying the shard to the host"));
  HVX_RETURN_IF_ERROR(Complete("ncclReduceScatter (inside the host)", label));

  AllreduceWork across;
  across.names = work.names;
  across.inputs = {TensorRef(wire, TensorShape({shard}), host)};
  across.outputs = across.inputs;
  across.dtype = wire;
  across.device = Device::Cpu();
  across.op = CpuReduceOp(op);
  across.fusion_buffer_bytes = shard * static_cast<int64_t>(wire_size);
  across.activity = work.activity;
  HVX_RETURN_IF_ERROR(Annotate(cross_->cpu().Allreduce(across), "allreduce across hosts"));

  HVX_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(mine, host, shard * wire_size, cudaMemcpyHostToDevice, dev_->stream()),
      "copying the shard back to the GPU"));
  return NcclCheck(ncclAllGather(mine, buf, shard, NcclType(wire), local_comm_, dev_->stream()),
                   "ncclAllGather (inside the host)", label, local_comm_, local_size_);
}

absl::Status NcclDataPlane::Allgather(const AllgatherWork& work) {
  HVX_RETURN_IF_ERROR(Usable());
  HVX_RETURN_IF_ERROR(CheckDevice(work.input, work.name));
  HVX_RETURN_IF_ERROR(CheckDevice(work.output, work.name));
  if (static_cast<int>(work.rows.size()) != set_size()) {
    return absl::InvalidArgumentError(absl::StrCat("allgather '", work.name,
                                                   "': ", work.rows.size(), " row counts for ",
                                                   set_size(), " ranks"));
  }
  const size_t row_bytes =
      static_cast<size_t>(work.row_elements) * DataTypeSize(work.input.dtype());
  Phase phase(work.activity, "NCCL_ALLGATHER");
  HVX_RETURN_IF_ERROR(dev_->OrderAfterCaller({{&work.input, 1}, {&work.output, 1}}));
  const bool equal =
      std::all_of(work.rows.begin(), work.rows.end(), [&](int64_t r) { return r == work.rows[0]; });
  char* out = static_cast<char*>(work.output.data());
  if (equal) {
    if (work.rows[0] > 0) {
      HVX_RETURN_IF_ERROR(NcclCheck(ncclAllGather(work.input.data(), out, work.rows[0] * row_bytes,
                                                  ncclUint8, comm_, dev_->stream()),
                                    "ncclAllGather", work.name, comm_, set_size()));
    }
  } else {
    // Differing first dimensions: every rank broadcasts its rows into place, in one group.
    HVX_RETURN_IF_ERROR(
        NcclCheck(ncclGroupStart(), "ncclGroupStart", work.name, comm_, set_size()));
    int64_t offset = 0;
    for (int r = 0; r < set_size(); ++r) {
      if (work.rows[r] > 0) {
        ncclResult_t res = ncclBroadcast(work.input.data(), out + offset, work.rows[r] * row_bytes,
                                         ncclUint8, r, comm_, dev_->stream());
        if (res != ncclSuccess) {
          ncclGroupEnd();
          return NcclCheck(res, "ncclBroadcast (allgather)", work.name, comm_, set_size());
        }
      }
      offset += work.rows[r] * row_bytes;
    }
    HVX_RETURN_IF_ERROR(
        NcclCheck(ncclGroupEnd(), "ncclGroupEnd (allgather)", work.name, comm_, set_size()));
  }
  return Complete("ncclAllGather", work.name);
}

absl::Status NcclDataPlane::Broadcast(const BroadcastWork& work) {
  HVX_RETURN_IF_ERROR(Usable());
  HVX_RETURN_IF_ERROR(CheckDevice(work.tensor, work.name));
  if (work.tensor.num_bytes() == 0) return absl::OkStatus();
  Phase phase(work.activity, "NCCL_BCAST");
  HVX_RETURN_IF_ERROR(dev_->OrderAfterCaller({{&work.tensor, 1}}));
  HVX_RETURN_IF_ERROR(
      NcclCheck(ncclBroadcast(work.tensor.data(), work.tensor.data(), work.tensor.num_bytes(),
                              ncclUint8, work.root, comm_, dev_->stream()),
                "ncclBroadcast", work.name, comm_, set_size()));
  return Complete("ncclBroadcast", work.name);
}

absl::Status NcclDataPlane::Alltoall(const AlltoallWork& work) {
  HVX_RETURN_IF_ERROR(Usable());
  HVX_RETURN_IF_ERROR(CheckDevice(work.input, work.name));
  HVX_RETURN_IF_ERROR(CheckDevice(work.output, work.name));
  const size_t row_bytes =
      static_cast<size_t>(work.row_elements) * DataTypeSize(work.input.dtype());
  const char* in = static_cast<const char*>(work.input.data());
  char* out = static_cast<char*>(work.output.data());
  Phase phase(work.activity, "NCCL_ALLTOALL");
  HVX_RETURN_IF_ERROR(dev_->OrderAfterCaller({{&work.input, 1}, {&work.output, 1}}));
  std::vector<size_t> send_off(set_size() + 1, 0), recv_off(set_size() + 1, 0);
  for (int j = 0; j < set_size(); ++j) {
    send_off[j + 1] = send_off[j] + work.send_rows[j] * row_bytes;
    recv_off[j + 1] = recv_off[j] + work.recv_rows[j] * row_bytes;
  }
  const int me = set_rank();
  if (work.send_rows[me] > 0) {
    HVX_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(out + recv_off[me], in + send_off[me], work.send_rows[me] * row_bytes,
                        cudaMemcpyDeviceToDevice, dev_->stream()),
        absl::StrCat("alltoall '", work.name, "': copying this rank's own rows")));
  }
  HVX_RETURN_IF_ERROR(NcclCheck(ncclGroupStart(), "ncclGroupStart", work.name, comm_, set_size()));
  for (int j = 0; j < set_size(); ++j) {
    if (j == me) continue;
    ncclResult_t res = ncclSuccess;
    if (work.send_rows[j] > 0) {
      res = ncclSend(in + send_off[j], work.send_rows[j] * row_bytes, ncclUint8, j, comm_,
                     dev_->stream());
    }
    if (res == ncclSuccess && work.recv_rows[j] > 0) {
      res = ncclRecv(out + recv_off[j], work.recv_rows[j] * row_bytes, ncclUint8, j, comm_,
                     dev_->stream());
    }
    if (res != ncclSuccess) {
      ncclGroupEnd();
      return NcclCheck(res, "ncclSend/ncclRecv (alltoall)", work.name, comm_, set_size());
    }
  }
  HVX_RETURN_IF_ERROR(
      NcclCheck(ncclGroupEnd(), "ncclGroupEnd (alltoall)", work.name, comm_, set_size()));
  return Complete("ncclSend/ncclRecv (alltoall)", work.name);
}

absl::Status NcclDataPlane::ReduceScatter(const ReduceScatterWork& work) {
  HVX_RETURN_IF_ERROR(Usable());
  HVX_RETURN_IF_ERROR(CheckDevice(work.input, work.name));
  HVX_RETURN_IF_ERROR(CheckDevice(work.output, work.name));
  const DataType dtype = work.input.dtype();
  absl::StatusOr<ReductionChoice> choice =
      ChooseReduction(ReduceOp::kSum, dtype, work.prescale_factor, work.postscale_factor.value(),
                      set_size(), version_, options_.half_in_float32, /*allow_avg=*/true);
  if (!choice.ok()) return Annotate(choice.status(), absl::StrCat("tensor '", work.name, "'"));
  const ReductionChoice rc = *choice;
  const DataType wire = rc.widen_to_float32 ? DataType::kFloat32 : dtype;
  const size_t in_size = DataTypeSize(dtype);
  const size_t wire_size = DataTypeSize(wire);
  const int me = set_rank();
  std::vector<int64_t> count(set_size());
  int64_t most = 0;
  for (int r = 0; r < set_size(); ++r) {
    count[r] = work.recv_rows[r] * work.row_elements;
    most = std::max(most, count[r]);
  }
  if (most == 0) return absl::OkStatus();
  Phase phase(work.activity, "NCCL_REDUCESCATTER");
  HVX_RETURN_IF_ERROR(dev_->OrderAfterCaller({{&work.input, 1}, {&work.output, 1}}));
  const bool equal = std::all_of(count.begin(), count.end(), [&](int64_t c) { return c == most; });
  if (equal && !rc.widen_to_float32 && rc.prescale == 1.0) {
    HVX_RETURN_IF_ERROR(
        NcclCheck(ncclReduceScatter(work.input.data(), work.output.data(), most, NcclType(wire),
                                    NcclRedOp(rc.op), comm_, dev_->stream()),
                  "ncclReduceScatter", work.name, comm_, set_size()));
    HVX_RETURN_IF_ERROR(ScaleCopy(work.output.data(), dtype, work.output.data(), dtype, most,
                                  rc.postscale, work.name));
    return Complete("ncclReduceScatter", work.name);
  }
  // Unequal slices (or a prescale, or float32 accumulation): equal zero-padded blocks in the fusion
  // buffer, reduced in place.
  HVX_ASSIGN_OR_RETURN(char* buf, dev_->Fusion(static_cast<size_t>(most) * set_size() * wire_size));
  HVX_RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(buf, 0, static_cast<size_t>(most) * set_size() * wire_size, dev_->stream()),
      "zeroing the reduce-scatter blocks"));
  const char* in = static_cast<const char*>(work.input.data());
  int64_t in_offset = 0;
  for (int r = 0; r < set_size(); ++r) {
    HVX_RETURN_IF_ERROR(ScaleCopy(in + in_offset * in_size, dtype, buf + r * most * wire_size, wire,
                                  count[r], rc.prescale, work.name));
    in_offset += count[r];
  }
  char* block = buf + me * most * wire_size;
  HVX_RETURN_IF_ERROR(NcclCheck(
      ncclReduceScatter(buf, block, most, NcclType(wire), NcclRedOp(rc.op), comm_, dev_->stream()),
      "ncclReduceScatter", work.name, comm_, set_size()));
  HVX_RETURN_IF_ERROR(
      ScaleCopy(block, wire, work.output.data(), dtype, count[me], rc.postscale, work.name));
  return Complete("ncclReduceScatter", work.name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlane>> CreateNcclDataPlane(const DataPlaneContext& ctx,
                                                               const NcclOptions& options) {
  if (ctx.comm == nullptr)
    return absl::InvalidArgumentError("CreateNcclDataPlane: no communicator");
  if (static_cast<int>(ctx.hosts.size()) != ctx.comm->size()) {
    return absl::InvalidArgumentError(absl::StrCat("CreateNcclDataPlane: ", ctx.hosts.size(),
                                                   " host names for a set of ", ctx.comm->size()));
  }
  auto plane = std::make_unique<NcclDataPlane>(ctx, options);
  HVX_RETURN_IF_ERROR(plane->Setup());
  return std::unique_ptr<DataPlane>(std::move(plane));
}

absl::StatusOr<std::unique_ptr<DataPlane>> CreateNcclDataPlaneForEngine(
    const DataPlaneContext& ctx) {
  return CreateNcclDataPlane(
      ctx, ctx.options != nullptr ? NcclOptions::From(*ctx.options) : NcclOptions{});
}

int LoadedNcclVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 0;
  return version;
}

absl::StatusOr<int> BindLocalDevice(int local_rank, int local_size) {
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  HVX_ASSIGN_OR_RETURN(int device, SelectDevice(local_rank, local_size, visible, ThisHost()));
  HVX_RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")")));
  return device;
}

}  // namespace nccl
}  // namespace hvx
