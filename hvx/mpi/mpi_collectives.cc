#include "hvx/mpi/mpi_collectives.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/memory.h"
#include "hvx/common/status.h"
#include "hvx/common/watchdog.h"
#include "hvx/core/agreement.h"
#include "hvx/kernels/cpu_ops.h"

namespace hvx {
namespace {

int OpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
    default:
      return 0;
  }
}

constexpr ReduceOp kOps[4] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

template <DataType D, int I>
void SixteenBitOp(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceInto(D, kOps[I], inout, in, *len);
}

template <DataType D>
absl::Status CreateOps(MPI_Op* ops) {
  MPI_User_function* fns[4] = {&SixteenBitOp<D, 0>, &SixteenBitOp<D, 1>, &SixteenBitOp<D, 2>,
                               &SixteenBitOp<D, 3>};
  for (int i = 0; i < 4; ++i) {
    absl::Status s = MpiStatus(MPI_Op_create(fns[i], /*commute=*/1, &ops[i]), "MPI_Op_create");
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

MPI_Datatype TypeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kBool:
      return MPI_C_BOOL;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

}  // namespace

absl::Status MpiStatus(int code, absl::string_view what) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrCat(what, ": ", absl::string_view(text, len)));
}

namespace {

int TimeoutKeyval() {
  static int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(
        [](MPI_Comm, int, void*, void* value, void* copy, int* flag) {
          *static_cast<void**>(copy) = new absl::Duration(*static_cast<absl::Duration*>(value));
          *flag = 1;
          return MPI_SUCCESS;
        },
        [](MPI_Comm, int, void* value, void*) {
          delete static_cast<absl::Duration*>(value);
          return MPI_SUCCESS;
        },
        &k, nullptr);
    return k;
  }();
  return keyval;
}

std::vector<int> GlobalRanksOf(MPI_Comm comm) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> local(n), global(n);
  for (int i = 0; i < n; ++i) local[i] = i;
  MPI_Group_translate_ranks(group, n, local.data(), world, global.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return global;
}

}  // namespace

void SetCollectiveTimeout(MPI_Comm comm, absl::Duration timeout) {
  MPI_Comm_set_attr(comm, TimeoutKeyval(), new absl::Duration(timeout));
}

absl::Duration CollectiveTimeout(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, TimeoutKeyval(), &value, &found);
  return found ? *static_cast<absl::Duration*>(value) : absl::InfiniteDuration();
}

std::string GlobalRank(MPI_Comm comm, int rank) {
  const std::vector<int> all = GlobalRanksOf(comm);
  return absl::StrCat("global rank ",
                      rank >= 0 && rank < static_cast<int>(all.size()) ? all[rank] : rank);
}

std::string GlobalRanks(MPI_Comm comm) {
  const std::vector<int> all = GlobalRanksOf(comm);
  return absl::StrCat(all.size() == 1 ? "global rank " : "global ranks ", RankRanges(all));
}

absl::Status WaitPolitely(MPI_Comm comm, int count, MPI_Request* requests, absl::string_view what,
                          WaitPolicy policy, std::initializer_list<int> peers) {
  const auto start = std::chrono::steady_clock::now();
  const auto spin = std::chrono::microseconds(policy.spin_micros);
  const auto max_pause = std::chrono::microseconds(policy.max_pause_micros);
  const absl::Duration timeout = CollectiveTimeout(comm);
  const auto limit = timeout == absl::InfiniteDuration()
                         ? std::chrono::steady_clock::duration::max()
                         : absl::ToChronoNanoseconds(timeout);
  std::chrono::microseconds pause(10);
  for (;;) {
    int done = 0;
    absl::Status s = MpiStatus(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), what);
    if (!s.ok() || done) return s;
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= limit) {
      std::vector<std::string> named;
      for (int peer : peers) named.push_back(GlobalRank(comm, peer));
      return absl::DeadlineExceededError(absl::StrCat(
          what, " did not complete within ", absl::FormatDuration(timeout),
          " (HVX_COLLECTIVE_TIMEOUT_S): ",
          named.empty() ? absl::StrCat("not every one of ", GlobalRanks(comm), " took part")
                        : absl::StrCat(absl::StrJoin(named, " or "), " did not answer"),
          "; a rank failed, froze or is waiting in another collective"));
    }
    if (waited < spin) continue;
    if (policy.max_pause_micros == 0) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, max_pause);
  }
}

