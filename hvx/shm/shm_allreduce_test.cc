// The shared-memory allreduce with threads as ranks: each thread maps the others' regions through
// /dev/shm exactly as processes do. Results are compared bit for bit with a fold of every rank's
// values in rank order, the order the plane promises. Over 700 lines: one case per behaviour of
// the plane (dtypes and operations, reduce-scatter, hosts, joined ranks, peers that fail, die or
// come late, regions left or taken, the vote), which every CPU allreduce on a host goes through.
#include "hvx/shm/shm_allreduce.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "hvx/common/clock.h"
#include "hvx/common/half.h"
#include "hvx/kernels/cpu_ops.h"
#include "hvx/shm/names.h"
#include "hvx/shm/shm_vote.h"

namespace hvx {
namespace shm {
namespace {

// An allgather of strings among `size` threads.
class ThreadExchange {
 public:
  explicit ThreadExchange(int size) : size_(size) {}
  absl::Status Exchange(int rank, const std::string& mine, std::vector<std::string>* all) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    if (values_.empty()) values_.resize(size_);
    values_[rank] = mine;
    if (++arrived_ == size_) {
      result_ = values_;
      values_.clear();
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
    *all = result_;
    return absl::OkStatus();
  }

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> values_, result_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

// Messages between threads standing for hosts: one FIFO per (from, to) pair.
class ThreadLinks {
 public:
  std::deque<std::string>& Queue(int slot, int from, int to) { return queues_[{slot, from, to}]; }
  std::mutex mu;
  std::condition_variable cv;

 private:
  std::map<std::tuple<int, int, int>, std::deque<std::string>> queues_;
};

class ThreadLink : public CrossHostLink {
 public:
  ThreadLink(ThreadLinks* links, int slot, int host, int hosts)
      : links_(links), slot_(slot), host_(host), hosts_(hosts) {}
  int host() const override { return host_; }
  int hosts() const override { return hosts_; }
  absl::Status Send(int to, const char* data, size_t n) override {
    std::lock_guard<std::mutex> lock(links_->mu);
    links_->Queue(slot_, host_, to).emplace_back(data, n);
    links_->cv.notify_all();
    return absl::OkStatus();
  }
  absl::Status Recv(int from, char* data, size_t n) override {
    std::unique_lock<std::mutex> lock(links_->mu);
    auto& q = links_->Queue(slot_, from, host_);
    links_->cv.wait(lock, [&] { return !q.empty(); });
    if (q.front().size() != n) return absl::InternalError("message size");
    std::memcpy(data, q.front().data(), n);
    q.pop_front();
    return absl::OkStatus();
  }
  absl::Status Flush() override { return absl::OkStatus(); }

