#include "hvx/mpi/mpi_transport.h"

#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/copy.h"
#include "hvx/common/env.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/status.h"
#include "hvx/kernels/cpu_ops.h"
#include "hvx/mpi/mpi_collectives.h"

namespace hvx {
namespace {

class MpiCpuPlane : public DataPlane {
 public:
  explicit MpiCpuPlane(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
  }

  // Small responses are packed into the fusion buffer for one latency-bound MPI_Allreduce. Larger
  // ones run the ring over the tensors where they lie (outputs, after copying inputs that are not
  // in place), so no large tensor is copied through a fusion buffer and no per-call memory is
  // allocated; only tensors under kRingPackBytes are packed, into the first span of the ring.
  //
  // With more than two ranks, a float sum's rounding depends on the order of the additions, and
  // which tensors a cycle fuses depends on timing. So float sums and products then keep one order
  // per element whatever is fused with it (FixedOrder): the ring cuts each tensor into its own
  // segments (PerSpanSegments), small tensors are packed segment by segment, and small responses
  // use GatherAllreduce, which reduces in the ring's order. Runs are then reproducible bit for bit.
  // Two ranks need none of this: a + b is exact in either order. HVX_FIXED_REDUCTION_ORDER=0
  // (AllreduceWork::fixed_order) trades it for fewer messages.
  absl::Status Allreduce(const AllreduceWork& w) override {
    if (w.op == ReduceOp::kAdasum) return FusedAdasum(w);
    const size_t esize = DataTypeSize(w.dtype);
    const bool fixed = FixedOrder(w);
    const int parts = fixed ? size_ : 1;
    int64_t total = 0, joined = 0;
    for (const TensorRef& t : w.inputs) {
      total += t.num_elements();
      if (t.data() == nullptr) joined += t.num_elements();
    }
    if (total * static_cast<int64_t>(esize) < kRingMinBytes)
      return PackedAllreduce(w, AllInputs(w), total, parts);
    // Tensors under kRingPackBytes (biases, norms) travel packed together: one message per ring
    // step (and segment) for all of them instead of one each.
    std::vector<size_t> small, big;
    int64_t packed = 0;
    for (size_t i = 0; i < w.inputs.size(); ++i) {
      if (static_cast<int64_t>(w.inputs[i].num_bytes()) < kRingPackBytes) {
        small.push_back(i);
        packed += w.inputs[i].num_elements();
      } else {
        big.push_back(i);
      }
    }
    char* pack = nullptr;
    if (packed > 0) {
      HVX_ASSIGN_OR_RETURN(pack, fusion_.GetOnEveryRank(packed * esize, comm_));
    }
    char* zeros = nullptr;
    if (joined > 0) {
      HVX_ASSIGN_OR_RETURN(zeros, zeros_.Get(joined * esize));
      std::memset(zeros, 0, joined * esize);
    }
    std::vector<Span> large;
    std::vector<int64_t> bounds;
    {
      ScopedActivity a(w.activity, "MEMCPY_IN_OUTPUT");
      if (packed > 0) bounds = PackInputs(w, small, parts, pack);
      for (size_t i : big) {
        const TensorRef& in = w.inputs[i];
        const int64_t n = in.num_elements();
        char* out = static_cast<char*>(w.outputs[i].data());
        if (in.data() == nullptr) {  // joined: contribute zeros, keep nothing
          out = zeros;
          zeros += n * esize;
        } else if (in.data() != out) {
          CopyBytes(out, in.data(), n * esize);
        }
        ScaleInPlace(w.dtype, out, n, w.prescale_factor);
        large.push_back(Span{out, n});
      }
    }
    {
      ScopedActivity a(w.activity, "MPI_RING_ALLREDUCE");
      RingSegments segments;
      if (fixed) {
        // Segment k: the packed small tensors' part k, then each large tensor's part k.
        segments = PackedSegments(pack, bounds, size_, esize);
        const RingSegments parts = PerSpanSegments(large, size_, static_cast<int64_t>(esize));
        for (int k = 0; k < size_; ++k)
          segments[k].insert(segments[k].end(), parts[k].begin(), parts[k].end());
      } else {
        if (packed > 0) large.insert(large.begin(), Span{pack, packed});
        segments = PositionalSegments(large, size_, static_cast<int64_t>(esize));
      }
      HVX_RETURN_IF_ERROR(RingAllreduce(comm_, segments, w.dtype, w.op, w.postscale_factor,
                                        kRingPieceBytes, &scratch_));
    }
    if (packed == 0) return absl::OkStatus();
    ScopedActivity a(w.activity, "MEMCPY_OUT_FUSION_BUFFER");
    UnpackOutputs(w, small, parts, pack);
    return absl::OkStatus();
  }

