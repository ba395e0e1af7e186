// The world of an mpiexec job as the engine sees it, for the GPU backend's tests and benchmark:
// the registered "mpi" transport (//hvx/mpi, the one hvx::Init starts) and the DataPlaneContext
// the engine would pass a data plane factory, so the NCCL plane runs over the real control plane
// and host collectives without the engine's background thread.
//
//   HVX_ASSIGN_OR_RETURN(std::unique_ptr<TestWorld> world, TestWorld::Start());
//   auto plane = CreateNcclDataPlane(world->Context(/*device=*/0), NcclOptions{});
#ifndef HVX_NCCL_TEST_WORLD_H_
#define HVX_NCCL_TEST_WORLD_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/core/topology.h"
#include "hvx/core/transport.h"

namespace hvx {
namespace nccl {

class TestWorld {
 public:
  // Starts the registered "mpi" transport (MPI_Init if needed) on the calling thread, which must
  // make every later call, and computes the topology from every rank's host name.
  static absl::StatusOr<std::unique_ptr<TestWorld>> Start();
  // Frees the world communicator, then finalizes the transport.
  ~TestWorld();
  TestWorld(const TestWorld&) = delete;
  TestWorld& operator=(const TestWorld&) = delete;

  Communicator& comm() { return *comm_; }
  const Topology& topology() const { return topology_; }
  // What the engine passes the factory for the world process set and a tensor on cuda:`device`.
  DataPlaneContext Context(int device);

 private:
  TestWorld() = default;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Communicator> comm_;
  std::vector<std::string> hosts_;  // by rank, as the engine names them
  Topology topology_;
};

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_TEST_WORLD_H_
