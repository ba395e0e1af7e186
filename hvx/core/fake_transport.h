// An in-process transport for engine tests: N "ranks" are N engines in one process, each on its
// own background thread, exchanging bytes through shared memory with a generation barrier.
//
//   auto hub = std::make_shared<FakeHub>(2);
//   auto t0 = std::make_unique<FakeTransport>(hub, 0);   // give t0 to rank 0's Engine, and so on
//
// Every collective is built on one primitive, Exchange (everyone's bytes to everyone), so the data
// plane's arithmetic is hvx/kernels' cpu_ops: a test over this transport checks the engine's
// planning, validation and scaling, not a network. Point-to-point bytes go through a mailbox per
// pair of ranks; a Recv waits at most InitOptions::collective_timeout_s.
#ifndef HVX_CORE_FAKE_TRANSPORT_H_
#define HVX_CORE_FAKE_TRANSPORT_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "hvx/core/transport.h"

namespace hvx {

class FakeHub {
 public:
  explicit FakeHub(int size) : size_(size), slots_(size) {}
  int size() const { return size_; }

  // Blocks until every rank of the hub has called; returns all contributions by rank.
  std::shared_ptr<const std::vector<std::string>> Exchange(int rank, std::string mine);

  // Control-plane gathers so far (counted once per collective call), to observe the cache's fast
  // path.
  int64_t gathers() const { return gathers_.load(); }
  void CountGather() { gathers_.fetch_add(1); }
  // Cache votes (BitwiseAnd calls) so far, counted on rank 0: one per negotiation cycle.
  int64_t votes() const { return votes_.load(); }
  void CountVote() { votes_.fetch_add(1); }

  // The hub of a subset; the same object for every member calling with the same sequence number
  // and color.
  std::shared_ptr<FakeHub> Child(int64_t sequence, int color, int size);

  // Point-to-point: Post queues `bytes` from rank `from` to rank `to`; Take blocks until the
  // oldest message between them has arrived, or fails after `timeout`.
  void Post(int from, int to, std::string bytes);
  absl::StatusOr<std::string> Take(int from, int to, absl::Duration timeout);

 private:
  const int size_;
  std::atomic<int64_t> gathers_{0};
  std::atomic<int64_t> votes_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> slots_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const std::vector<std::string>> result_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int64_t, int>, std::shared_ptr<FakeHub>> children_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, int>, std::deque<std::string>> mail_ ABSL_GUARDED_BY(mu_);
};

class FakeCommunicator : public Communicator, private DataPlane {
 public:
  FakeCommunicator(std::shared_ptr<FakeHub> hub, int rank,
                   absl::Duration timeout = absl::Seconds(60))
      : hub_(std::move(hub)), rank_(rank), timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  absl::Status Gather(const std::string& mine, std::vector<std::string>* all) override;
  absl::Status Broadcast(std::string* message) override;
  absl::Status Allgather(const std::string& mine, std::vector<std::string>* all) override;
  absl::Status BitwiseAnd(std::vector<uint64_t>* bits) override;
  absl::Status Barrier() override;
  DataPlane& cpu() override { return *this; }
  absl::Status Send(int to, const char* data, size_t n) override;
  absl::Status Recv(int from, char* data, size_t n) override;
  absl::Status Flush() override { return absl::OkStatus(); }  // Send copies
  absl::StatusOr<std::unique_ptr<Communicator>> Subset(const std::vector<int>& ranks) override;
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override;

 private:
  absl::Status Allreduce(const AllreduceWork& work) override;
  absl::Status Allgather(const AllgatherWork& work) override;
  absl::Status Broadcast(const BroadcastWork& work) override;
  absl::Status Alltoall(const AlltoallWork& work) override;
  absl::Status ReduceScatter(const ReduceScatterWork& work) override;

  std::shared_ptr<FakeHub> hub_;
  const int rank_;
  const absl::Duration timeout_;  // of a Recv
  int64_t subsets_ = 0;
};

class FakeTransport : public Transport {
 public:
  FakeTransport(std::shared_ptr<FakeHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  // Makes Finalize take this long, like an MPI_Finalize that hangs.
  void set_finalize_delay(absl::Duration d) { finalize_delay_ = d; }
  // Makes Finalize fail with this, like a transport that gave up waiting for its peers.
  void set_finalize_status(absl::Status s) { finalize_status_ = std::move(s); }
  absl::StatusOr<std::unique_ptr<Communicator>> Start(const InitOptions& options) override {
    return std::unique_ptr<Communicator>(
        new FakeCommunicator(hub_, rank_, absl::Seconds(options.collective_timeout_s)));
  }
  absl::Status Finalize(absl::Time) override {
    absl::SleepFor(finalize_delay_);
    return finalize_status_;
  }
  std::string Describe() const override { return "fake (in-process)"; }

 private:
  std::shared_ptr<FakeHub> hub_;
  const int rank_;
  absl::Duration finalize_delay_ = absl::ZeroDuration();
  absl::Status finalize_status_;
};

}  // namespace hvx

#endif  // HVX_CORE_FAKE_TRANSPORT_H_