  // Whether the order of the reduction changes the result's bits (see Allreduce).
  bool FixedOrder(const AllreduceWork& w) const {
    return w.fixed_order && size_ > 2 && IsFloatingPoint(w.dtype) &&
           (w.op == ReduceOp::kSum || w.op == ReduceOp::kProduct);
  }

  // Indices of every input, for PackInputs/UnpackOutputs over the whole response.
  static std::vector<size_t> AllInputs(const AllreduceWork& w) {
    std::vector<size_t> all(w.inputs.size());
    std::iota(all.begin(), all.end(), size_t{0});
    return all;
  }

  // Copies inputs `which` into `buf` (zeros for a joined rank's missing inputs) and applies the
  // prescale factor. With parts > 1 segment by segment: part k of each input (PartBegin), for k in
  // 0..parts-1. Returns the segment bounds in elements (parts + 1 entries).
  static std::vector<int64_t> PackInputs(const AllreduceWork& w, const std::vector<size_t>& which,
                                         int parts, char* buf) {
    const int64_t esize = static_cast<int64_t>(DataTypeSize(w.dtype));
    std::vector<int64_t> bounds = {0};
    char* p = buf;
    for (int k = 0; k < parts; ++k) {
      for (size_t i : which) {
        const TensorRef& t = w.inputs[i];
        const int64_t b = PartBegin(t.num_elements(), k, parts),
                      n = PartBegin(t.num_elements(), k + 1, parts) - b;
        if (t.data() == nullptr) {
          std::memset(p, 0, n * esize);
        } else {
          CopyBytes(p, static_cast<const char*>(t.data()) + b * esize, n * esize);
        }
        p += n * esize;
      }
      bounds.push_back((p - buf) / esize);
    }
    ScaleInPlace(w.dtype, buf, bounds.back(), w.prescale_factor);
    return bounds;
  }

  // The ring segments of a buffer PackInputs filled with `parts` = size segments (none when the
  // buffer is null: nothing was packed).
  static RingSegments PackedSegments(char* buf, const std::vector<int64_t>& bounds, int size,
                                     size_t esize) {
    RingSegments segments(size);
    for (int k = 0; k < size && buf != nullptr; ++k) {
      if (bounds[k + 1] > bounds[k])
        segments[k].push_back(Span{buf + bounds[k] * esize, bounds[k + 1] - bounds[k]});
    }
    return segments;
  }

  // The inverse of PackInputs: each output's parts back from `buf` (a joined rank's missing
  // outputs are skipped).
  static void UnpackOutputs(const AllreduceWork& w, const std::vector<size_t>& which, int parts,
                            const char* buf) {
    const int64_t esize = static_cast<int64_t>(DataTypeSize(w.dtype));
    const char* p = buf;
    for (int k = 0; k < parts; ++k) {
      for (size_t i : which) {
        const int64_t count = w.inputs[i].num_elements();
        const int64_t b = PartBegin(count, k, parts), n = PartBegin(count, k + 1, parts) - b;
        if (w.outputs[i].data() != nullptr) {
          CopyBytes(static_cast<char*>(w.outputs[i].data()) + b * esize, p, n * esize);
        }
        p += n * esize;
      }
    }
  }

