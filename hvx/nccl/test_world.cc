#include "hvx/nccl/test_world.h"

#include <unistd.h>

#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "hvx/common/clock.h"
#include "hvx/common/cluster.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"

namespace hvx {
namespace nccl {

absl::StatusOr<std::unique_ptr<TestWorld>> TestWorld::Start() {
  TransportFactory factory = FindTransport("mpi");
  if (!factory)
    return absl::FailedPreconditionError("no \"mpi\" transport linked (depend on //hvx/mpi:hvx)");
  std::unique_ptr<TestWorld> world(new TestWorld());
  world->transport_ = factory();
  HVX_ASSIGN_OR_RETURN(world->comm_, world->transport_->Start(InitOptions{}));
  std::vector<std::string> hosts;
  HVX_RETURN_IF_ERROR(world->comm_->Allgather(HostIdentity(HostName()), &hosts));
  world->hosts_ = HostNamesOf(hosts);
  world->topology_ = ComputeTopology(world->comm_->rank(), world->hosts_);
  return world;
}

TestWorld::~TestWorld() {
  comm_.reset();
  if (transport_ != nullptr) {
    absl::Status s = transport_->Finalize(MonotonicNow() + absl::Seconds(30));
    if (!s.ok()) HVX_LOG(ERROR) << "finalizing the transport: " << s;
  }
}

DataPlaneContext TestWorld::Context(int device) {
  DataPlaneContext ctx;
  ctx.comm = comm_.get();
  ctx.global_ranks.resize(topology_.size);
  std::iota(ctx.global_ranks.begin(), ctx.global_ranks.end(), 0);
  ctx.hosts = hosts_;
  ctx.global_rank = topology_.rank;
  ctx.local_rank = topology_.local_rank;
  ctx.local_size = topology_.local_size;
  ctx.cross_rank = topology_.cross_rank;
  ctx.cross_size = topology_.cross_size;
  ctx.device = Device::Cuda(device);
  return ctx;
}

}  // namespace nccl
}  // namespace hvx