absl::Status SplitWithin(MPI_Comm comm, int color, int key, absl::string_view what, MPI_Comm* out) {
  *out = MPI_COMM_NULL;
  Failpoint("split");
  const std::string barrier = absl::StrCat(what, ": the ranks meeting before it (MPI_Ibarrier)");
  HVX_RETURN_IF_ERROR(StartAndWait(comm, barrier, kControlWait,
                                   [&](MPI_Request* q) { return MPI_Ibarrier(comm, q); }));
  Failpoint("in_split");
  const absl::Duration timeout = CollectiveTimeout(comm);
  {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    Watchdog dog(timeout,
                 absl::StrCat(GlobalRank(comm, rank), ": ", what, " did not complete within ",
                              absl::FormatDuration(timeout), " (HVX_COLLECTIVE_TIMEOUT_S): one of ",
                              GlobalRanks(comm),
                              " froze or failed inside it, after every rank had reached it"),
                 kSetupTimeoutExitCode);
    HVX_RETURN_IF_ERROR(MpiStatus(MPI_Comm_split(comm, color, key, out), what));
  }
  if (*out != MPI_COMM_NULL) SetCollectiveTimeout(*out, timeout);
  return absl::OkStatus();
}

MpiOps& MpiOps::Get() {
  static MpiOps* ops = new MpiOps();
  return *ops;
}

absl::Status MpiOps::Init() {
  if (initialized_) return absl::OkStatus();
  absl::Status s = CreateOps<DataType::kFloat16>(half_);
  if (s.ok()) s = CreateOps<DataType::kBfloat16>(bf16_);
  initialized_ = s.ok();
  return s;
}

void MpiOps::Free() {
  if (!initialized_) return;
  for (int i = 0; i < 4; ++i) {
    MPI_Op_free(&half_[i]);
    MPI_Op_free(&bf16_[i]);
  }
  initialized_ = false;
}