  // Through the fusion buffer. In one MPI_Allreduce, or with a fixed order (parts > 1) in one
  // GatherAllreduce while every rank's copy is small, else through the ring.
  absl::Status PackedAllreduce(const AllreduceWork& w, const std::vector<size_t>& which,
                               int64_t total, int parts) {
    const size_t esize = DataTypeSize(w.dtype);
    HVX_ASSIGN_OR_RETURN(char* buf,
                         fusion_.GetOnEveryRank(std::max<int64_t>(1, total * esize), comm_));
    std::vector<int64_t> bounds;
    {
      ScopedActivity a(w.activity, "MEMCPY_IN_FUSION_BUFFER");
      bounds = PackInputs(w, which, parts, buf);
    }
    if (parts == 1) {
      ScopedActivity a(w.activity, "MPI_ALLREDUCE");
      HVX_RETURN_IF_ERROR(ChunkedAllreduce(comm_, buf, total, w.dtype, w.op, INT_MAX));
      ScaleInPlace(w.dtype, buf, total, w.postscale_factor);
    } else if (total * static_cast<int64_t>(esize) * size_ <= kGatherMaxBytes) {
      ScopedActivity a(w.activity, "MPI_ALLGATHER_REDUCE");
      HVX_RETURN_IF_ERROR(
          GatherAllreduce(comm_, buf, bounds, w.dtype, w.op, w.postscale_factor, &gathered_));
    } else {
      ScopedActivity a(w.activity, "MPI_RING_ALLREDUCE");
      HVX_RETURN_IF_ERROR(RingAllreduce(comm_, PackedSegments(buf, bounds, size_, esize), w.dtype,
                                        w.op, w.postscale_factor, kRingPieceBytes, &scratch_));
    }
    ScopedActivity a(w.activity, "MEMCPY_OUT_FUSION_BUFFER");
    UnpackOutputs(w, which, parts, buf);
    return absl::OkStatus();
  }

  absl::Status Allgather(const AllgatherWork& w) override {
    const int64_t row_bytes = w.row_elements * static_cast<int64_t>(DataTypeSize(w.input.dtype()));
    std::vector<int> counts(size_), displs(size_);
    int64_t off = 0;
    for (int r = 0; r < size_; ++r) {
      HVX_RETURN_IF_ERROR(CheckFitsInt(off + w.rows[r] * row_bytes, w.name));
      counts[r] = static_cast<int>(w.rows[r] * row_bytes);
      displs[r] = static_cast<int>(off);
      off += counts[r];
    }
    ScopedActivity a(w.activity, "MPI_ALLGATHER");
    return Complete(absl::StrCat("MPI_Iallgatherv of '", w.name, "'"), [&](MPI_Request* q) {
      return MPI_Iallgatherv(w.input.data(), counts[rank_], MPI_BYTE, w.output.data(),
                             counts.data(), displs.data(), MPI_BYTE, comm_, q);
    });
  }

  absl::Status Broadcast(const BroadcastWork& w) override {
    ScopedActivity a(w.activity, "MPI_BCAST");
    char* p = static_cast<char*>(w.tensor.data());
    int64_t left = static_cast<int64_t>(w.tensor.num_bytes());
    while (left > 0) {
      const int n = static_cast<int>(std::min<int64_t>(left, INT_MAX));
      HVX_RETURN_IF_ERROR(
          Complete(absl::StrCat("MPI_Ibcast of '", w.name, "'"),
                   [&](MPI_Request* q) { return MPI_Ibcast(p, n, MPI_BYTE, w.root, comm_, q); }));
      p += n;
      left -= n;
    }
    return absl::OkStatus();
  }

