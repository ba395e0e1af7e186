// Allreduce through shared memory among the ranks of one host, and hierarchically across hosts.
//
//   ShmAllreducer reducer(group.get(), /*cross=*/nullptr, ShmAllreducer::Options());
//   HVX_RETURN_IF_ERROR(reducer.Allreduce({{grad, grad, n}}, DataType::kFloat32, ReduceOp::kSum,
//                                         /*prescale=*/1.0, /*postscale=*/0.5, "grad"));
//
// The data is cut into chunks, chunk j owned by local rank j mod L. Per round (of at most
// Options::round_bytes, double-buffered in each rank's region):
//   1. publish: each rank copies its inputs of the chunks it does not own into its region;
//   2. reduce: each owner folds every local rank's value of its chunks, reading the peers'
//      published copies in place and its own input where it lies. On one host it folds in a
//      chunk-sized buffer of its own that stays in its cache, then writes the result to its
//      outputs and, with non-temporal stores, to its region (so that a peer on a core that shares
//      no cache with it reads the result from memory); across hosts it folds in its region;
//   3. fetch: each rank copies the finished chunks of the other owners into its outputs.
// Counters in each rank's header (ShmGroup) order the phases chunk by chunk, so an owner starts
// on a chunk as soon as its peers have published it.
//
// Across hosts (`cross` given: the same local rank on every host, hosts in order), an owner's
// fold starts from the partial result of the previous host and passes its result to the next;
// the last host scales it and sends it back to every host. So each element is folded in one
// order: (host 0, local rank 0), (host 0, local rank 1), ..., (host 1, local rank 0), ... which
// is global rank order when ranks are placed on hosts in blocks (hvxrun's and mpiexec's default).
// The result's bits therefore do not depend on fusion, timing, chunking or how the same ranks
// are spread over hosts, and are identical on every rank.
//
// Not thread-safe; every rank of the group makes the same calls in the same order.
#ifndef HVX_SHM_SHM_ALLREDUCE_H_
#define HVX_SHM_SHM_ALLREDUCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hvx/common/clock.h"
#include "hvx/common/types.h"
#include "hvx/kernels/reduce_op.h"
#include "hvx/shm/shm_group.h"

namespace hvx {
namespace shm {

// One tensor of a fused allreduce: `count` elements read from `in` and written to `out` (which
// may be `in`). in == nullptr contributes zeros (a joined rank); out == nullptr is not written.
struct ReduceSpan {
  const char* in;
  char* out;
  int64_t count;
};

// Point-to-point between the ranks of the same local rank on every host (hosts numbered
// 0..hosts()-1 in rank order). Implemented over the transport communicator's point-to-point bytes
// (cpu_plane.cc).
class CrossHostLink {
 public:
  virtual ~CrossHostLink() = default;
  virtual int host() const = 0;
  virtual int hosts() const = 0;
  // Starts sending `n` bytes to `to_host`; `data` must stay unchanged until Flush returns.
  virtual absl::Status Send(int to_host, const char* data, size_t n) = 0;
  // Receives `n` bytes from `from_host` (messages between two hosts arrive in sending order).
  virtual absl::Status Recv(int from_host, char* data, size_t n) = 0;
  // Completes every Send started so far.
  virtual absl::Status Flush() = 0;
};

class SpanIndex;

class ShmAllreducer {
 public:
  struct Options {
    // Data per round; each rank's region holds two rounds.
    int64_t round_bytes = int64_t{8} << 20;
    // Unit of ownership and of progress between ranks.
    int64_t chunk_bytes = int64_t{256} << 10;
  };

  // The region bytes each rank needs for `options`.
  static size_t RegionBytes(const Options& options) {
    return static_cast<size_t>(2 * options.round_bytes);
  }

  // `group` (with at least RegionBytes(options) per rank) and `cross` (may be null: one host)
  // must outlive the reducer.
  ShmAllreducer(ShmGroup* group, CrossHostLink* cross, const Options& options);

