#include "hvx/shm/shm_allreduce.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "hvx/common/clock.h"
#include "hvx/common/copy.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/status.h"
#include "hvx/kernels/cpu_ops.h"

namespace hvx {
namespace shm {

// The spans of one call as one sequence of elements: where each span starts in it.
class SpanIndex {
 public:
  explicit SpanIndex(const std::vector<ReduceSpan>& spans) : spans_(spans) {
    int64_t at = 0;
    for (const ReduceSpan& s : spans) {
      starts_.push_back(at);
      at += s.count;
    }
    total_ = at;
  }
  int64_t total() const { return total_; }

  // Calls fn(span, first element in it, count) for the pieces of [begin, begin + count).
  template <typename Fn>
  void ForEach(int64_t begin, int64_t count, Fn fn) const {
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
    while (count > 0) {
      const ReduceSpan& s = spans_[i];
      const int64_t first = begin - starts_[i];
      const int64_t n = std::min(count, s.count - first);
      if (n > 0) fn(s, first, n);
      begin += n;
      count -= n;
      ++i;
    }
  }

  // The input of [begin, begin + count) where it lies, when it is one piece of a real input.
  const char* Contiguous(int64_t begin, int64_t count, size_t esize) const {
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
    const ReduceSpan& s = spans_[i];
    const int64_t first = begin - starts_[i];
    if (s.in == nullptr || first + count > s.count) return nullptr;
    return s.in + first * static_cast<int64_t>(esize);
  }