 private:
  ThreadLinks* links_;
  int slot_, host_, hosts_;
};

std::vector<std::string> Names(int size) {
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) names.push_back(absl::StrCat("rank ", r));
  return names;
}

// `size` groups of `bytes` a rank, made by threads.
std::vector<std::unique_ptr<ShmGroup>> MakeGroups(int size, size_t bytes, absl::Duration timeout) {
  ThreadExchange exchange(size);
  std::vector<std::unique_ptr<ShmGroup>> groups(size);
  std::vector<std::thread> t;
  for (int r = 0; r < size; ++r) {
    t.emplace_back([&, r] {
      auto g = ShmGroup::Create(
          r, size, bytes,
          [&, r](const std::string& m, std::vector<std::string>* all) {
            return exchange.Exchange(r, m, all);
          },
          Names(size), timeout);
      ASSERT_TRUE(g.ok()) << g.status();
      groups[r] = std::move(*g);
    });
  }
  for (auto& th : t) th.join();
  return groups;
}

ShmAllreducer::Options SmallRounds() {
  ShmAllreducer::Options o;
  o.round_bytes = 64 << 10;  // many rounds, so both halves of the double buffer are reused
  o.chunk_bytes = 4 << 10;
  return o;
}

// Per rank: tensors of `counts` elements of `dtype` filled from a seed.
std::vector<std::vector<char>> MakeInputs(int rank, const std::vector<int64_t>& counts,
                                          DataType dtype) {
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> real(-3.0f, 3.0f);
  std::uniform_int_distribution<int> small(-50, 50);
  std::vector<std::vector<char>> out;
  for (int64_t n : counts) {
    std::vector<char> t(n * DataTypeSize(dtype));
    for (int64_t i = 0; i < n; ++i) {
      switch (dtype) {
        case DataType::kFloat32:
          reinterpret_cast<float*>(t.data())[i] = real(rng);
          break;
        case DataType::kFloat64:
          reinterpret_cast<double*>(t.data())[i] = real(rng);
          break;
        case DataType::kFloat16:
          reinterpret_cast<uint16_t*>(t.data())[i] = FloatToHalf(real(rng));
          break;
        case DataType::kInt32:
          reinterpret_cast<int32_t*>(t.data())[i] = small(rng);
          break;
        default:
          t[i] = static_cast<char>(small(rng) > 0);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Rank 0's value, then each later rank's folded in, each scaled first; then the postscale.
std::vector<std::vector<char>> Reference(const std::vector<std::vector<std::vector<char>>>& in,
                                         DataType dtype, ReduceOp op, double pre, double post) {
  std::vector<std::vector<char>> acc = in[0];
  const size_t esize = DataTypeSize(dtype);
  for (auto& t : acc) ScaleInPlace(dtype, t.data(), t.size() / esize, pre);
  for (size_t r = 1; r < in.size(); ++r) {
    for (size_t i = 0; i < acc.size(); ++i) {
      std::vector<char> v = in[r][i];
      ScaleInPlace(dtype, v.data(), v.size() / esize, pre);
      ReduceInto(dtype, op, acc[i].data(), v.data(), v.size() / esize);
    }
  }
  for (auto& t : acc) ScaleInPlace(dtype, t.data(), t.size() / esize, post);
  return acc;
}

struct Job {
  int hosts = 1;
  int local = 2;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double pre = 1.0, post = 1.0;
  std::vector<int64_t> counts;
  int calls = 1;
  ShmAllreducer::Options options = SmallRounds();
  // Each call reduce-scatters the first tensor (ScatterCounts) and allreduces the others.
  bool scatter = false;
};

// Elements of n each of `size` ranks receives: the first n % size get one more.
std::vector<int64_t> ScatterCounts(int64_t n, int size) {
  std::vector<int64_t> parts;
  for (int r = 0; r < size; ++r) parts.push_back(n / size + (r < n % size ? 1 : 0));
  return parts;
}

// Runs `job` with hosts x local threads; returns each rank's outputs.
std::vector<std::vector<std::vector<char>>> RunJob(const Job& job, bool in_place = true) {
  const int world = job.hosts * job.local;
  std::vector<std::vector<std::vector<char>>> data(world), outs(world);
  for (int r = 0; r < world; ++r) data[r] = MakeInputs(r, job.counts, job.dtype);
  std::deque<ThreadExchange> exchanges;
  for (int h = 0; h < job.hosts; ++h) exchanges.emplace_back(job.local);
  ThreadLinks links;
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      const int h = r / job.local, l = r % job.local;
      auto group = ShmGroup::Create(
          l, job.local, ShmAllreducer::RegionBytes(job.options),
          [&, l, h](const std::string& m, std::vector<std::string>* a) {
            return exchanges[h].Exchange(l, m, a);
          },
          Names(job.local), absl::Seconds(30));
      if (!group.ok()) {
        status[r] = group.status();
        return;
      }
      ThreadLink link(&links, l, h, job.hosts);
      ShmAllreducer reducer(group->get(), job.hosts > 1 ? &link : nullptr, job.options);
      for (int call = 0; call < job.calls && status[r].ok(); ++call) {
        if (job.scatter) {
          // Receives its slice of the first tensor; an allreduce of the rest between calls.
          const std::vector<int64_t> parts = ScatterCounts(job.counts[0], job.local);
          int64_t at = 0;
          for (int q = 0; q < l; ++q) at += parts[q];
          outs[r] = {std::vector<char>(parts[l] * DataTypeSize(job.dtype))};
          status[r] = reducer.ReduceScatter(data[r][0].data(), outs[r][0].data(), parts, job.dtype,
                                            job.op, job.pre, job.post, "test");
          std::vector<std::vector<char>> rest(data[r].begin() + 1, data[r].end());
          std::vector<ReduceSpan> spans;
          for (size_t i = 1; i < job.counts.size(); ++i)
            spans.push_back({rest[i - 1].data(), rest[i - 1].data(), job.counts[i]});
          if (status[r].ok() && !spans.empty())
            status[r] = reducer.Allreduce(spans, job.dtype, job.op, job.pre, job.post, "test");
          outs[r].insert(outs[r].end(), rest.begin(), rest.end());
          continue;
        }
        outs[r] = data[r];
        std::vector<ReduceSpan> spans;
        for (size_t i = 0; i < job.counts.size(); ++i) {
          char* out = outs[r][i].data();
          spans.push_back({in_place ? out : data[r][i].data(), out, job.counts[i]});
        }
        status[r] = reducer.Allreduce(spans, job.dtype, job.op, job.pre, job.post, "test");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  return outs;
}

void ExpectBitsEqual(const std::vector<std::vector<char>>& got,
                     const std::vector<std::vector<char>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    if (got[i].empty()) continue;  // an empty vector's data() may be null, which memcmp refuses
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size()), 0)
        << what << ": tensor " << i;
  }
}

void CheckAgainstReference(const Job& job) {
  const auto outs = RunJob(job);
  std::vector<std::vector<std::vector<char>>> in;
  for (int r = 0; r < job.hosts * job.local; ++r)
    in.push_back(MakeInputs(r, job.counts, job.dtype));
  const auto want = Reference(in, job.dtype, job.op, job.pre, job.post);
  for (size_t r = 0; r < outs.size(); ++r) ExpectBitsEqual(outs[r], want, absl::StrCat("rank ", r));
}

TEST(ShmAllreduceTest, FloatSumMatchesTheRankOrderFoldBitForBit) {
  for (int local : {1, 2, 3, 4}) {
    Job job;
    job.local = local;
    job.counts = {1, 1000, 70001, 3, 16384};  // straddles chunks, spans and rounds
    job.post = 1.0 / local;
    CheckAgainstReference(job);
  }
}

TEST(ShmAllreduceTest, RepeatedCallsReuseTheDoubleBuffer) {
  Job job;
  job.local = 3;
  job.counts = {50000};
  job.calls = 7;
  CheckAgainstReference(job);
}

TEST(ShmAllreduceTest, EveryDtypeAndOp) {
  const std::vector<std::pair<DataType, ReduceOp>> cases = {
      {DataType::kFloat64, ReduceOp::kSum},   {DataType::kFloat16, ReduceOp::kSum},
      {DataType::kInt32, ReduceOp::kMin},     {DataType::kInt32, ReduceOp::kMax},
      {DataType::kInt32, ReduceOp::kProduct}, {DataType::kBool, ReduceOp::kSum},
  };
  for (const auto& [dtype, op] : cases) {
    Job job;
    job.local = 3;
    job.dtype = dtype;
    job.op = op;
    job.counts = {10, 20000};
    CheckAgainstReference(job);
  }
}

TEST(ShmAllreduceTest, PrescaleAndPostscaleAndSeparateOutputs) {
  Job job;
  job.local = 3;
  job.pre = 0.5;
  job.post = 0.25;
  job.counts = {7, 9000};
  const auto outs = RunJob(job, /*in_place=*/false);
  std::vector<std::vector<std::vector<char>>> in;
  for (int r = 0; r < 3; ++r) in.push_back(MakeInputs(r, job.counts, job.dtype));
  const auto want = Reference(in, job.dtype, job.op, job.pre, job.post);
  for (int r = 0; r < 3; ++r) ExpectBitsEqual(outs[r], want, absl::StrCat("rank ", r));
}

// Rank r receives exactly its slice of what an allreduce of the same inputs gives, bit for bit,
// with the double buffer reused across reduce-scatters and allreduces, rounds that end inside a
// rank's slice, and ranks that receive nothing.
TEST(ShmAllreduceTest, ReduceScatterIsTheAllreducesSliceBitForBit) {
  for (const auto& [local, counts] : std::vector<std::pair<int, std::vector<int64_t>>>{
           {2, {70001, 5}}, {3, {50000, 1000}}, {4, {3}}, {4, {40013}}, {3, {1, 2, 3}}}) {
    Job job;
    job.local = local;
    job.counts = counts;
    job.post = 1.0 / local;
    job.scatter = true;
    job.calls = 3;
    const auto outs = RunJob(job);
    std::vector<std::vector<std::vector<char>>> in;
    for (int r = 0; r < local; ++r) in.push_back(MakeInputs(r, job.counts, job.dtype));
    const auto want = Reference(in, job.dtype, job.op, job.pre, job.post);
    const std::vector<int64_t> parts = ScatterCounts(counts[0], local);
    const size_t esize = DataTypeSize(job.dtype);
    int64_t at = 0;
    for (int r = 0; r < local; ++r) {
      std::vector<std::vector<char>> expected = want;
      expected[0] = std::vector<char>(want[0].begin() + at * esize,
                                      want[0].begin() + (at + parts[r]) * esize);
      ExpectBitsEqual(outs[r], expected, absl::StrCat(local, " ranks, rank ", r));
      at += parts[r];
    }
  }
}

// The same 4 ranks as 1 host x 4 and as 2 hosts x 2: the same bits, because each element is
// folded in global rank order either way.
TEST(ShmAllreduceTest, HierarchicalAcrossHostsEqualsOneHost) {
  Job one;
  one.local = 4;
  one.counts = {5, 100000, 333};
  Job two = one;
  two.hosts = 2;
  two.local = 2;
  Job three = one;
  three.hosts = 3;
  three.local = 1;
  three.counts = {5, 100000};
  const auto a = RunJob(one);
  const auto b = RunJob(two);
  for (int r = 0; r < 4; ++r) ExpectBitsEqual(b[r], a[0], absl::StrCat("2x2 rank ", r));
  CheckAgainstReference(two);
  CheckAgainstReference(three);
}

TEST(ShmAllreduceTest, JoinedRankContributesZerosAndWritesNothing) {
  const int n = 5000;
  ThreadExchange exchange(2);
  std::vector<float> a(n, 1.5f), result(n, 0.0f);
  absl::Status status[2];
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      auto group = ShmGroup::Create(
          r, 2, ShmAllreducer::RegionBytes(SmallRounds()),
          [&, r](const std::string& m, std::vector<std::string>* all) {
            return exchange.Exchange(r, m, all);
          },
          Names(2), absl::Seconds(30));
      ASSERT_TRUE(group.ok()) << group.status();
      ShmAllreducer reducer(group->get(), nullptr, SmallRounds());
      std::vector<ReduceSpan> spans;
      if (r == 0) {
        spans.push_back(
            {reinterpret_cast<char*>(a.data()), reinterpret_cast<char*>(result.data()), n});
      } else {
        spans.push_back({nullptr, nullptr, n});
      }
      status[r] = reducer.Allreduce(spans, DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0, "join");
    });
  }
  for (auto& th : t) th.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  for (int i = 0; i < n; ++i) ASSERT_EQ(result[i], 1.5f) << i;
}

// A peer that fails mid-collective, and one that never comes: the other ranks' waits end with an
// error naming the peer instead of spinning.
TEST(ShmAllreduceTest, APeerThatFailsOrNeverComesEndsTheWait) {
  ThreadExchange exchange(2);
  absl::Status waited;
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      auto group = ShmGroup::Create(
          r, 2, 1 << 20,
          [&, r](const std::string& m, std::vector<std::string>* all) {
            return exchange.Exchange(r, m, all);
          },
          {"global rank 0 (host a)", "global rank 1 (host a)"}, absl::Milliseconds(300));
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<std::string> sync;
      if (r == 1) {
        (*group)->MarkFailed();
        ASSERT_TRUE(exchange.Exchange(r, "", &sync).ok());
        ASSERT_TRUE(exchange.Exchange(r, "", &sync).ok());
        return;
      }
      ASSERT_TRUE(exchange.Exchange(r, "", &sync).ok());
      waited = (*group)->WaitFor(1, ShmGroup::kPublished, 1, "allreduce 'w'");
      EXPECT_TRUE(absl::IsAborted(waited)) << waited;
      EXPECT_EQ(waited.message(),
                "allreduce 'w': global rank 1 (host a) failed during the collective");
      ASSERT_TRUE(exchange.Exchange(r, "", &sync).ok());
    });
  }
  for (auto& th : t) th.join();

  auto groups = MakeGroups(2, 1 << 20, absl::Milliseconds(200));
  ASSERT_TRUE(groups[0] && groups[1]);
  const absl::Time start = MonotonicNow();
  const absl::Status late = groups[0]->WaitFor(1, ShmGroup::kReduced, 5, "allreduce 'late'");
  EXPECT_TRUE(absl::IsDeadlineExceeded(late)) << late;
  EXPECT_TRUE(absl::StrContains(late.message(), "rank 1")) << late;
  EXPECT_LT(MonotonicNow() - start, absl::Seconds(5));
}