  // Element-wise `op` (kSum, kMin, kMax, kProduct) of every rank's spans, in place into the
  // outputs: each input multiplied by `prescale` first, the result by `postscale`. Every rank
  // passes spans of the same counts. Errors name `what`; after one, every later call fails too
  // (the peers' progress can no longer be trusted).
  absl::Status Allreduce(const std::vector<ReduceSpan>& spans, DataType dtype, ReduceOp op,
                         double prescale, Scale postscale, absl::string_view what);

  // One host only (no `cross`): `in` holds the sum of `counts` elements on every rank, and local
  // rank r receives elements [counts[0] + ... + counts[r-1], + counts[r]) of the result in `out`.
  // Each element is folded in the order Allreduce folds it (rank 0 first), so the bits equal the
  // matching slice of an Allreduce of the same inputs. The owner of each chunk is the rank that
  // receives it; nothing is fetched. Errors as Allreduce's.
  absl::Status ReduceScatter(const char* in, char* out, const std::vector<int64_t>& counts,
                             DataType dtype, ReduceOp op, double prescale, Scale postscale,
                             absl::string_view what);

  // Where the time of the calls so far went: all of it, and the part spent in the cross-host
  // link's Recv and Flush (waiting for other hosts and moving data between them).
  struct Stats {
    int64_t calls = 0;
    int64_t bytes = 0;
    absl::Duration total;
    absl::Duration cross;
  };
  const Stats& stats() const { return stats_; }

 private:
  // Elements [first, first + length) of a round, folded by local rank `owner`.
  struct Chunk {
    int64_t first;
    int64_t length;
    int owner;
  };
  // Starts a call: its element type, operation, scales and name.
  void Begin(DataType dtype, ReduceOp op, double prescale, Scale postscale, absl::string_view what);
  // Elements per round (a whole number of chunks).
  int64_t RoundElements() const;
  // Ends a call started by Begin with `status`, counting `elements` in stats_ from `start`.
  absl::Status End(absl::Status status, int64_t elements, absl::Time start);
  // One round: elements [begin, begin + count) of the concatenated spans, in `chunks` (relative to
  // begin, in order, covering it). With `fetch`, every rank then copies the other owners'
  // results into its outputs.
  absl::Status Round(const SpanIndex& index, int64_t begin, const std::vector<Chunk>& chunks,
                     bool fetch);
  // Runs one call of the cross-host link, counting its time in stats_.cross.
  template <typename Fn>
  absl::Status Cross(Fn fn) {
    const absl::Time start = MonotonicNow();
    absl::Status s = fn();
    stats_.cross += MonotonicNow() - start;
    return s;
  }
  // Folds every rank's value of elements [begin, begin + count) (chunk `chunk_id`, published at
  // `offset` in each peer's region) into `acc`: this rank's region slot there when the result
  // crosses hosts, fold_ on one host.
  absl::Status ReduceChunk(const SpanIndex& index, int64_t begin, int64_t count, uint64_t chunk_id,
                           size_t offset, char* acc);
  // Local rank k's value of elements [begin, begin + count): this rank's own input (scaled,
  // through scratch_ when needed) or k's published copy in its region at `offset`.
  const char* ValueOf(int k, const SpanIndex& index, int64_t begin, int64_t count, size_t offset);

  ShmGroup* const group_;
  CrossHostLink* const cross_;
  const Options options_;

  // The call in progress.
  DataType dtype_ = DataType::kFloat32;
  ReduceOp op_ = ReduceOp::kSum;
  double prescale_ = 1.0;
  Scale postscale_;
  std::string what_;
  size_t esize_ = 4;
  int64_t chunk_ = 1;  // elements per chunk

  uint64_t rounds_ = 0;        // rounds completed by this rank, over all calls
  uint64_t chunks_ = 0;        // chunks of those rounds
  std::vector<char> scratch_;  // this rank's own value, when it must be gathered or scaled
  std::vector<char> fold_;     // a chunk's fold on one host
  absl::Status broken_;
  Stats stats_;
};

}  // namespace shm
}  // namespace hvx

#endif  // HVX_SHM_SHM_ALLREDUCE_H_
