#include "hvx/core/fake_transport.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "hvx/common/status.h"
#include "hvx/kernels/cpu_ops.h"

namespace hvx {
namespace {

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

}  // namespace

std::shared_ptr<const std::vector<std::string>> FakeHub::Exchange(int rank, std::string mine) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t gen = generation_;
  slots_[rank] = std::move(mine);
  if (++arrived_ == size_) {
    result_ = std::make_shared<const std::vector<std::string>>(std::move(slots_));
    slots_.assign(size_, std::string());
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return result_;
  }
  cv_.wait(lock, [this, gen]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return generation_ != gen; });
  // result_ is replaced only when all ranks of the next generation arrive, which needs this rank.
  return result_;
}

std::shared_ptr<FakeHub> FakeHub::Child(int64_t sequence, int color, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& child = children_[{sequence, color}];
  if (!child) child = std::make_shared<FakeHub>(size);
  return child;
}

void FakeHub::Post(int from, int to, std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  mail_[{from, to}].push_back(std::move(bytes));
  cv_.notify_all();
}

absl::StatusOr<std::string> FakeHub::Take(int from, int to, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  std::deque<std::string>& box = mail_[{from, to}];
  if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                    [&box]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !box.empty(); })) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", to, " waited ", absl::FormatDuration(timeout), " for a message from rank ", from));
  }
  std::string bytes = std::move(box.front());
  box.pop_front();
  return bytes;
}