TEST(ShmGroupTest, NothingIsLeftInDevShm) {
  ThreadExchange exchange(3);
  std::vector<std::thread> t;
  std::vector<std::unique_ptr<ShmGroup>> groups(3);
  for (int r = 0; r < 3; ++r) {
    t.emplace_back([&, r] {
      auto g = ShmGroup::Create(
          r, 3, 1 << 20,
          [&, r](const std::string& m, std::vector<std::string>* all) {
            return exchange.Exchange(r, m, all);
          },
          Names(3), absl::Seconds(30));
      ASSERT_TRUE(g.ok()) << g.status();
      groups[r] = std::move(*g);
    });
  }
  for (auto& th : t) th.join();
  // Mapped by all, named by none.
  const std::string prefix = absl::StrCat("hvx.", getpid(), ".");
  DIR* dir = opendir("/dev/shm");
  ASSERT_NE(dir, nullptr);
  while (dirent* e = readdir(dir)) {
    EXPECT_FALSE(absl::StartsWith(e->d_name, prefix)) << e->d_name;
  }
  closedir(dir);
  groups[1]->data(1)[0] = 42;
  EXPECT_EQ(groups[0]->data(1)[0], 42);
  EXPECT_EQ(groups[2]->data(1)[0], 42);
}

// Two processes over a socket pair, as two ranks of one host.
absl::Status SocketExchange(int fd, int rank, const std::string& mine,
                            std::vector<std::string>* all) {
  const uint32_t n = static_cast<uint32_t>(mine.size());
  if (write(fd, &n, 4) != 4 || write(fd, mine.data(), n) != static_cast<ssize_t>(n)) {
    return absl::InternalError("write");
  }
  uint32_t m = 0;
  if (read(fd, &m, 4) != 4) return absl::InternalError("read");
  std::string theirs(m, '\0');
  size_t got = 0;
  while (got < m) {
    const ssize_t k = read(fd, theirs.data() + got, m - got);
    if (k <= 0) return absl::InternalError("read");
    got += static_cast<size_t>(k);
  }
  *all =
      rank == 0 ? std::vector<std::string>{mine, theirs} : std::vector<std::string>{theirs, mine};
  return absl::OkStatus();
}

