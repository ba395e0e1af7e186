#include "hvx/mpi/shm_plane.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/cluster.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/mpi/mpi_collectives.h"
#include "hvx/shm/shm_allreduce.h"
#include "hvx/shm/shm_group.h"
#include "hvx/shm/shm_vote.h"

namespace hvx {
namespace {

// Every rank's host in `comm`, in rank order (collective).
absl::StatusOr<std::vector<std::string>> HostsOf(MPI_Comm comm) {
  std::vector<std::string> identities;
  HVX_RETURN_IF_ERROR(AllgatherStrings(comm, HostIdentity(HostName()), &identities));
  return HostNamesOf(identities);
}

// Collective over `local` (this host's ranks of `comm`): their shared-memory group with regions
// of `bytes`, its errors naming each rank by global rank and host, its waits bounded by `comm`'s
// collective timeout.
absl::StatusOr<std::unique_ptr<shm::ShmGroup>> CreateHostGroup(
    MPI_Comm comm, MPI_Comm local, const std::vector<std::string>& hosts, const HostLayout& layout,
    size_t bytes) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const int host = layout.host_of[rank];
  std::vector<std::string> names;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    if (layout.host_of[r] == host) {
      names.push_back(absl::StrCat(GlobalRank(comm, r), " (host ", hosts[r], ")"));
    }
  }
  return shm::ShmGroup::Create(
      layout.local_of[rank], layout.per_host[host], bytes,
      [local](const std::string& mine, std::vector<std::string>* all) {
        return AllgatherStrings(local, mine, all);
      },
      std::move(names), CollectiveTimeout(comm));
}

class ShmHostVote : public HostVote {
 public:
  explicit ShmHostVote(std::unique_ptr<shm::ShmGroup> group)
      : group_(std::move(group)), vote_(group_.get()) {}
  absl::Status And(std::vector<uint64_t>* bits) override {
    return vote_.And(bits, "the negotiation vote");
  }
  size_t MaxWords() const override { return shm::ShmBitwiseAnd::kMaxWords; }

 private:
  std::unique_ptr<shm::ShmGroup> group_;
  shm::ShmBitwiseAnd vote_;
};

// The same local rank on every host, over MPI: partial results travel host to host.
class MpiCrossHostLink : public shm::CrossHostLink {
 public:
  // Takes ownership of `comm` (ranks = hosts in order).
  explicit MpiCrossHostLink(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &host_);
    MPI_Comm_size(comm_, &hosts_);
  }
  ~MpiCrossHostLink() override { MPI_Comm_free(&comm_); }

  int host() const override { return host_; }
  int hosts() const override { return hosts_; }

  absl::Status Send(int to_host, const char* data, size_t n) override {
    MPI_Request q = MPI_REQUEST_NULL;
    HVX_RETURN_IF_ERROR(
        MpiStatus(MPI_Isend(data, static_cast<int>(n), MPI_BYTE, to_host, kTag, comm_, &q),
                  "MPI_Isend of a host's partial allreduce"));
    sends_.push_back(q);
    return absl::OkStatus();
  }

  absl::Status Recv(int from_host, char* data, size_t n) override {
    return StartAndWait(
        comm_, "receiving another host's partial allreduce", kDataWait, [&](MPI_Request* q) {
          return MPI_Irecv(data, static_cast<int>(n), MPI_BYTE, from_host, kTag, comm_, q);
        });
  }

  absl::Status Flush() override {
    if (sends_.empty()) return absl::OkStatus();
    absl::Status s = WaitPolitely(comm_, static_cast<int>(sends_.size()), sends_.data(),
                                  "sending a host's partial allreduce", kDataWait);
    sends_.clear();
    return s;
  }

 private:
  static constexpr int kTag = 11;
  MPI_Comm comm_;
  int host_ = 0;
  int hosts_ = 1;
  std::vector<MPI_Request> sends_;
};

class ShmCpuPlane : public DataPlane {
 public:
  ShmCpuPlane(MPI_Comm comm, std::unique_ptr<DataPlane> mpi, CpuPlaneMode mode)
      : comm_(comm), mpi_(std::move(mpi)), mode_(mode) {}