MpiReduceType MpiOps::For(DataType dtype, ReduceOp op) const {
  const int i = OpIndex(op);
  if (dtype == DataType::kFloat16) return {MPI_UINT16_T, half_[i]};
  if (dtype == DataType::kBfloat16) return {MPI_UINT16_T, bf16_[i]};
  if (dtype == DataType::kBool) {
    return {MPI_C_BOOL, (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? MPI_LAND : MPI_LOR};
  }
  static const MPI_Op builtin[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return {TypeOf(dtype), builtin[i]};
}

absl::Status ChunkedAllreduce(MPI_Comm comm, void* data, int64_t count, DataType dtype, ReduceOp op,
                              int64_t chunk_bytes) {
  const MpiReduceType t = MpiOps::Get().For(dtype, op);
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t per = std::max<int64_t>(1, std::min<int64_t>(chunk_bytes / esize, INT32_MAX));
  char* p = static_cast<char*>(data);
  for (int64_t done = 0; done < count; done += per) {
    const int n = static_cast<int>(std::min(per, count - done));
    HVX_RETURN_IF_ERROR(StartAndWait(comm, "MPI_Iallreduce", kDataWait, [&](MPI_Request* q) {
      return MPI_Iallreduce(MPI_IN_PLACE, p + done * esize, n, t.type, t.op, comm, q);
    }));
  }
  return absl::OkStatus();
}

HostBuffer::~HostBuffer() {
  if (data_ != nullptr) munmap(data_, size_);
}

absl::StatusOr<char*> HostBuffer::Get(size_t bytes) {
  if (bytes <= size_ && data_ != nullptr) return data_;
  if (data_ != nullptr) munmap(data_, size_);
  const size_t size = RoundUpToHugePages(std::max<size_t>(bytes, 1));
  char* aligned = MapHugePages(size);
  if (aligned == nullptr) {
    data_ = nullptr;
    size_ = 0;
    return ErrnoToStatus(errno, absl::StrCat("fusion buffer of ", size, " bytes"));
  }
  std::memset(aligned, 0, size);  // pay the page faults once, here
  data_ = aligned;
  size_ = size;
  return data_;
}

absl::StatusOr<char*> HostBuffer::GetOnEveryRank(size_t bytes, MPI_Comm comm) {
  if (bytes <= size_ && data_ != nullptr) return data_;
  absl::StatusOr<char*> got = Get(bytes);
  HVX_RETURN_IF_ERROR(AgreeOnEveryRank(comm, got.status()));
  return got;
}

absl::Status CheckFitsInt(int64_t bytes, absl::string_view what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a negative count of ", bytes, " bytes"));
  }
  if (bytes > INT_MAX) {
    return absl::UnimplementedError(
        absl::StrCat(what, ": ", bytes, " bytes exceed MPI's int count limit"));
  }
  return absl::OkStatus();
}

absl::Status AllgatherStrings(MPI_Comm comm, const std::string& mine,
                              std::vector<std::string>* all) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  HVX_RETURN_IF_ERROR(CheckFitsInt(static_cast<int64_t>(mine.size()), "control allgather"));
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), displs(size);
  HVX_RETURN_IF_ERROR(StartAndWait(comm, "MPI_Iallgather", kControlWait, [&](MPI_Request* q) {
    return MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm, q);
  }));
  int64_t off = 0;
  for (int r = 0; r < size; ++r) {
    // A peer's length is its word: a negative one (a broken or hostile peer) is refused before
    // anything is sized by it.
    if (lens[r] < 0) {
      return absl::DataLossError(absl::StrCat("control allgather: ", GlobalRank(comm, r),
                                              " announced a negative length (", lens[r], ")"));
    }
    displs[r] = static_cast<int>(off);
    off += lens[r];
  }
  HVX_RETURN_IF_ERROR(CheckFitsInt(off, "control allgather"));
  std::string flat(off, '\0');
  HVX_RETURN_IF_ERROR(StartAndWait(comm, "MPI_Iallgatherv", kControlWait, [&](MPI_Request* q) {
    return MPI_Iallgatherv(mine.data(), len, MPI_BYTE, flat.data(), lens.data(), displs.data(),
                           MPI_BYTE, comm, q);
  }));
  all->clear();
  for (int r = 0; r < size; ++r) all->push_back(flat.substr(displs[r], lens[r]));
  return absl::OkStatus();
}

absl::Status AgreeOnEveryRank(MPI_Comm comm, const absl::Status& local) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int failing = local.ok() ? size : rank;
  HVX_RETURN_IF_ERROR(StartAndWait(
      comm, "MPI_Iallreduce (agreeing on a local step)", kDataWait, [&](MPI_Request* q) {
        return MPI_Iallreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, comm, q);
      }));
  if (failing == size) return absl::OkStatus();
  if (failing < 0 || failing > size) {
    return absl::DataLossError(
        absl::StrCat("agreeing on a local step: a peer named rank ", failing, " of ", size));
  }
  // The failing rank's message, at most kMaxAgreedMessage bytes of it.
  constexpr int64_t kMaxAgreedMessage = 64 << 10;
  std::string message(local.message().substr(0, kMaxAgreedMessage));
  int64_t len = static_cast<int64_t>(message.size());
  HVX_RETURN_IF_ERROR(StartAndWait(
      comm, "MPI_Ibcast (a rank's error)", kDataWait,
      [&](MPI_Request* q) { return MPI_Ibcast(&len, 1, MPI_INT64_T, failing, comm, q); }));
  if (len < 0 || len > kMaxAgreedMessage) {
    return absl::DataLossError(absl::StrCat("agreeing on a local step: ", GlobalRank(comm, failing),
                                            " failed and announced a ", len, "-byte message"));
  }
  message.resize(static_cast<size_t>(len));
  HVX_RETURN_IF_ERROR(
      StartAndWait(comm, "MPI_Ibcast (a rank's error)", kDataWait, [&](MPI_Request* q) {
        return MPI_Ibcast(message.data(), static_cast<int>(len), MPI_BYTE, failing, comm, q);
      }));
  if (!local.ok()) return local;
  return absl::FailedPreconditionError(
      absl::StrCat(GlobalRank(comm, failing), " failed: ", message));
}