// Local rank `rank` of two whose exchange runs over the socket `fd`, the other being another
// process: "global rank 0 (host a)" and "global rank 1 (host a)".
absl::StatusOr<std::unique_ptr<ShmGroup>> SocketGroup(int fd, int rank, size_t bytes) {
  return ShmGroup::Create(
      rank, 2, bytes,
      [fd, rank](const std::string& m, std::vector<std::string>* all) {
        return SocketExchange(fd, rank, m, all);
      },
      {"global rank 0 (host a)", "global rank 1 (host a)"}, absl::Seconds(30));
}

TEST(ShmGroupTest, APeerProcessThatDiesEndsTheWait) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto g = SocketGroup(fds[1], 1, 1 << 20);
    _exit(g.ok() ? 0 : 1);  // dies without ever publishing
  }
  auto g = SocketGroup(fds[0], 0, 1 << 20);
  ASSERT_TRUE(g.ok()) << g.status();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const absl::Time start = MonotonicNow();
  const absl::Status s = (*g)->WaitFor(1, ShmGroup::kPublished, 1, "allreduce 'grad'");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "allreduce 'grad': global rank 1 (host a) (pid " +
                                                 std::to_string(child) +
                                                 ") exited during the collective"))
      << s;
  EXPECT_LT(MonotonicNow() - start, absl::Seconds(2));
  close(fds[0]);
  close(fds[1]);
}