  ~ShmCpuPlane() override {
    if (reducer_ != nullptr && reducer_->stats().calls > 0) {
      const shm::ShmAllreducer::Stats& s = reducer_->stats();
      HVX_LOG(DEBUG) << "CPU allreduce through shared memory: " << s.calls << " calls, "
                     << (s.bytes >> 20) << " MiB, " << absl::ToDoubleMilliseconds(s.total)
                     << " ms, of which " << absl::ToDoubleMilliseconds(s.cross)
                     << " ms between hosts";
    }
    reducer_.reset();
    cross_.reset();
    group_.reset();
    if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  }

  absl::Status Allreduce(const AllreduceWork& w) override {
    if (w.op == ReduceOp::kAdasum) return mpi_->Allreduce(w);
    HVX_RETURN_IF_ERROR(EnsureSetUp());
    if (reducer_ == nullptr) return mpi_->Allreduce(w);
    std::vector<shm::ReduceSpan> spans;
    spans.reserve(w.inputs.size());
    for (size_t i = 0; i < w.inputs.size(); ++i) {
      spans.push_back({static_cast<const char*>(w.inputs[i].data()),
                       static_cast<char*>(w.outputs[i].data()), w.inputs[i].num_elements()});
    }
    ScopedActivity a(w.activity, "SHM_ALLREDUCE");
    return reducer_->Allreduce(
        spans, w.dtype, w.op, w.prescale_factor, w.postscale_factor,
        w.names.size() == 1
            ? absl::StrCat("allreduce of '", w.names[0], "'")
            : absl::StrCat("allreduce of '", w.names[0], "' and ", w.names.size() - 1, " more"));
  }
  absl::Status Allgather(const AllgatherWork& w) override { return mpi_->Allgather(w); }
  absl::Status Broadcast(const BroadcastWork& w) override { return mpi_->Broadcast(w); }
  absl::Status Alltoall(const AlltoallWork& w) override { return mpi_->Alltoall(w); }
  // On one host through shared memory, folding each element as Allreduce does, so a sharded
  // optimizer's gradients are the bits of the allreduced ones; across hosts over MPI.
  absl::Status ReduceScatter(const ReduceScatterWork& w) override {
    HVX_RETURN_IF_ERROR(EnsureSetUp());
    if (reducer_ == nullptr || cross_ != nullptr) return mpi_->ReduceScatter(w);
    std::vector<int64_t> counts;
    for (int64_t rows : w.recv_rows) counts.push_back(rows * w.row_elements);
    ScopedActivity a(w.activity, "SHM_REDUCE_SCATTER");
    return reducer_->ReduceScatter(static_cast<const char*>(w.input.data()),
                                   static_cast<char*>(w.output.data()), counts, w.input.dtype(),
                                   ReduceOp::kSum, w.prescale_factor, w.postscale_factor,
                                   absl::StrCat("reduce-scatter of '", w.name, "'"));
  }

 private:
  // Sets up at the first data-plane call that needs shared memory; its error fails every one.
  absl::Status EnsureSetUp() {
    if (!set_up_) {
      set_up_ = true;
      setup_status_ = SetUp();
    }
    return setup_status_;
  }