 private:
  const std::vector<ReduceSpan>& spans_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
};

namespace {

// Copies inputs [begin, begin + count) to dst (zeros for missing inputs); `stream` when this core
// will not read dst again soon (StreamBytes).
void GatherInputs(const SpanIndex& index, int64_t begin, int64_t count, size_t esize, char* dst,
                  bool stream) {
  index.ForEach(begin, count, [&](const ReduceSpan& s, int64_t first, int64_t n) {
    if (s.in == nullptr) {  // a joined rank's missing input: no pointer arithmetic on null
      std::memset(dst, 0, n * esize);
    } else {
      const char* src = s.in + first * static_cast<int64_t>(esize);
      if (stream) {
        StreamBytes(dst, src, n * esize);
      } else {
        CopyBytes(dst, src, n * esize);
      }
    }
    dst += n * esize;
  });
}

// Copies src, elements [begin, begin + count), to the outputs and, unless `slot` is null, to
// slot[0, count) too, reading src once.
void ScatterOutputs(const SpanIndex& index, int64_t begin, int64_t count, size_t esize,
                    const char* src, char* slot = nullptr) {
  index.ForEach(begin, count, [&](const ReduceSpan& s, int64_t first, int64_t n) {
    char* out = s.out != nullptr ? s.out + first * static_cast<int64_t>(esize) : nullptr;
    if (out != nullptr) {
      StreamBytes(out, slot, src, n * esize);
    } else if (slot != nullptr) {
      StreamBytes(slot, src, n * esize);
    }
    src += n * esize;
    if (slot != nullptr) slot += n * esize;
  });
}

}  // namespace

ShmAllreducer::ShmAllreducer(ShmGroup* group, CrossHostLink* cross, const Options& options)
    : group_(group),
      cross_(cross),
      options_(options),
      scratch_(options.chunk_bytes),
      fold_(options.chunk_bytes) {}

void ShmAllreducer::Begin(DataType dtype, ReduceOp op, double prescale, Scale postscale,
                          absl::string_view what) {
  dtype_ = dtype;
  op_ = op;
  prescale_ = prescale;
  postscale_ = postscale;
  what_ = std::string(what);
  esize_ = DataTypeSize(dtype);
  chunk_ = std::max<int64_t>(1, options_.chunk_bytes / static_cast<int64_t>(esize_));
}

int64_t ShmAllreducer::RoundElements() const {
  return std::max<int64_t>(1, options_.round_bytes / static_cast<int64_t>(esize_) / chunk_) *
         chunk_;
}

absl::Status ShmAllreducer::End(absl::Status status, int64_t elements, absl::Time start) {
  stats_.calls++;
  stats_.bytes += elements * static_cast<int64_t>(esize_);
  stats_.total += MonotonicNow() - start;
  if (!status.ok()) {
    group_->MarkFailed();
    broken_ = Annotate(status, "the shared-memory CPU data plane stopped");
  }
  return status;
}

absl::Status ShmAllreducer::Allreduce(const std::vector<ReduceSpan>& spans, DataType dtype,
                                      ReduceOp op, double prescale, Scale postscale,
                                      absl::string_view what) {
  if (!broken_.ok()) return broken_;
  const absl::Time start = MonotonicNow();
  Begin(dtype, op, prescale, postscale, what);
  const SpanIndex index(spans);
  const int64_t round = RoundElements();
  absl::Status status;
  std::vector<Chunk> chunks;
  for (int64_t begin = 0; begin < index.total() && status.ok(); begin += round) {
    // Chunk j of the call's chunks so far belongs to local rank j mod size: ownership rotates.
    const int64_t count = std::min(round, index.total() - begin);
    chunks.clear();
    for (int64_t at = 0, j = 0; at < count; at += chunk_, ++j) {
      chunks.push_back(
          {at, std::min(chunk_, count - at), static_cast<int>((chunks_ + j) % group_->size())});
    }
    status = Round(index, begin, chunks, /*fetch=*/true);
  }
  return End(status, index.total(), start);
}

absl::Status ShmAllreducer::ReduceScatter(const char* in, char* out,
                                          const std::vector<int64_t>& counts, DataType dtype,
                                          ReduceOp op, double prescale, Scale postscale,
                                          absl::string_view what) {
  if (!broken_.ok()) return broken_;
  if (cross_ != nullptr || static_cast<int>(counts.size()) != group_->size()) {
    return absl::InternalError(absl::StrCat("shared-memory reduce-scatter of ", what, ": ",
                                            counts.size(), " parts for ", group_->size(),
                                            " local ranks", cross_ ? " on several hosts" : ""));
  }
  const absl::Time start = MonotonicNow();
  Begin(dtype, op, prescale, postscale, what);
  // One span per receiving rank; only this rank's has an output.
  std::vector<ReduceSpan> spans;
  std::vector<int64_t> bounds = {0};
  for (int r = 0; r < group_->size(); ++r) {
    spans.push_back({in + bounds.back() * static_cast<int64_t>(esize_),
                     r == group_->rank() ? out : nullptr, counts[r]});
    bounds.push_back(bounds.back() + counts[r]);
  }
  const SpanIndex index(spans);
  const int64_t round = RoundElements();
  absl::Status status;
  std::vector<Chunk> chunks;
  for (int64_t begin = 0; begin < index.total() && status.ok(); begin += round) {
    // Chunks end at the round's chunk grid and at the receivers' bounds.
    const int64_t end = std::min(begin + round, index.total());
    chunks.clear();
    int r = 0;
    for (int64_t at = begin; at < end;) {
      while (bounds[r + 1] <= at) ++r;
      const int64_t next =
          std::min({end, bounds[r + 1], begin + ((at - begin) / chunk_ + 1) * chunk_});
      chunks.push_back({at - begin, next - at, r});
      at = next;
    }
    status = Round(index, begin, chunks, /*fetch=*/false);
  }
  return End(status, index.total(), start);
}

const char* ShmAllreducer::ValueOf(int k, const SpanIndex& index, int64_t begin, int64_t count,
                                   size_t offset) {
  if (k != group_->rank()) return group_->data(k) + offset;
  if (prescale_ == 1.0) {
    if (const char* in = index.Contiguous(begin, count, esize_)) return in;
  }
  GatherInputs(index, begin, count, esize_, scratch_.data(), /*stream=*/false);
  ScaleInPlace(dtype_, scratch_.data(), count, prescale_);
  return scratch_.data();
}

absl::Status ShmAllreducer::ReduceChunk(const SpanIndex& index, int64_t begin, int64_t count,
                                        uint64_t chunk_id, size_t offset, char* acc) {
  const int size = group_->size();
  const size_t bytes = static_cast<size_t>(count) * esize_;
  const bool first_host = cross_ == nullptr || cross_->host() == 0;
  const bool last_host = cross_ == nullptr || cross_->host() == cross_->hosts() - 1;
  const auto published = [&](int k) {
    return k == group_->rank() ? absl::OkStatus()
                               : group_->WaitFor(k, ShmGroup::kPublished, chunk_id + 1, what_);
  };
  int k = 0;
  if (!first_host) {
    HVX_RETURN_IF_ERROR(Cross([&] { return cross_->Recv(cross_->host() - 1, acc, bytes); }));
  } else if (size == 1) {
    CopyBytes(acc, ValueOf(0, index, begin, count, offset), bytes);
    k = 1;
  } else {
    // The first two values in one pass (ValueOf returns at most one pointer into scratch_).
    HVX_RETURN_IF_ERROR(published(0));
    HVX_RETURN_IF_ERROR(published(1));
    ReduceTo(dtype_, op_, acc, ValueOf(0, index, begin, count, offset),
             ValueOf(1, index, begin, count, offset), count);
    k = 2;
  }
  for (; k < size; ++k) {
    HVX_RETURN_IF_ERROR(published(k));
    ReduceInto(dtype_, op_, acc, ValueOf(k, index, begin, count, offset), count);
  }
  if (last_host) {
    ScaleInPlace(dtype_, acc, count, postscale_);
  } else {
    HVX_RETURN_IF_ERROR(Cross([&] { return cross_->Send(cross_->host() + 1, acc, bytes); }));
  }
  return absl::OkStatus();
}

absl::Status ShmAllreducer::Round(const SpanIndex& index, int64_t begin,
                                  const std::vector<Chunk>& plan, bool fetch) {
  const int size = group_->size();
  const int me = group_->rank();
  const uint64_t round = rounds_;
  const uint64_t base = chunks_;
  const size_t buffer = static_cast<size_t>(round % 2) * static_cast<size_t>(options_.round_bytes);
  const int64_t chunks = static_cast<int64_t>(plan.size());
  const auto owner = [&](int64_t j) { return plan[j].owner; };
  const auto first = [&](int64_t j) { return plan[j].first; };
  const auto length = [&](int64_t j) { return plan[j].length; };
  const auto offset = [&](int64_t j) {
    return buffer + static_cast<size_t>(plan[j].first) * esize_;
  };
  char* const mine = group_->data(me);
  // Step 3, fetching the other owners' results into the outputs, in chunk order from `fetched`
  // on: with `wait`, all that are left; without, those already reduced.
  int64_t fetched = 0;
  const auto fetch_results = [&](bool wait) -> absl::Status {
    for (; fetch && fetched < chunks; ++fetched) {
      const int o = owner(fetched);
      if (o == me) continue;
      const uint64_t reduced = base + static_cast<uint64_t>(fetched) + 1;
      if (wait) {
        HVX_RETURN_IF_ERROR(group_->WaitFor(o, ShmGroup::kReduced, reduced, what_));
      } else if (group_->Get(o, ShmGroup::kReduced) < reduced) {
        break;
      }
      ScatterOutputs(index, begin + first(fetched), length(fetched), esize_,
                     group_->data(o) + offset(fetched));
    }
    return absl::OkStatus();
  };

  // This rank's half of the double buffer was last used two rounds ago: every peer must be done
  // reading it.
  if (round >= 2) {
    for (int q = 0; q < size; ++q) {
      if (q != me) HVX_RETURN_IF_ERROR(group_->WaitFor(q, ShmGroup::kConsumed, round - 1, what_));
    }
  }
  // 1. Publish the chunks other ranks own.
  for (int64_t j = 0; j < chunks; ++j) {
    if (owner(j) != me) {
      char* dst = mine + offset(j);
      // Scaled in place afterwards, it is read again at once.
      GatherInputs(index, begin + first(j), length(j), esize_, dst, prescale_ == 1.0);
      ScaleInPlace(dtype_, dst, length(j), prescale_);
    }
    group_->Set(ShmGroup::kPublished, base + j + 1);
  }
  Failpoint("allreduce");
  // 2. Reduce this rank's chunks. On one host the fold runs in fold_, which stays in this core's
  // cache, and the result streams to the region: a peer then reads it from memory rather than
  // from this core's cache, which is slower where the two cores share no cache (BENCHMARKS.md).
  // After each, the peers' results that are ready are fetched, so that the reads of the folds
  // and the copies of the fetches share the round instead of each having a phase of its own.
  for (int64_t j = 0; j < chunks; ++j) {
    if (owner(j) != me) continue;
    char* slot = mine + offset(j);
    if (cross_ != nullptr) {
      HVX_RETURN_IF_ERROR(
          ReduceChunk(index, begin + first(j), length(j), base + j, offset(j), slot));
      continue;
    }
    HVX_RETURN_IF_ERROR(
        ReduceChunk(index, begin + first(j), length(j), base + j, offset(j), fold_.data()));
    ScatterOutputs(index, begin + first(j), length(j), esize_, fold_.data(),
                   fetch ? slot : nullptr);
    group_->Set(ShmGroup::kReduced, base + j + 1);
    HVX_RETURN_IF_ERROR(fetch_results(/*wait=*/false));
  }
  if (cross_ != nullptr) {
    // The last host has the results; every other host receives them.
    HVX_RETURN_IF_ERROR(Cross([&] { return cross_->Flush(); }));
    const int last = cross_->hosts() - 1;
    for (int64_t j = 0; j < chunks; ++j) {
      if (owner(j) != me) continue;
      char* slot = mine + offset(j);
      const size_t bytes = static_cast<size_t>(length(j)) * esize_;
      if (cross_->host() == last) {
        for (int h = 0; h < last; ++h) {
          HVX_RETURN_IF_ERROR(Cross([&] { return cross_->Send(h, slot, bytes); }));
        }
      } else {
        HVX_RETURN_IF_ERROR(Cross([&] { return cross_->Recv(last, slot, bytes); }));
      }
      ScatterOutputs(index, begin + first(j), length(j), esize_, slot);
      group_->Set(ShmGroup::kReduced, base + j + 1);
    }
  }
  // 3. Fetch the other owners' results not fetched yet.
  HVX_RETURN_IF_ERROR(fetch_results(/*wait=*/true));
  if (cross_ != nullptr) HVX_RETURN_IF_ERROR(Cross([&] { return cross_->Flush(); }));
  group_->Set(ShmGroup::kConsumed, round + 1);
  rounds_ = round + 1;
  chunks_ = base + static_cast<uint64_t>(chunks);
  return absl::OkStatus();
}

}  // namespace shm
}  // namespace hvx