  absl::Status Alltoall(const AlltoallWork& w) override {
    const int64_t row_bytes = w.row_elements * static_cast<int64_t>(DataTypeSize(w.input.dtype()));
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    int64_t so = 0, ro = 0;
    // This rank's counts are its own: if they overflow here, every rank must fail, not just this
    // one.
    absl::Status fits;
    for (int r = 0; r < size_; ++r) {
      fits = CheckFitsInt(
          std::max(so + w.send_rows[r] * row_bytes, ro + w.recv_rows[r] * row_bytes), w.name);
      if (!fits.ok()) break;
      sc[r] = static_cast<int>(w.send_rows[r] * row_bytes);
      sd[r] = static_cast<int>(so);
      so += sc[r];
      rc[r] = static_cast<int>(w.recv_rows[r] * row_bytes);
      rd[r] = static_cast<int>(ro);
      ro += rc[r];
    }
    HVX_RETURN_IF_ERROR(AgreeOnEveryRank(comm_, fits));
    ScopedActivity a(w.activity, "MPI_ALLTOALLV");
    return Complete(absl::StrCat("MPI_Ialltoallv of '", w.name, "'"), [&](MPI_Request* q) {
      return MPI_Ialltoallv(w.input.data(), sc.data(), sd.data(), MPI_BYTE, w.output.data(),
                            rc.data(), rd.data(), MPI_BYTE, comm_, q);
    });
  }

  absl::Status ReduceScatter(const ReduceScatterWork& w) override {
    const DataType dt = w.input.dtype();
    const size_t esize = DataTypeSize(dt);
    const int64_t n = w.input.num_elements();
    HVX_ASSIGN_OR_RETURN(char* buf, fusion_.GetOnEveryRank(n * esize, comm_));
    {
      ScopedActivity a(w.activity, "MEMCPY_IN_FUSION_BUFFER");
      CopyBytes(buf, w.input.data(), n * esize);
      ScaleInPlace(dt, buf, n, w.prescale_factor);
    }
    std::vector<int> counts(size_);
    for (int r = 0; r < size_; ++r) {
      HVX_RETURN_IF_ERROR(
          CheckFitsInt(w.recv_rows[r] * w.row_elements * static_cast<int64_t>(esize), w.name));
      counts[r] = static_cast<int>(w.recv_rows[r] * w.row_elements);
    }
    const MpiReduceType t = MpiOps::Get().For(dt, ReduceOp::kSum);
    {
      ScopedActivity a(w.activity, "MPI_REDUCE_SCATTER");
      HVX_RETURN_IF_ERROR(
          Complete(absl::StrCat("MPI_Ireduce_scatter of '", w.name, "'"), [&](MPI_Request* q) {
            return MPI_Ireduce_scatter(buf, w.output.data(), counts.data(), t.type, t.op, comm_, q);
          }));
    }
    ScaleInPlace(dt, w.output.data(), counts[rank_], w.postscale_factor);
    return absl::OkStatus();
  }

 private:
  // Starts a nonblocking collective with `start` and waits for it like the ring does, within the
  // communicator's collective timeout.
  template <typename Start>
  absl::Status Complete(const std::string& what, Start start) {
    return StartAndWait(comm_, what, kDataWait, start);
  }

  absl::Status FusedAdasum(const AllreduceWork& w) {
    const size_t esize = DataTypeSize(w.dtype);
    int64_t total = 0;
    for (const TensorRef& t : w.inputs) total += t.num_elements();
    HVX_ASSIGN_OR_RETURN(char* buf, fusion_.GetOnEveryRank(total * esize, comm_));
    const std::vector<size_t> all = AllInputs(w);
    PackInputs(w, all, 1, buf);
    {
      ScopedActivity a(w.activity, "MPI_ADASUM");
      HVX_RETURN_IF_ERROR(Adasum(w, buf, total));
    }
    ScaleInPlace(w.dtype, buf, total, w.postscale_factor);
    UnpackOutputs(w, all, 1, buf);
    return absl::OkStatus();
  }