  // Collective over comm_: the layout, then (where shared memory applies) the local and cross-host
  // communicators and the regions, agreed by every rank.
  absl::Status SetUp() {
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    HVX_ASSIGN_OR_RETURN(const std::vector<std::string> hosts, HostsOf(comm_));
    const HostLayout layout = LayoutOf(hosts);
    const int host = layout.host_of[rank];
    const int local_rank = layout.local_of[rank];
    const int local_size = layout.per_host[host];
    if (!layout.Homogeneous()) {
      const std::string why =
          absl::StrCat("the hosts run different numbers of ranks of this process set (",
                       absl::StrJoin(layout.per_host, ", "), ")");
      if (mode_ == CpuPlaneMode::kShm) {
        return absl::FailedPreconditionError(
            absl::StrCat("HVX_CPU_PLANE=shm: ", why, "; use HVX_CPU_PLANE=mpi or auto"));
      }
      if (rank == 0) HVX_LOG(INFO) << "CPU allreduce over MPI: " << why;
      return absl::OkStatus();
    }
    if (mode_ == CpuPlaneMode::kAuto && layout.MaxPerHost() == 1) return absl::OkStatus();

    HVX_RETURN_IF_ERROR(
        SplitWithin(comm_, host, local_rank, "MPI_Comm_split (ranks of a host)", &local_));
    if (layout.per_host.size() > 1) {
      MPI_Comm cross = MPI_COMM_NULL;
      HVX_RETURN_IF_ERROR(
          SplitWithin(comm_, local_rank, host, "MPI_Comm_split (one rank per host)", &cross));
      cross_ = std::make_unique<MpiCrossHostLink>(cross);
    }
    const shm::ShmAllreducer::Options options;
    absl::StatusOr<std::unique_ptr<shm::ShmGroup>> group =
        CreateHostGroup(comm_, local_, hosts, layout, shm::ShmAllreducer::RegionBytes(options));
    // Hosts decide apart: every rank of the set must take the same path.
    const absl::Status agreed = AgreeOnEveryRank(comm_, group.status());
    if (!agreed.ok()) {
      cross_.reset();
      if (mode_ == CpuPlaneMode::kShm) return Annotate(agreed, "HVX_CPU_PLANE=shm");
      if (rank == 0) HVX_LOG(WARNING) << "CPU allreduce over MPI: " << agreed.message();
      return absl::OkStatus();
    }
    group_ = std::move(*group);
    reducer_ = std::make_unique<shm::ShmAllreducer>(group_.get(), cross_.get(), options);
    if (rank == 0) {
      HVX_LOG(DEBUG) << "CPU allreduce through shared memory: " << layout.per_host.size()
                     << " host(s) x " << local_size << " rank(s)";
    }
    return absl::OkStatus();
  }

  MPI_Comm comm_;
  std::unique_ptr<DataPlane> mpi_;
  const CpuPlaneMode mode_;
  bool set_up_ = false;
  absl::Status setup_status_;  // kShm's failure to set up fails every allreduce
  MPI_Comm local_ = MPI_COMM_NULL;
  std::unique_ptr<shm::ShmGroup> group_;
  std::unique_ptr<MpiCrossHostLink> cross_;
  std::unique_ptr<shm::ShmAllreducer> reducer_;
};

}  // namespace

CpuPlaneMode ParseCpuPlaneMode(absl::string_view name) {
  if (name == "mpi") return CpuPlaneMode::kMpi;
  if (name == "shm") return CpuPlaneMode::kShm;
  return CpuPlaneMode::kAuto;
}

bool HostLayout::Homogeneous() const {
  return std::adjacent_find(per_host.begin(), per_host.end(), std::not_equal_to<int>()) ==
         per_host.end();
}

int HostLayout::MaxPerHost() const {
  return per_host.empty() ? 0 : *std::max_element(per_host.begin(), per_host.end());
}

HostLayout LayoutOf(const std::vector<std::string>& hosts) {
  HostLayout layout;
  std::vector<std::string> seen;
  for (const std::string& h : hosts) {
    const auto it = std::find(seen.begin(), seen.end(), h);
    const int index = static_cast<int>(it - seen.begin());
    if (it == seen.end()) {
      seen.push_back(h);
      layout.per_host.push_back(0);
    }
    layout.host_of.push_back(index);
    layout.local_of.push_back(layout.per_host[index]++);
  }
  return layout;
}

std::unique_ptr<DataPlane> MakeShmCpuPlane(MPI_Comm comm, std::unique_ptr<DataPlane> mpi_plane,
                                           CpuPlaneMode mode) {
  return std::make_unique<ShmCpuPlane>(comm, std::move(mpi_plane), mode);
}

absl::StatusOr<std::unique_ptr<HostVote>> MakeHostVote(MPI_Comm comm, CpuPlaneMode mode) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (mode == CpuPlaneMode::kMpi || size == 1) return nullptr;
  HVX_ASSIGN_OR_RETURN(const std::vector<std::string> hosts, HostsOf(comm));
  const HostLayout layout = LayoutOf(hosts);
  if (layout.per_host.size() != 1) return nullptr;
  absl::StatusOr<std::unique_ptr<shm::ShmGroup>> group =
      CreateHostGroup(comm, comm, hosts, layout, shm::ShmBitwiseAnd::RegionBytes());
  // ShmGroup::Create fails on every rank when it fails on one.
  if (!group.ok()) {
    if (rank == 0) HVX_LOG(WARNING) << "negotiation votes over MPI: " << group.status();
    return nullptr;
  }
  return std::unique_ptr<HostVote>(new ShmHostVote(std::move(*group)));
}

}  // namespace hvx