namespace {

// The concatenation of spans seen as one array of elements.
class VirtualBuffer {
 public:
  VirtualBuffer(std::vector<Span> spans, int64_t esize) : spans_(std::move(spans)), esize_(esize) {
    int64_t total = 0;
    for (const Span& sp : spans_) {
      starts_.push_back(total);
      total += sp.count;
    }
    total_ = total;
  }
  int64_t total() const { return total_; }

  // Calls fn(pointer, elements, offset within the range) for each contiguous part of
  // [begin, begin + n).
  template <typename Fn>
  void ForEachPart(int64_t begin, int64_t n, Fn fn) const {
    if (n <= 0) return;
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
    int64_t done = 0;
    while (done < n && i < spans_.size()) {
      const int64_t within = begin + done - starts_[i];
      const int64_t take = std::min(n - done, spans_[i].count - within);
      if (take > 0) fn(spans_[i].data + within * esize_, take, done);
      done += std::max<int64_t>(take, 0);
      ++i;
    }
  }

 private:
  std::vector<Span> spans_;
  int64_t esize_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
};

// Sends elements [send_begin, send_begin + send_n) of `send` to `right` and receives recv_n
// elements from `left`, into `into` when it is not null, else in place at [recv_begin, recv_begin
// + recv_n) of `recv`. One message per contiguous part: MPICH over UCX moves a contiguous message
// with one cross-process copy, but a derived datatype through its packing path (a copy into shared
// memory and another out, in small fragments). A rank's `send` is its right neighbour's `recv`
// (the same segment, cut at the same tensor boundaries), so the parts match one to one in order.
absl::Status Exchange(MPI_Comm comm, int right, int left, int tag, const VirtualBuffer& send,
                      int64_t send_begin, int64_t send_n, const VirtualBuffer& recv,
                      int64_t recv_begin, int64_t recv_n, char* into, int64_t esize,
                      std::vector<MPI_Request>* requests) {
  requests->clear();
  absl::Status status;
  auto recv_part = [&](char* p, int64_t k) {
    requests->push_back(MPI_REQUEST_NULL);
    const int code =
        MPI_Irecv(p, static_cast<int>(k * esize), MPI_BYTE, left, tag, comm, &requests->back());
    if (code != MPI_SUCCESS && status.ok()) status = MpiStatus(code, "ring MPI_Irecv");
  };
  if (into != nullptr) {
    // Same cuts as the sender's in-place parts of this range.
    recv.ForEachPart(recv_begin, recv_n,
                     [&](char*, int64_t k, int64_t at) { recv_part(into + at * esize, k); });
  } else {
    recv.ForEachPart(recv_begin, recv_n, [&](char* p, int64_t k, int64_t) { recv_part(p, k); });
  }
  send.ForEachPart(send_begin, send_n, [&](char* p, int64_t k, int64_t) {
    requests->push_back(MPI_REQUEST_NULL);
    const int code =
        MPI_Isend(p, static_cast<int>(k * esize), MPI_BYTE, right, tag, comm, &requests->back());
    if (code != MPI_SUCCESS && status.ok()) status = MpiStatus(code, "ring MPI_Isend");
  });
  const absl::Status wait = WaitPolitely(comm, static_cast<int>(requests->size()), requests->data(),
                                         "ring allreduce step", kDataWait, {left, right});
  return status.ok() ? wait : status;
}

}  // namespace