// Whether this process may make a pid namespace (root, or CAP_SYS_ADMIN in its user namespace).
bool CanMakePidNamespace() {
  const pid_t child = fork();
  if (child == 0) _exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

// Containers of one pod share /dev/shm but not a pid namespace. The peer here is pid 1 of a
// namespace of its own, a pid that this process sees as its own init's: it is alive while it
// waits, and gone as soon as it exits.
TEST(ShmGroupTest, APeerInAnotherPidNamespaceIsAliveUntilItExits) {
  if (!CanMakePidNamespace()) GTEST_SKIP() << "cannot make a pid namespace here (CAP_SYS_ADMIN)";
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  int go[2];  // a byte: the peer exits
  ASSERT_EQ(pipe(go), 0);
  const std::vector<std::string> names = {"global rank 0 (host a)", "global rank 1 (host a)"};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);  // the parent's ends: a parent that fails early ends the child's waits
    close(go[1]);
    if (unshare(CLONE_NEWPID) != 0) _exit(3);
    const pid_t init = fork();  // pid 1 in the new namespace
    if (init == 0) {
      auto g = ShmGroup::Create(
          1, 2, 1 << 20,
          [&](const std::string& m, std::vector<std::string>* all) {
            return SocketExchange(fds[1], 1, m, all);
          },
          names, absl::Seconds(30));
      pollfd told_fd = {go[0], POLLIN, 0};
      char c;
      const bool told = poll(&told_fd, 1, 30000) == 1 && read(go[0], &c, 1) == 1;
      _exit(g.ok() && told ? 0 : 1);
    }
    int status = 0;
    _exit(init > 0 && waitpid(init, &status, 0) == init && WIFEXITED(status) ? WEXITSTATUS(status)
                                                                             : 2);
  }
  close(fds[1]);  // the child's ends: a child that fails early ends the exchange
  close(go[0]);
  auto g = ShmGroup::Create(
      0, 2, 1 << 20,
      [&](const std::string& m, std::vector<std::string>* all) {
        return SocketExchange(fds[0], 0, m, all);
      },
      names, absl::Seconds(1));
  ASSERT_TRUE(g.ok()) << g.status();
  const absl::Status alive = (*g)->WaitFor(1, ShmGroup::kPublished, 1, "allreduce 'grad'");
  EXPECT_TRUE(absl::IsDeadlineExceeded(alive)) << alive;
  ASSERT_EQ(write(go[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const absl::Time start = MonotonicNow();
  const absl::Status gone = (*g)->WaitFor(1, ShmGroup::kPublished, 1, "allreduce 'grad'");
  EXPECT_TRUE(absl::IsUnavailable(gone)) << gone;
  EXPECT_TRUE(absl::StrContains(
      gone.message(),
      "allreduce 'grad': global rank 1 (host a) (pid 1) exited during the collective"))
      << gone;
  EXPECT_LT(MonotonicNow() - start, absl::Milliseconds(500));
  close(fds[0]);
  close(go[1]);
}

TEST(ShmGroupTest, AFailureOnOneRankFailsEveryRank) {
  ThreadExchange exchange(2);
  std::thread t[2];
  absl::Status status[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      // Rank 1 asks for more than any /dev/shm holds.
      const size_t bytes = r == 1 ? (size_t{1} << 50) : (1 << 20);
      auto g = ShmGroup::Create(
          r, 2, bytes,
          [&, r](const std::string& m, std::vector<std::string>* all) {
            return exchange.Exchange(r, m, all);
          },
          {"global rank 0 (host a)", "global rank 1 (host a)"}, absl::Seconds(30));
      status[r] = g.status();
    });
  }
  for (auto& th : t) th.join();
  EXPECT_TRUE(absl::StrContains(status[1].message(), "HVX_CPU_PLANE=mpi")) << status[1];
  EXPECT_TRUE(absl::StrContains(status[0].message(), "failed on global rank 1 (host a)"))
      << status[0];
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A rank waiting for a slow peer (still in its backward pass) once took a whole core for the wait,
// spinning and yielding; with two ranks on two cores that core was training's. Past a short spin
// the wait sleeps, and still returns soon after the peer's progress.
TEST(ShmGroupTest, ALongWaitSleepsAndWakesSoonAfterThePeer) {
  auto groups = MakeGroups(2, 1 << 16, absl::Seconds(30));
  ASSERT_TRUE(groups[0] && groups[1]);
  absl::Time set_at;
  std::thread peer([&] {
    absl::SleepFor(absl::Milliseconds(600));
    set_at = MonotonicNow();
    groups[1]->Set(ShmGroup::kPublished, 1);
  });
  const double cpu_before = ThreadCpuSeconds();
  const absl::Time start = MonotonicNow();
  const absl::Status s = groups[0]->WaitFor(1, ShmGroup::kPublished, 1, "allreduce 'grad'");
  const absl::Time returned = MonotonicNow();
  const double cpu = ThreadCpuSeconds() - cpu_before;
  peer.join();
  ASSERT_TRUE(s.ok()) << s;
  const double wall = absl::ToDoubleSeconds(returned - start);
  EXPECT_GE(wall, 0.5);
  // Spinning and yielding used the whole wait (0.6 s of CPU where a core was free).
  EXPECT_LT(cpu, 0.2 * wall) << cpu << " s of CPU in a " << wall << " s wait";
  EXPECT_LT(returned - set_at, absl::Milliseconds(200));
}

// The /dev/shm names that carry `tag`.
std::vector<std::string> RegionsTagged(const std::string& tag) {
  std::vector<std::string> found;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return found;
  while (dirent* e = readdir(d)) {
    if (absl::StartsWith(e->d_name, "hvx." + tag + ".")) found.push_back(e->d_name);
  }
  closedir(d);
  return found;
}

// An exchange that fails after this rank created its region (a peer died, the exchange timed out)
// leaves no name behind: with --max-restarts each attempt leaked 16 MiB a rank.
TEST(ShmGroupTest, AFailedExchangeLeavesNoRegion) {
  int calls = 0;
  auto g = ShmGroup::Create(
      0, 2, 1 << 20,
      [&](const std::string& mine, std::vector<std::string>* all) {
        ++calls;
        EXPECT_EQ(RegionsTagged(ProcessShmTag()).size(), 1u) << "the region exists meanwhile";
        return absl::DeadlineExceededError("the exchange timed out");
      },
      {"global rank 0 (host a)", "global rank 1 (host a)"}, absl::Seconds(30));
  EXPECT_TRUE(absl::IsDeadlineExceeded(g.status())) << g.status();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(RegionsTagged(ProcessShmTag()).empty());
  // And when the second exchange (every rank's verdict on mapping the others) fails.
  calls = 0;
  g = ShmGroup::Create(
      0, 2, 1 << 20,
      [&](const std::string& mine, std::vector<std::string>* all) -> absl::Status {
        if (++calls == 2) return absl::UnavailableError("the peer died");
        *all = {mine, mine + ".gone"};  // a peer whose region is already gone
        return absl::OkStatus();
      },
      {"global rank 0 (host a)", "global rank 1 (host a)"}, absl::Seconds(30));
  EXPECT_TRUE(absl::IsUnavailable(g.status())) << g.status();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(RegionsTagged(ProcessShmTag()).empty());
}

// Two processes with equal pids in two pid namespaces over one /dev/shm once named their regions
// alike, so each mapped its own region as its peer's and waited for itself. Names carry a random
// tag now; a peer announcing this rank's own name is refused.
TEST(ShmGroupTest, ItsOwnRegionIsNotAPeer) {
  auto g = ShmGroup::Create(
      1, 2, 1 << 20,
      [&](const std::string& mine, std::vector<std::string>* all) {
        *all = {mine, mine};
        return absl::OkStatus();
      },
      {"global rank 0 (host a)", "global rank 1 (host a)"}, absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(g.status().message(),
                                "global rank 0 (host a) announced this rank's own region"))
      << g.status();
  EXPECT_TRUE(RegionsTagged(ProcessShmTag()).empty());
  EXPECT_NE(NewShmTag(), NewShmTag());
  EXPECT_EQ(NewShmTag().size(), 16u);
  EXPECT_TRUE(absl::StartsWith(RegionName(7), "/hvx." + ProcessShmTag() + "."));
}

// Another local user who reads /dev/shm (anyone can) learns the tag and pid from the first region
// and creates the next names first. They were "/hvx.<tag>.<pid>.<n>", so every rank's region
// failed with EEXIST and the plane was off (HVX_CPU_PLANE=shm: every allreduce failed). Names end
// in 64 random bits now: the group is made all the same.
TEST(ShmGroupTest, NamesTakenFirstByAnotherUserAreNotInTheWay) {
  const std::string base = "/hvx." + ProcessShmTag() + "." + std::to_string(getpid()) + ".";
  std::vector<std::string> planted;
  for (int n = 0; n < 4096; ++n) {
    const int fd = shm_open((base + std::to_string(n)).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
      close(fd);
      planted.push_back(base + std::to_string(n));
    }
  }
  const std::string name = RegionName(3);
  EXPECT_TRUE(absl::StartsWith(name, base + "3.")) << name;
  EXPECT_NE(RegionName(3), name);
  auto g = ShmGroup::Create(
      0, 1, 1 << 16,
      [&](const std::string& mine, std::vector<std::string>* all) {
        *all = {mine};
        return absl::OkStatus();
      },
      {"global rank 0 (host a)"}, absl::Seconds(30));
  EXPECT_TRUE(g.ok()) << g.status();
  for (const std::string& p : planted) shm_unlink(p.c_str());
}

// A name that leads to another group's region (pods with one host name whose ranks announce names
// from different /dev/shm's, a stale region under a reused name) is refused after mapping: the
// header names its owner's rank and the name it was created under.
TEST(ShmGroupTest, ARegionOwnedByAnotherRankIsRefused) {
  std::promise<std::string> other_name;
  std::promise<void> checked;
  std::shared_future<void> checked_done = checked.get_future().share();
  std::thread other([&] {
    int calls = 0;
    auto g = ShmGroup::Create(
        0, 2, 1 << 16,
        [&](const std::string& mine, std::vector<std::string>* all) -> absl::Status {
          if (++calls == 1) {
            other_name.set_value(mine);
            *all = {mine, mine + ".gone"};
            return absl::OkStatus();
          }
          checked_done.wait();  // keeps its region until the other group has looked at it
          return absl::CancelledError("done");
        },
        {"global rank 0 (host a)", "global rank 1 (host a)"}, absl::Seconds(30));
    EXPECT_FALSE(g.ok());
  });
  const std::string theirs = other_name.get_future().get();
  int calls = 0;
  auto g = ShmGroup::Create(
      0, 2, 1 << 16,
      [&](const std::string& mine, std::vector<std::string>* all) -> absl::Status {
        if (++calls == 1) {
          *all = {mine, theirs};  // "local rank 1" announces the other group's rank 0 region
        } else {
          *all = {mine, ""};
          checked.set_value();
        }
        return absl::OkStatus();
      },
      {"global rank 0 (host b)", "global rank 1 (host b)"}, absl::Seconds(30));
  other.join();
  EXPECT_TRUE(
      absl::StrContains(g.status().message(), "/dev/shm" + theirs +
                                                  " of global rank 1 (host b) belongs to local "
                                                  "rank 0 as " +
                                                  theirs))
      << g.status();
  EXPECT_TRUE(absl::StrContains(g.status().message(), "HVX_CPU_PLANE=mpi")) << g.status();
  EXPECT_TRUE(RegionsTagged(ProcessShmTag()).empty());
}

TEST(ShmNamesTest, RemoveRegionsTaggedRemovesOnlyThatTag) {
  const std::string a = NewShmTag(), b = NewShmTag();
  for (const std::string& name :
       {"/hvx." + a + ".1.0", "/hvx." + a + ".1.1", "/hvx." + b + ".1.0"}) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << name;
    close(fd);
  }
  EXPECT_EQ(RemoveRegionsTagged(a), 2);
  EXPECT_TRUE(RegionsTagged(a).empty());
  EXPECT_EQ(RegionsTagged(b).size(), 1u);
  EXPECT_EQ(RemoveRegionsTagged(b), 1);
  EXPECT_EQ(RemoveRegionsTagged("../etc"), 0);  // not a tag: nothing outside hvx's names
}