  // Recursive doubling: at distance d, exchange the whole vector with rank ^ d and combine each
  // tensor's segment, the lower rank's vector first so both partners compute identical bits.
  absl::Status Adasum(const AllreduceWork& w, char* buf, int64_t total) {
    const size_t esize = DataTypeSize(w.dtype);
    const int64_t bytes = total * static_cast<int64_t>(esize);
    HVX_ASSIGN_OR_RETURN(char* other, scratch_.GetOnEveryRank(bytes, comm_));
    for (int d = 1; d < size_; d <<= 1) {
      const int partner = rank_ ^ d;
      for (int64_t off = 0; off < bytes; off += INT_MAX) {
        const int n = static_cast<int>(std::min<int64_t>(INT_MAX, bytes - off));
        MPI_Request q[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        HVX_RETURN_IF_ERROR(MpiStatus(MPI_Irecv(other + off, n, MPI_BYTE, partner, 7, comm_, &q[0]),
                                      "Adasum MPI_Irecv"));
        HVX_RETURN_IF_ERROR(MpiStatus(MPI_Isend(buf + off, n, MPI_BYTE, partner, 7, comm_, &q[1]),
                                      "Adasum MPI_Isend"));
        HVX_RETURN_IF_ERROR(WaitPolitely(comm_, 2, q, "Adasum exchange", kDataWait, {partner}));
      }
      int64_t off = 0;
      for (const TensorRef& t : w.inputs) {
        const int64_t n = t.num_elements();
        char* mine = buf + off * esize;
        char* theirs = other + off * esize;
        if (rank_ < partner) {
          AdasumCombine(w.dtype, mine, theirs, n);
        } else {
          AdasumCombine(w.dtype, theirs, mine, n);
          std::memcpy(mine, theirs, n * esize);
        }
        off += n;
      }
    }
    return absl::OkStatus();
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  HostBuffer fusion_;
  HostBuffer scratch_;
  HostBuffer gathered_;  // every rank's copy for GatherAllreduce
  HostBuffer zeros_;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm), plane_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override { MPI_Comm_free(&comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status Gather(const std::string& mine, std::vector<std::string>* all) override {
    HVX_RETURN_IF_ERROR(CheckFitsInt(mine.size(), "control gather"));
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(rank_ == 0 ? size_ : 0), displs(lens.size());
    HVX_RETURN_IF_ERROR(Politely("MPI_Igather", [&](MPI_Request* q) {
      return MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm_, q);
    }));
    std::string flat;
    if (rank_ == 0) {
      int64_t off = 0;
      for (int r = 0; r < size_; ++r) {
        displs[r] = static_cast<int>(off);
        off += lens[r];
      }
      HVX_RETURN_IF_ERROR(CheckFitsInt(off, "control gather"));
      flat.resize(off);
    }
    HVX_RETURN_IF_ERROR(Politely("MPI_Igatherv", [&](MPI_Request* q) {
      return MPI_Igatherv(mine.data(), len, MPI_BYTE, flat.data(), lens.data(), displs.data(),
                          MPI_BYTE, 0, comm_, q);
    }));
    all->clear();
    if (rank_ == 0) {
      for (int r = 0; r < size_; ++r) all->push_back(flat.substr(displs[r], lens[r]));
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(std::string* message) override {
    int64_t len = static_cast<int64_t>(message->size());
    HVX_RETURN_IF_ERROR(Politely("MPI_Ibcast", [&](MPI_Request* q) {
      return MPI_Ibcast(&len, 1, MPI_INT64_T, 0, comm_, q);
    }));
    HVX_RETURN_IF_ERROR(CheckFitsInt(len, "control broadcast"));
    message->resize(len);
    return Politely("MPI_Ibcast", [&](MPI_Request* q) {
      return MPI_Ibcast(message->data(), static_cast<int>(len), MPI_BYTE, 0, comm_, q);
    });
  }

  absl::Status Allgather(const std::string& mine, std::vector<std::string>* all) override {
    return AllgatherStrings(comm_, mine, all);
  }

  absl::Status BitwiseAnd(std::vector<uint64_t>* bits) override {
    return Politely("MPI_Iallreduce(BAND)", [&](MPI_Request* q) {
      return MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()),
                            MPI_UINT64_T, MPI_BAND, comm_, q);
    });
  }

  absl::Status Barrier() override {
    return Politely("MPI_Ibarrier", [&](MPI_Request* q) { return MPI_Ibarrier(comm_, q); });
  }

  DataPlane& cpu() override { return plane_; }

  absl::Status Send(int to, const char* data, size_t n) override {
    HVX_RETURN_IF_ERROR(CheckFitsInt(static_cast<int64_t>(n), "Send"));
    MPI_Request q = MPI_REQUEST_NULL;
    HVX_RETURN_IF_ERROR(
        MpiStatus(MPI_Isend(data, static_cast<int>(n), MPI_BYTE, to, kPointToPointTag, comm_, &q),
                  "MPI_Isend"));
    sends_.push_back(q);
    return absl::OkStatus();
  }

  absl::Status Recv(int from, char* data, size_t n) override {
    HVX_RETURN_IF_ERROR(CheckFitsInt(static_cast<int64_t>(n), "Recv"));
    MPI_Request q = MPI_REQUEST_NULL;
    HVX_RETURN_IF_ERROR(
        MpiStatus(MPI_Irecv(data, static_cast<int>(n), MPI_BYTE, from, kPointToPointTag, comm_, &q),
                  "MPI_Irecv"));
    return WaitPolitely(comm_, 1, &q, "receiving a peer's bytes", kDataWait, {from});
  }

  absl::Status Flush() override {
    if (sends_.empty()) return absl::OkStatus();
    absl::Status s = WaitPolitely(comm_, static_cast<int>(sends_.size()), sends_.data(),
                                  "sending bytes to a peer", kDataWait);
    sends_.clear();
    return s;
  }

  // Starts a nonblocking collective with `start` and completes it with WaitPolitely: the control
  // plane runs every cycle, and a rank whose peers are still computing must not spin meanwhile.
  template <typename Start>
  absl::Status Politely(absl::string_view what, Start start) {
    return StartAndWait(comm_, what, kControlWait, start);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Subset(const std::vector<int>& ranks) override {
    const bool member = std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
    const int key =
        member ? static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin()) : 0;
    MPI_Comm sub = MPI_COMM_NULL;
    HVX_RETURN_IF_ERROR(
        SplitWithin(comm_, member ? 0 : MPI_UNDEFINED, key, "MPI_Comm_split (process set)", &sub));
    if (!member) return std::unique_ptr<Communicator>();
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub));
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    HVX_RETURN_IF_ERROR(
        SplitWithin(comm_, color < 0 ? MPI_UNDEFINED : color, key, "MPI_Comm_split", &sub));
    if (color < 0) return std::unique_ptr<Communicator>();
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub));
  }