RingSegments PositionalSegments(const std::vector<Span>& spans, int size, int64_t esize) {
  int64_t count = 0;
  for (const Span& sp : spans) count += sp.count;
  RingSegments segments(size);
  size_t i = 0;
  int64_t within = 0;  // elements of spans[i] already placed
  for (int s = 0; s < size; ++s) {
    int64_t want = PartBegin(count, s + 1, size) - PartBegin(count, s, size);
    while (want > 0 && i < spans.size()) {
      const int64_t take = std::min(want, spans[i].count - within);
      if (take > 0) segments[s].push_back(Span{spans[i].data + within * esize, take});
      within += take;
      want -= take;
      if (within == spans[i].count) {
        ++i;
        within = 0;
      }
    }
  }
  return segments;
}

RingSegments PerSpanSegments(const std::vector<Span>& spans, int size, int64_t esize) {
  RingSegments segments(size);
  for (const Span& sp : spans) {
    for (int s = 0; s < size; ++s) {
      const int64_t b = PartBegin(sp.count, s, size), e = PartBegin(sp.count, s + 1, size);
      if (e > b) segments[s].push_back(Span{sp.data + b * esize, e - b});
    }
  }
  return segments;
}

absl::Status RingAllreduce(MPI_Comm comm, const RingSegments& segments, DataType dtype, ReduceOp op,
                           Scale postscale, int64_t piece_bytes, HostBuffer* scratch) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (static_cast<int>(segments.size()) != size) {
    return absl::InternalError(
        absl::StrCat("RingAllreduce: ", segments.size(), " segments for a communicator of ", size));
  }
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<VirtualBuffer> vbs;
  int64_t count = 0;
  for (const std::vector<Span>& seg : segments) {
    vbs.emplace_back(seg, esize);
    count += vbs.back().total();
  }
  if (size == 1 || count == 0) {
    for (const std::vector<Span>& seg : segments) {
      for (const Span& sp : seg) ScaleInPlace(dtype, sp.data, sp.count, postscale);
    }
    return absl::OkStatus();
  }
  const int64_t piece = std::max<int64_t>(1, std::min<int64_t>(piece_bytes, INT_MAX) / esize);
  HVX_ASSIGN_OR_RETURN(char* tmp, scratch->GetOnEveryRank(piece * esize, comm));
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  auto mod = [size](int x) { return ((x % size) + size) % size; };
  std::vector<MPI_Request> requests;
  // Reduce-scatter: after size-1 steps this rank holds the full result of segment rank+1. The
  // elements of segment k are reduced in one order, x[k] then x[k+1], ... x[k-1] (ranks mod size),
  // whatever else is in the segment.
  for (int s = 0; s < size - 1; ++s) {
    const VirtualBuffer& send = vbs[mod(rank - s)];
    const VirtualBuffer& recv = vbs[mod(rank - s - 1)];
    for (int64_t off = 0; off < std::max(send.total(), recv.total()); off += piece) {
      const int64_t sn = std::max<int64_t>(0, std::min(piece, send.total() - off));
      const int64_t rn = std::max<int64_t>(0, std::min(piece, recv.total() - off));
      HVX_RETURN_IF_ERROR(
          Exchange(comm, right, left, 11, send, off, sn, recv, off, rn, tmp, esize, &requests));
      // The last step completes this rank's segment: scale it block by block while the block is
      // still in cache, instead of in another pass over memory.
      const Scale scale = s == size - 2 ? postscale : Scale();
      recv.ForEachPart(off, rn, [&](char* p, int64_t k, int64_t at) {
        constexpr int64_t kBlock = 8192;
        for (int64_t b = 0; b < k; b += kBlock) {
          const int64_t m = std::min(kBlock, k - b);
          ReduceInto(dtype, op, p + b * esize, tmp + (at + b) * esize, m);
          ScaleInPlace(dtype, p + b * esize, m, scale);
        }
      });
    }
  }
  Failpoint("allreduce");
  // Allgather: pass the finished segments around, straight into place.
  for (int s = 0; s < size - 1; ++s) {
    const VirtualBuffer& send = vbs[mod(rank + 1 - s)];
    const VirtualBuffer& recv = vbs[mod(rank - s)];
    for (int64_t off = 0; off < std::max(send.total(), recv.total()); off += piece) {
      const int64_t sn = std::max<int64_t>(0, std::min(piece, send.total() - off));
      const int64_t rn = std::max<int64_t>(0, std::min(piece, recv.total() - off));
      HVX_RETURN_IF_ERROR(
          Exchange(comm, right, left, 12, send, off, sn, recv, off, rn, nullptr, esize, &requests));
    }
  }
  return absl::OkStatus();
}