// This thread's voluntary context switches so far: each is a wake-up after a sleep or a block.
int64_t VoluntarySwitches() {
  FILE* f = fopen("/proc/thread-self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t n = -1;
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1) break;
  }
  fclose(f);
  return n;
}

// Every vote is the AND of every rank's words, whatever the word count and however the ranks
// interleave (some race ahead into the next vote, reusing a slot their peers may still read).
TEST(ShmVoteTest, EveryVoteIsTheAndOfEveryRanksWords) {
  constexpr int kRanks = 3, kVotes = 300;
  auto groups = MakeGroups(kRanks, ShmBitwiseAnd::RegionBytes(), absl::Seconds(30));
  ASSERT_TRUE(groups[0] && groups[1] && groups[2]);
  // Rank r's words of vote v: random, the same seed on every thread for the expected AND.
  auto words = [](int r, int v) {
    std::mt19937_64 gen(static_cast<uint64_t>(v) * 131 + static_cast<uint64_t>(r));
    const size_t n = v % 7 == 0 ? ShmBitwiseAnd::kMaxWords : 1 + v % 40;
    std::vector<uint64_t> w(n);
    for (uint64_t& x : w) x = gen() | gen();  // mostly ones: the AND keeps some
    return w;
  };
  std::vector<std::thread> t;
  std::vector<int> wrong(kRanks, 0);
  std::vector<absl::Status> status(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    t.emplace_back([&, r] {
      ShmBitwiseAnd vote(groups[r].get());
      std::mt19937 jitter(r);
      for (int v = 0; v < kVotes && status[r].ok(); ++v) {
        if (jitter() % 4 == 0) absl::SleepFor(absl::Microseconds(jitter() % 300));
        std::vector<uint64_t> bits = words(r, v);
        status[r] = vote.And(&bits, "vote");
        std::vector<uint64_t> want = words(0, v);
        for (int q = 1; q < kRanks; ++q) {
          const std::vector<uint64_t> theirs = words(q, v);
          for (size_t i = 0; i < want.size(); ++i) want[i] &= theirs[i];
        }
        if (bits != want) ++wrong[r];
      }
    });
  }
  for (auto& th : t) th.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_EQ(wrong[r], 0) << "rank " << r;
  }
  std::vector<uint64_t> too_many(ShmBitwiseAnd::kMaxWords + 1);
  const absl::Status s = ShmBitwiseAnd(groups[0].get()).And(&too_many, "vote");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