 private:
  // Point-to-point bytes: a tag no collective of this transport uses (the ring's are 11 and 12),
  // so a Send still pending when a plane's collective runs is never taken for the collective's.
  static constexpr int kPointToPointTag = 31;
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  MpiCpuPlane plane_;
  std::vector<MPI_Request> sends_;  // Send's, until Flush
};

}  // namespace

std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm comm) {
  return std::unique_ptr<Communicator>(new MpiCommunicator(comm));
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiTransport::Start(const InitOptions& options) {
  int already = 0;
  MPI_Initialized(&already);
  int provided = 0;
  if (!already) {
    // MPICH's MPI_Init catches SIGUSR1 (its notice of a failed process under hydra's
    // -disable-auto-cleanup, which hvx does not use: it detects failures itself), and a program
    // that never asked for the signal no longer ends on it. hvxrun's preemption notice is that
    // signal ("checkpoint and end", or end), so such a job would wait out --preempt-grace. The
    // program's own disposition is put back, whether MPI_Init_thread succeeds or not. (A program
    // that initialized MPI itself before hvx::Init keeps what MPICH left.)
    struct sigaction usr1 = {};
    sigaction(SIGUSR1, nullptr, &usr1);
    const absl::Status started = MpiStatus(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    sigaction(SIGUSR1, &usr1, nullptr);
    HVX_RETURN_IF_ERROR(started);
    initialized_here_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MPI_Init_thread provided thread level ", ThreadLevelName(provided),
          "; hvx calls MPI from its background thread and needs at least MPI_THREAD_FUNNELED"));
    }
  } else {
    MPI_Query_thread(&provided);
    // The program's MPI_Init thread is not hvx's background thread, which makes every hvx MPI call.
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::FailedPreconditionError(
          absl::StrCat("the program initialized MPI with thread level ", ThreadLevelName(provided),
                       ", but hvx calls MPI from its own background thread, which needs "
                       "MPI_THREAD_SERIALIZED or "
                       "MPI_THREAD_MULTIPLE: initialize with MPI_Init_thread(&argc, &argv, "
                       "MPI_THREAD_MULTIPLE, &provided), "
                       "or let hvx::Init initialize MPI"));
    }
  }
  HVX_RETURN_IF_ERROR(MpiOps::Get().Init());
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  const absl::string_view library(version, len);
  std::string first_line = std::vector<std::string>(absl::StrSplit(library, '\n'))[0];
  description_ = absl::StrCat("mpi (", absl::StripAsciiWhitespace(first_line), ", ",
                              ThreadLevelName(provided), ")");
  if (initialized_here_ && MpichFinalizeMayDeadlock(library)) {
    hydra_ = HydraPmi::FromEnvironment(Environment::Process());
  }
  MPI_Comm world;
  HVX_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup"));
  SetCollectiveTimeout(world, absl::Seconds(options.collective_timeout_s));
  return MakeMpiCommunicator(world);
}

