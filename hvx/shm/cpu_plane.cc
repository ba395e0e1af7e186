#include "hvx/shm/cpu_plane.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "hvx/common/clock.h"
#include "hvx/common/layout.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/agreement.h"
#include "hvx/shm/plane_trial.h"
#include "hvx/shm/shm_allreduce.h"
#include "hvx/shm/shm_group.h"
#include "hvx/shm/shm_vote.h"

namespace hvx {
namespace {

std::string GlobalRank(const DataPlaneContext& ctx, int rank) {
  return absl::StrCat("global rank ", rank < static_cast<int>(ctx.global_ranks.size())
                                          ? ctx.global_ranks[rank]
                                          : rank);
}

absl::Duration CollectiveTimeout(const DataPlaneContext& ctx) {
  return ctx.options != nullptr ? absl::Seconds(ctx.options->collective_timeout_s)
                                : absl::InfiniteDuration();
}

// Collective over `local` (this host's ranks of ctx.comm): their shared-memory group with regions
// of `bytes`, its errors naming each rank by global rank and host, its waits bounded by the
// collective timeout.
absl::StatusOr<std::unique_ptr<shm::ShmGroup>> CreateHostGroup(
    const DataPlaneContext& ctx, Communicator* local, const std::vector<std::string>& hosts,
    const HostLayout& layout, size_t bytes) {
  const int rank = ctx.comm->rank();
  const int host = layout.host_of[rank];
  std::vector<std::string> names;
  for (int r : layout.LocalMembers(rank)) {
    names.push_back(absl::StrCat(GlobalRank(ctx, r), " (host ", hosts[r], ")"));
  }
  return shm::ShmGroup::Create(
      layout.local_of[rank], layout.per_host[host], bytes,
      [local](const std::string& mine, std::vector<std::string>* all) {
        return local->Allgather(mine, all);
      },
      std::move(names), CollectiveTimeout(ctx));
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

// The same local rank on every host, over a communicator of them (ranks = hosts in order): partial
// results travel host to host as the communicator's point-to-point bytes.
class CommCrossHostLink : public shm::CrossHostLink {
 public:
  explicit CommCrossHostLink(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  int host() const override { return comm_->rank(); }
  int hosts() const override { return comm_->size(); }
  absl::Status Send(int to_host, const char* data, size_t n) override {
    return Annotate(comm_->Send(to_host, data, n), "sending a host's partial allreduce");
  }
  absl::Status Recv(int from_host, char* data, size_t n) override {
    return Annotate(comm_->Recv(from_host, data, n), "receiving another host's partial allreduce");
  }
  absl::Status Flush() override {
    return Annotate(comm_->Flush(), "sending a host's partial allreduce");
  }

 private:
  std::unique_ptr<Communicator> comm_;
};

class ShmCpuPlane : public DataPlane {
 public:
  ShmCpuPlane(const DataPlaneContext& ctx, DataPlane* fallback)
      : ctx_(ctx),
        fallback_(fallback),
        required_(ctx.options != nullptr && ctx.options->cpu_plane == "shm") {}

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
    local_.reset();
  }

  absl::Status Allreduce(const AllreduceWork& w) override {
    if (w.op == ReduceOp::kAdasum) return fallback_->Allreduce(w);
    HVX_RETURN_IF_ERROR(EnsureSetUp());
    if (reducer_ == nullptr) return fallback_->Allreduce(w);
    if (!TrialApplies(w)) return SharedAllreduce(w);
    const int64_t bytes = FusedBytes(w);
    const shm::PlaneTrial::Pick pick = trial_.Next(bytes);
    if (!pick.timed) return Run(pick.plane, w);
    const absl::Time start = MonotonicNow();
    {
      ScopedActivity a(w.activity, "CPU_PLANE_TRIAL");
      HVX_RETURN_IF_ERROR(Run(pick.plane, w));
    }
    if (!trial_.Record(pick.size_class, pick.plane, MonotonicNow() - start, bytes)) {
      return absl::OkStatus();
    }
    // Every rank completes the class's last trial run at this same buffer.
    std::vector<std::string> all;
    HVX_RETURN_IF_ERROR(ctx_.comm->Allgather(trial_.Summary(pick.size_class), &all));
    absl::StatusOr<std::string> decided = trial_.Decide(pick.size_class, all);
    if (ctx_.comm->rank() == 0) {
      HVX_LOG(INFO) << (decided.ok() ? *decided : std::string(decided.status().message()));
    }
    return absl::OkStatus();
  }

  absl::Status Allgather(const AllgatherWork& w) override { return fallback_->Allgather(w); }
  absl::Status Broadcast(const BroadcastWork& w) override { return fallback_->Broadcast(w); }
  absl::Status Alltoall(const AlltoallWork& w) override { return fallback_->Alltoall(w); }
  // On one host through shared memory, folding each element as Allreduce does, so a sharded
  // optimizer's gradients are the bits of the allreduced ones; across hosts on the fallback.
  absl::Status ReduceScatter(const ReduceScatterWork& w) override {
    HVX_RETURN_IF_ERROR(EnsureSetUp());
    if (reducer_ == nullptr || cross_ != nullptr) return fallback_->ReduceScatter(w);
    std::vector<int64_t> counts;
    for (int64_t rows : w.recv_rows) counts.push_back(rows * w.row_elements);
    ScopedActivity a(w.activity, "SHM_REDUCE_SCATTER");
    return reducer_->ReduceScatter(static_cast<const char*>(w.input.data()),
                                   static_cast<char*>(w.output.data()), counts, w.input.dtype(),
                                   ReduceOp::kSum, w.prescale_factor, w.postscale_factor,
                                   absl::StrCat("reduce-scatter of '", w.name, "'"));
  }

 private:
  absl::Status Run(shm::PlaneTrial::Plane plane, const AllreduceWork& w) {
    return plane == shm::PlaneTrial::kShared ? SharedAllreduce(w) : fallback_->Allreduce(w);
  }

  absl::Status SharedAllreduce(const AllreduceWork& w) {
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

  // HVX_CPU_PLANE=auto times both planes where their results are the same bits: two ranks (a + b
  // is exact in either order), or HVX_FIXED_REDUCTION_ORDER=0. With more ranks in fixed order the
  // planes add in different orders, and a choice by timing would make runs differ bit for bit.
  bool TrialApplies(const AllreduceWork& w) const {
    return !required_ && (ctx_.comm->size() == 2 || !w.fixed_order);
  }

  static int64_t FusedBytes(const AllreduceWork& w) {
    int64_t elements = 0;
    for (const TensorRef& t : w.inputs) elements += t.num_elements();
    return elements * static_cast<int64_t>(DataTypeSize(w.dtype));
  }

  // Sets up at the first data-plane call that needs shared memory; its error fails every one.
  absl::Status EnsureSetUp() {
    if (!set_up_) {
      set_up_ = true;
      setup_status_ = SetUp();
    }
    return setup_status_;
  }

  // Collective over ctx_.comm: the layout, then (where shared memory applies) the local and
  // cross-host communicators and the regions, agreed by every rank.
  absl::Status SetUp() {
    Communicator& comm = *ctx_.comm;
    const int rank = comm.rank();
    const std::vector<std::string>& hosts = ctx_.hosts;
    const HostLayout layout = LayoutOf(hosts);
    const int host = layout.host_of[rank];
    const int local_rank = layout.local_of[rank];
    const int local_size = layout.per_host[host];
    if (!layout.Homogeneous()) {
      const std::string why =
          absl::StrCat("the hosts run different numbers of ranks of this process set (",
                       absl::StrJoin(layout.per_host, ", "), ")");
      if (required_) {
        return absl::FailedPreconditionError(
            absl::StrCat("HVX_CPU_PLANE=shm: ", why, "; use HVX_CPU_PLANE=mpi or auto"));
      }
      if (rank == 0) HVX_LOG(INFO) << "CPU allreduce over MPI: " << why;
      return absl::OkStatus();
    }
    if (!required_ && layout.MaxPerHost() == 1) return absl::OkStatus();

    HVX_ASSIGN_OR_RETURN(local_, comm.Split(host, local_rank));
    if (layout.per_host.size() > 1) {
      HVX_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> cross, comm.Split(local_rank, host));
      cross_ = std::make_unique<CommCrossHostLink>(std::move(cross));
    }
    const shm::ShmAllreducer::Options options;
    absl::StatusOr<std::unique_ptr<shm::ShmGroup>> group = CreateHostGroup(
        ctx_, local_.get(), hosts, layout, shm::ShmAllreducer::RegionBytes(options));
    // Hosts decide apart: every rank of the set must take the same path.
    const absl::Status agreed =
        AgreeOnEveryRank(comm, group.status(), [&](int r, absl::string_view why) {
          return absl::StrCat(GlobalRank(ctx_, r), " failed: ", why);
        });
    if (!agreed.ok()) {
      cross_.reset();
      if (required_) return Annotate(agreed, "HVX_CPU_PLANE=shm");
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

  const DataPlaneContext ctx_;
  DataPlane* const fallback_;
  const bool required_;  // HVX_CPU_PLANE=shm: fail where shared memory does not apply
  bool set_up_ = false;
  absl::Status setup_status_;  // the required plane's failure to set up fails every allreduce
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<shm::ShmGroup> group_;
  std::unique_ptr<CommCrossHostLink> cross_;
  std::unique_ptr<shm::ShmAllreducer> reducer_;
  shm::PlaneTrial trial_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlane>> MakeShmCpuPlane(const DataPlaneContext& ctx,
                                                           DataPlane* fallback) {
  return std::unique_ptr<DataPlane>(new ShmCpuPlane(ctx, fallback));
}

absl::StatusOr<std::unique_ptr<HostVote>> MakeShmHostVote(const DataPlaneContext& ctx) {
  Communicator& comm = *ctx.comm;
  if (comm.size() == 1) return nullptr;
  const HostLayout layout = LayoutOf(ctx.hosts);
  if (layout.per_host.size() != 1) return nullptr;
  absl::StatusOr<std::unique_ptr<shm::ShmGroup>> group =
      CreateHostGroup(ctx, &comm, ctx.hosts, layout, shm::ShmBitwiseAnd::RegionBytes());
  // ShmGroup::Create fails on every rank when it fails on one.
  if (!group.ok()) {
    if (comm.rank() == 0) HVX_LOG(WARNING) << "negotiation votes over MPI: " << group.status();
    return nullptr;
  }
  return std::unique_ptr<HostVote>(new ShmHostVote(std::move(*group)));
}

HVX_REGISTER_CPU_PLANE(shm, &MakeShmCpuPlane, &MakeShmHostVote);

}  // namespace hvx