// A rank whose peer comes 600 ms late (still in its backward pass) blocks until it comes: only
// the liveness checks wake it (every 20 ms), where the polling wait of the data plane wakes at
// every one of its sleeps. It returns as soon as the peer votes.
TEST(ShmVoteTest, ARankWaitingForALatePeerBlocks) {
  auto groups = MakeGroups(2, ShmBitwiseAnd::RegionBytes(), absl::Seconds(30));
  ASSERT_TRUE(groups[0] && groups[1]);
  absl::Time voted_at;
  std::thread peer([&] {
    absl::SleepFor(absl::Milliseconds(600));
    std::vector<uint64_t> bits = {6};
    voted_at = MonotonicNow();
    EXPECT_TRUE(ShmBitwiseAnd(groups[1].get()).And(&bits, "vote").ok());
    EXPECT_EQ(bits[0], 2u);
  });
  std::vector<uint64_t> bits = {3};
  const int64_t switches = VoluntarySwitches();
  const double cpu = ThreadCpuSeconds();
  const absl::Time start = MonotonicNow();
  const absl::Status s = ShmBitwiseAnd(groups[0].get()).And(&bits, "vote");
  const absl::Time returned = MonotonicNow();
  const int64_t woke = VoluntarySwitches() - switches;
  const double used = ThreadCpuSeconds() - cpu;
  peer.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(bits[0], 2u);
  EXPECT_GE(returned - start, absl::Milliseconds(500));
  EXPECT_LT(returned - voted_at, absl::Milliseconds(100));
  // 30 liveness checks and the peer's vote; sleeping waits of 50 us to 2 ms take several hundred.
  EXPECT_LT(woke, 100) << "wake-ups in a 600 ms wait";
  EXPECT_LT(used, 0.05) << "s of CPU in a 600 ms wait";
}