absl::Status RingAllreduce(MPI_Comm comm, const std::vector<Span>& spans, DataType dtype,
                           ReduceOp op, Scale postscale, int64_t piece_bytes, HostBuffer* scratch) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return RingAllreduce(comm,
                       PositionalSegments(spans, size, static_cast<int64_t>(DataTypeSize(dtype))),
                       dtype, op, postscale, piece_bytes, scratch);
}

absl::Status RingAllreduce(MPI_Comm comm, void* data, int64_t count, DataType dtype, ReduceOp op,
                           Scale postscale, int64_t piece_bytes, HostBuffer* scratch) {
  return RingAllreduce(comm, {Span{static_cast<char*>(data), count}}, dtype, op, postscale,
                       piece_bytes, scratch);
}

absl::Status GatherAllreduce(MPI_Comm comm, char* data, const std::vector<int64_t>& bounds,
                             DataType dtype, ReduceOp op, Scale postscale, HostBuffer* gathered) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (static_cast<int>(bounds.size()) != size + 1 || bounds.front() != 0) {
    return absl::InternalError(
        absl::StrCat("GatherAllreduce: ", bounds.size(), " bounds for ", size, " ranks"));
  }
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t bytes = bounds.back() * esize;
  if (bytes > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherAllreduce: ", bytes, " bytes exceed MPI's int count"));
  }
  HVX_ASSIGN_OR_RETURN(char* all,
                       gathered->GetOnEveryRank(std::max<int64_t>(1, bytes * size), comm));
  HVX_RETURN_IF_ERROR(StartAndWait(comm, "MPI_Iallgather", kDataWait, [&](MPI_Request* q) {
    return MPI_Iallgather(data, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes),
                          MPI_BYTE, comm, q);
  }));
  // Segment k as the ring reduces it: x[k], then x[k+1] ... x[k-1] folded in one at a time.
  for (int k = 0; k < size; ++k) {
    const int64_t b = bounds[k] * esize, n = bounds[k + 1] - bounds[k];
    if (n <= 0) continue;
    std::memcpy(data + b, all + k * bytes + b, n * esize);
    for (int j = 1; j < size; ++j)
      ReduceInto(dtype, op, data + b, all + ((k + j) % size) * bytes + b, n);
    ScaleInPlace(dtype, data + b, n, postscale);
  }
  return absl::OkStatus();
}

absl::Status Allreduce(MPI_Comm comm, void* data, int64_t count, DataType dtype, ReduceOp op,
                       Scale postscale, HostBuffer* scratch) {
  if (count * static_cast<int64_t>(DataTypeSize(dtype)) < kRingMinBytes) {
    HVX_RETURN_IF_ERROR(ChunkedAllreduce(comm, data, count, dtype, op, INT_MAX));
    ScaleInPlace(dtype, data, count, postscale);
    return absl::OkStatus();
  }
  return RingAllreduce(comm, data, count, dtype, op, postscale, kRingPieceBytes, scratch);
}

}  // namespace hvx