absl::Status FakeCommunicator::Send(int to, const char* data, size_t n) {
  if (to < 0 || to >= size()) return absl::InvalidArgumentError(absl::StrCat("Send to rank ", to));
  hub_->Post(rank_, to, Bytes(data, n));
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Recv(int from, char* data, size_t n) {
  if (from < 0 || from >= size()) {
    return absl::InvalidArgumentError(absl::StrCat("Recv from rank ", from));
  }
  HVX_ASSIGN_OR_RETURN(const std::string bytes, hub_->Take(from, rank_, timeout_));
  if (bytes.size() != n) {
    return absl::InternalError(absl::StrCat("Recv from rank ", from, ": ", bytes.size(),
                                            " bytes arrived, ", n, " expected"));
  }
  if (n > 0) std::memcpy(data, bytes.data(), n);
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Gather(const std::string& mine, std::vector<std::string>* all) {
  auto r = hub_->Exchange(rank_, mine);
  if (rank_ == 0) {
    hub_->CountGather();
    *all = *r;
  } else {
    all->clear();
  }
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Broadcast(std::string* message) {
  *message = (*hub_->Exchange(rank_, rank_ == 0 ? *message : std::string()))[0];
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Allgather(const std::string& mine, std::vector<std::string>* all) {
  *all = *hub_->Exchange(rank_, mine);
  return absl::OkStatus();
}

absl::Status FakeCommunicator::BitwiseAnd(std::vector<uint64_t>* bits) {
  if (rank_ == 0) hub_->CountVote();
  auto r = hub_->Exchange(rank_, Bytes(bits->data(), bits->size() * 8));
  for (const std::string& other : *r) {
    if (other.size() != bits->size() * 8)
      return absl::InternalError("BitwiseAnd: length differs between ranks");
    const uint64_t* o = reinterpret_cast<const uint64_t*>(other.data());
    for (size_t i = 0; i < bits->size(); ++i) (*bits)[i] &= o[i];
  }
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Barrier() {
  hub_->Exchange(rank_, "");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> FakeCommunicator::Subset(
    const std::vector<int>& ranks) {
  const int64_t seq = subsets_++;
  hub_->Exchange(rank_, "");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank_) {
      return std::unique_ptr<Communicator>(new FakeCommunicator(
          hub_->Child(seq, 0, static_cast<int>(ranks.size())), static_cast<int>(i), timeout_));
    }
  }
  return std::unique_ptr<Communicator>();
}

absl::StatusOr<std::unique_ptr<Communicator>> FakeCommunicator::Split(int color, int key) {
  const int64_t seq = subsets_++;
  int32_t mine[2] = {color, key};
  auto all = hub_->Exchange(rank_, Bytes(mine, sizeof(mine)));
  if (color < 0) return std::unique_ptr<Communicator>();
  // Members of this color by (key, rank); this rank's place among them.
  std::vector<std::pair<int32_t, int>> members;
  for (int r = 0; r < size(); ++r) {
    int32_t theirs[2];
    std::memcpy(theirs, (*all)[r].data(), sizeof(theirs));
    if (theirs[0] == color) members.emplace_back(theirs[1], r);
  }
  std::sort(members.begin(), members.end());
  const int position = static_cast<int>(
      std::find(members.begin(), members.end(), std::make_pair(key, rank_)) - members.begin());
  return std::unique_ptr<Communicator>(new FakeCommunicator(
      hub_->Child(seq, color, static_cast<int>(members.size())), position, timeout_));
}

absl::Status FakeCommunicator::Allreduce(const AllreduceWork& w) {
  const size_t esize = DataTypeSize(w.dtype);
  std::string packed;
  std::vector<int64_t> counts;
  for (const TensorRef& t : w.inputs) {
    counts.push_back(t.num_elements());
    const size_t n = t.num_bytes();
    if (t.data() == nullptr) {
      packed.append(n, '\0');
    } else {
      std::string part = Bytes(t.data(), n);
      ScaleInPlace(w.dtype, part.data(), t.num_elements(), w.prescale_factor);
      packed += part;
    }
  }
  auto all = hub_->Exchange(rank_, packed);
  std::string acc = (*all)[0];
  if (w.op == ReduceOp::kAdasum) {
    size_t off = 0;
    for (int64_t c : counts) {
      for (int r = 1; r < size(); ++r)
        AdasumCombine(w.dtype, acc.data() + off, (*all)[r].data() + off, c);
      off += c * esize;
    }
  } else {
    for (int r = 1; r < size(); ++r) {
      ReduceInto(w.dtype, w.op, acc.data(), (*all)[r].data(),
                 static_cast<int64_t>(acc.size() / esize));
    }
  }
  ScaleInPlace(w.dtype, acc.data(), static_cast<int64_t>(acc.size() / esize), w.postscale_factor);
  size_t off = 0;
  for (size_t i = 0; i < w.outputs.size(); ++i) {
    const size_t n = counts[i] * esize;
    if (w.outputs[i].data() != nullptr) std::memcpy(w.outputs[i].data(), acc.data() + off, n);
    off += n;
  }
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Allgather(const AllgatherWork& w) {
  auto all = hub_->Exchange(rank_, Bytes(w.input.data(), w.input.num_bytes()));
  char* out = static_cast<char*>(w.output.data());
  for (const std::string& part : *all) {
    std::memcpy(out, part.data(), part.size());
    out += part.size();
  }
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Broadcast(const BroadcastWork& w) {
  auto all =
      hub_->Exchange(rank_, rank_ == w.root ? Bytes(w.tensor.data(), w.tensor.num_bytes()) : "");
  std::memcpy(w.tensor.data(), (*all)[w.root].data(), w.tensor.num_bytes());
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Alltoall(const AlltoallWork& w) {
  const size_t row_bytes = w.row_elements * DataTypeSize(w.input.dtype());
  std::string mine = Bytes(w.send_rows.data(), w.send_rows.size() * 8) +
                     Bytes(w.input.data(), w.input.num_bytes());
  auto all = hub_->Exchange(rank_, mine);
  char* out = static_cast<char*>(w.output.data());
  for (int j = 0; j < size(); ++j) {
    const std::string& theirs = (*all)[j];
    const int64_t* splits = reinterpret_cast<const int64_t*>(theirs.data());
    size_t off = size() * 8;
    for (int k = 0; k < rank_; ++k) off += splits[k] * row_bytes;
    std::memcpy(out, theirs.data() + off, splits[rank_] * row_bytes);
    out += splits[rank_] * row_bytes;
  }
  return absl::OkStatus();
}

absl::Status FakeCommunicator::ReduceScatter(const ReduceScatterWork& w) {
  const DataType dt = w.input.dtype();
  std::string mine = Bytes(w.input.data(), w.input.num_bytes());
  ScaleInPlace(dt, mine.data(), w.input.num_elements(), w.prescale_factor);
  auto all = hub_->Exchange(rank_, mine);
  std::string acc = (*all)[0];
  for (int r = 1; r < size(); ++r)
    ReduceInto(dt, ReduceOp::kSum, acc.data(), (*all)[r].data(), w.input.num_elements());
  int64_t row = 0;
  for (int j = 0; j < rank_; ++j) row += w.recv_rows[j];
  const size_t esize = DataTypeSize(dt);
  const int64_t n = w.recv_rows[rank_] * w.row_elements;
  char* src = acc.data() + row * w.row_elements * esize;
  ScaleInPlace(dt, src, n, w.postscale_factor);
  std::memcpy(w.output.data(), src, n * esize);
  return absl::OkStatus();
}

}  // namespace hvx