// A peer whose process exits instead of voting fails the vote at once, naming it, and every vote
// after it.
TEST(ShmVoteTest, APeerThatExitsFailsTheVote) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto g = SocketGroup(fds[1], 1, ShmBitwiseAnd::RegionBytes());
    if (!g.ok()) _exit(1);
    std::vector<uint64_t> bits = {1};
    _exit(ShmBitwiseAnd(g->get()).And(&bits, "vote").ok() ? 0 : 1);  // then never again
  }
  auto g = SocketGroup(fds[0], 0, ShmBitwiseAnd::RegionBytes());
  ASSERT_TRUE(g.ok()) << g.status();
  ShmBitwiseAnd vote(g->get());
  std::vector<uint64_t> bits = {1};
  ASSERT_TRUE(vote.And(&bits, "the negotiation vote").ok());
  const absl::Time start = MonotonicNow();
  absl::Status s = vote.And(&bits, "the negotiation vote");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "the negotiation vote: global rank 1 (host a) (pid " +
                                                 std::to_string(child) +
                                                 ") exited during the collective"))
      << s;
  EXPECT_LT(MonotonicNow() - start, absl::Seconds(2));
  EXPECT_EQ(vote.And(&bits, "the negotiation vote"), s);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace shm
}  // namespace hvx
