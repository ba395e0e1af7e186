// MPI building blocks of the MPICH backend: dtype/op mapping (float16/bfloat16 as user ops that
// accumulate in float32), error conversion, waits that time out, and the allreduces of the CPU
// data plane (MPI_Iallreduce for small buffers, hvx's own ring for large ones).
//
//   HVX_RETURN_IF_ERROR(MpiOps::Get().Init());
//   HVX_RETURN_IF_ERROR(Allreduce(comm, p, n, DataType::kFloat32, ReduceOp::kSum, 1.0, &scratch));
//
// Why a ring of our own for large buffers: MPICH 4.0 allocates a message-sized temporary inside
// every large MPI_Allreduce, so each call pays the page faults of fresh memory; the ring reduces
// through a scratch buffer touched once (HostBuffer) and allocates nothing per call.
#ifndef HVX_MPI_MPI_COLLECTIVES_H_
#define HVX_MPI_MPI_COLLECTIVES_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hvx/common/types.h"
#include "hvx/core/api.h"

namespace hvx {

// "<what>: <MPI error string>" as an Internal status; OK for MPI_SUCCESS.
absl::Status MpiStatus(int code, absl::string_view what);

// Completes `requests` without holding a core while a peer is late. MPICH polls busily inside
// blocking calls, and the engine's thread waiting there for a rank still computing its backward
// pass took half of a 2-core machine from the training threads. This tests busily for `spin` (a
// peer that is already there answers within microseconds), then sleeps between tests, the pause
// doubling up to `max_pause` (0: yields instead): a late peer costs at most that much extra
// latency, and the waiting thread uses a few percent of a core.
struct WaitPolicy {
  int spin_micros;
  int max_pause_micros;
};
// Negotiation: peers are often late by a whole backward pass.
inline constexpr WaitPolicy kControlWait = {50, 500};
// Data: every rank enters together (negotiation said so) unless one was descheduled, and a
// transfer in progress advances only inside MPI_Test, so it never sleeps: after the spin it yields
// the core between tests (to a descheduled peer when ranks outnumber cores; an immediate return
// otherwise). Even short sleeps between tests stall the transfer.
inline constexpr WaitPolicy kDataWait = {1000, 0};
// Fails with DeadlineExceeded once the wait has lasted CollectiveTimeout(comm): the message names
// `what`, the global ranks of `peers` (ranks of `comm` it waits for, when the caller knows them;
// named only then, off the hot path) or else all of `comm`'s, and HVX_COLLECTIVE_TIMEOUT_S. The
// requests are left pending: the caller's communicator is unusable afterwards.
absl::Status WaitPolitely(MPI_Comm comm, int count, MPI_Request* requests, absl::string_view what,
                          WaitPolicy policy, std::initializer_list<int> peers = {});

// Starts one nonblocking MPI call with `start` (it fills the request) and completes it with
// WaitPolitely; errors of either name `what`.
template <typename Start>
absl::Status StartAndWait(MPI_Comm comm, absl::string_view what, WaitPolicy policy, Start start) {
  MPI_Request request = MPI_REQUEST_NULL;
  absl::Status started = MpiStatus(start(&request), what);
  if (!started.ok()) return started;
  return WaitPolitely(comm, 1, &request, what, policy);
}

// The longest a wait for the peers on `comm` may last (InitOptions::collective_timeout_s), kept on
// the communicator as an MPI attribute (MPI_Comm_dup copies it; give a split communicator its own).
// Infinite until set.
void SetCollectiveTimeout(MPI_Comm comm, absl::Duration timeout);
absl::Duration CollectiveTimeout(MPI_Comm comm);

// MPI_Comm_split of `comm` into *out (MPI_COMM_NULL for MPI_UNDEFINED), bounded by
// CollectiveTimeout(comm), which *out keeps. MPI has no nonblocking split, so the ranks first meet
// in a nonblocking barrier: a rank that never comes (failed, froze, or is in another collective)
// fails it on the others with DeadlineExceeded naming `what`, as any wait does. The split then
// runs under a Watchdog: a rank that froze between the barrier and the split, or inside it, ends
// the others' processes with kSetupTimeoutExitCode after the timeout, the message naming `what`.
// Collective over `comm`; the failpoints "split" and "in_split" lie before and after the barrier.
absl::Status SplitWithin(MPI_Comm comm, int color, int key, absl::string_view what, MPI_Comm* out);

// "global ranks 0-3" for the members of `comm`, or "global rank 5" for rank `rank` of it.
std::string GlobalRanks(MPI_Comm comm);
std::string GlobalRank(MPI_Comm comm, int rank);

// Collective over `comm`: OK when `local` is OK on every rank. Otherwise every rank returns an
// error: the failing rank its own, the others FailedPrecondition with the lowest failing rank's
// global rank and message. For a step that may fail on one rank only, before a collective.
absl::Status AgreeOnEveryRank(MPI_Comm comm, const absl::Status& local);

// InvalidArgument naming `what` for a negative count (a size that wrapped); Unimplemented when
// `bytes` exceeds MPI's int count limit.
absl::Status CheckFitsInt(int64_t bytes, absl::string_view what);

// Every rank's `mine`, in rank order, into *all: a control-plane allgather (two nonblocking
// collectives waited for with kControlWait).
absl::Status AllgatherStrings(MPI_Comm comm, const std::string& mine,
                              std::vector<std::string>* all);

// The MPI_Datatype and MPI_Op pair used to reduce `dtype` with `op` (kSum, kMin, kMax, kProduct).
struct MpiReduceType {
  MPI_Datatype type;
  MPI_Op op;
};

class MpiOps {
 public:
  static MpiOps& Get();
  // Creates the user ops. Call after MPI_Init, on the thread that makes MPI calls.
  absl::Status Init();
  void Free();
  MpiReduceType For(DataType dtype, ReduceOp op) const;