std::string ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return absl::StrCat("thread level ", level);
}

bool MpichFinalizeMayDeadlock(absl::string_view library_version) {
  constexpr absl::string_view kPrefix = "MPICH Version:";
  if (!absl::StartsWith(library_version, kPrefix)) return false;
  const std::vector<absl::string_view> numbers =
      absl::StrSplit(absl::StripAsciiWhitespace(library_version.substr(kPrefix.size(), 32)),
                     absl::MaxSplits('.', 2));
  int major = 0, minor = 0;
  if (numbers.size() < 2 || !absl::SimpleAtoi(numbers[0], &major)) return false;
  // "0", "2a1", "2rc1": the leading digits are the minor version.
  const absl::string_view m = numbers[1];
  size_t digits = 0;
  while (digits < m.size() && absl::ascii_isdigit(m[digits])) ++digits;
  if (digits == 0 || !absl::SimpleAtoi(m.substr(0, digits), &minor)) return false;
  return major < 4 || (major == 4 && minor < 2);
}

absl::Status MpiTransport::Finalize(absl::Time deadline) {
  MpiOps::Get().Free();
  if (!initialized_here_) return absl::OkStatus();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return absl::OkStatus();
  if (hydra_) {
    // Progress lets messages still travelling to or from this rank arrive while it waits.
    return Annotate(hydra_->Leave(deadline,
                                  [] {
                                    int flag = 0;
                                    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
                                               MPI_STATUS_IGNORE);
                                  }),
                    "ending MPI through hydra's PMI instead of MPI_Finalize");
  }
  return MpiStatus(MPI_Finalize(), "MPI_Finalize");
}

HVX_REGISTER_TRANSPORT(mpi, [] { return std::unique_ptr<Transport>(new MpiTransport()); });

// HVX_FAILPOINT=POINT:RANK:mpi_abort, for the fault matrix (tests/faults).
[[maybe_unused]] const bool kMpiAbortFailpoint = RegisterFailpointAction("mpi_abort", [] {
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, 3);
});

}  // namespace hvx