 private:
  bool initialized_ = false;
  MPI_Op half_[4];
  MPI_Op bf16_[4];
};

// Element-wise `op` of `count` elements at `data` across `comm`, in place, in pieces of at most
// `chunk_bytes`.
absl::Status ChunkedAllreduce(MPI_Comm comm, void* data, int64_t count, DataType dtype, ReduceOp op,
                              int64_t chunk_bytes);

// A pre-touched host buffer that only grows, backed by transparent huge pages where available:
// its page faults are paid once, when it grows, not in every collective that uses it.
class HostBuffer {
 public:
  HostBuffer() = default;
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  // At least `bytes` bytes; contents are not preserved across growth.
  absl::StatusOr<char*> Get(size_t bytes);
  // Get where every rank of `comm` asks for the same size at the same point (sizes the negotiation
  // agreed): when the buffer grows, the ranks agree on the outcome (AgreeOnEveryRank), so a mapping
  // that fails on one rank fails the call on all instead of leaving the others in a collective.
  absl::StatusOr<char*> GetOnEveryRank(size_t bytes, MPI_Comm comm);

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// Ring allreduce over point-to-point messages, in place: a reduce-scatter then an allgather
// around the ring, each step exchanged in pieces of at most `piece_bytes` through `scratch`. Unlike
// MPI_Allreduce it allocates nothing per call: MPICH allocates a message-sized temporary inside
// each reduction, and from any thread but the main one glibc returns that memory to the kernel
// after every call, so each call pays fresh page faults.
// Every rank must pass the same count; results are bitwise identical on all ranks.
// A run of elements in host memory.
struct Span {
  char* data;
  int64_t count;
};

// The data of a ring allreduce by segment: segments[k] (a concatenation of spans) is what rank
// k - 1 finishes in the reduce-scatter. Every rank passes the same structure (the same span
// lengths). The ring reduces each element of segment k in one order: x[k] (rank k's value), then
// x[k+1], ..., x[k-1] (ranks mod size), whatever else the segment holds.
using RingSegments = std::vector<std::vector<Span>>;

// Part s of n elements split `size` ways is [PartBegin(n, s, size), PartBegin(n, s + 1, size)).
inline int64_t PartBegin(int64_t n, int s, int size) { return n * s / size; }

// The concatenation of `spans` cut into `size` equal runs. Fewest messages, but an element's
// segment (and so, with more than 2 ranks, the rounding of a float sum) depends on what else was
// fused with it.
RingSegments PositionalSegments(const std::vector<Span>& spans, int size, int64_t esize);
// Each span cut into `size` parts by its own length, segment k holding part k of every span: an
// element's segment depends only on its place in its own span, so the result of a float sum is
// the same bits however tensors are fused.
RingSegments PerSpanSegments(const std::vector<Span>& spans, int size, int64_t esize);

// Reduce-scatter then allgather over the segments, in pieces of `piece_bytes` per segment, results
// in place. Each message is one contiguous part (no derived datatypes).
absl::Status RingAllreduce(MPI_Comm comm, const RingSegments& segments, DataType dtype, ReduceOp op,
                           Scale postscale, int64_t piece_bytes, HostBuffer* scratch);

// The same over the concatenation of `spans`, PositionalSegments, results in place.
absl::Status RingAllreduce(MPI_Comm comm, const std::vector<Span>& spans, DataType dtype,
                           ReduceOp op, Scale postscale, int64_t piece_bytes, HostBuffer* scratch);

// A small allreduce with the ring's order and one collective: `data` holds the segments back to
// back (segment k is elements [bounds[k], bounds[k+1]), bounds has size + 1 entries from 0). Every
// rank's data is gathered (into `gathered`, size times the bytes) and each segment reduced on every
// rank in RingAllreduce's order, so the bits equal RingAllreduce over the same segments; then
// multiplied by `postscale`.
absl::Status GatherAllreduce(MPI_Comm comm, char* data, const std::vector<int64_t>& bounds,
                             DataType dtype, ReduceOp op, Scale postscale, HostBuffer* gathered);

// The result is multiplied by `postscale`; each rank scales only the segment it finished, before
// the allgather, so scaling costs 1/size of a pass over the data.
absl::Status RingAllreduce(MPI_Comm comm, void* data, int64_t count, DataType dtype, ReduceOp op,
                           Scale postscale, int64_t piece_bytes, HostBuffer* scratch);

// MPI_Allreduce below kRingMinBytes (latency-bound; temporaries are small), RingAllreduce above.
// The result is multiplied by `postscale`.
absl::Status Allreduce(MPI_Comm comm, void* data, int64_t count, DataType dtype, ReduceOp op,
                       Scale postscale, HostBuffer* scratch);

inline constexpr int64_t kRingMinBytes = int64_t{256} << 10;
// Ring piece: the scratch a received piece lands in is re-read from cache at this size; larger
// pieces go to memory, smaller ones cost more messages (BENCHMARKS.md compares them).
inline constexpr int64_t kRingPieceBytes = int64_t{4} << 20;
// Largest size x bytes of a small response's GatherAllreduce (with a fixed reduction order); over
// it the ring runs instead.
inline constexpr int64_t kGatherMaxBytes = int64_t{8} << 20;
// Tensors of a fused response smaller than this are packed together before the ring (one span,
// or one per segment with a fixed reduction order): each contiguous part costs one message per
// ring step.
inline constexpr int64_t kRingPackBytes = int64_t{64} << 10;

// A piece size for callers of ChunkedAllreduce (1 MiB).
inline constexpr int64_t kDefaultChunkBytes = int64_t{1} << 20;

}  // namespace hvx

#endif  // HVX_MPI_MPI_COLLECTIVES_H_
