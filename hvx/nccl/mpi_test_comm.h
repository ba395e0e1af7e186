// A Communicator over MPI for the GPU backend's own tests and benchmark: the control plane hvx/core
// expects, plus host allreduce for hierarchical allreduce's step across hosts. It lets the NCCL
// data plane run under mpiexec without the engine; the job's real transport is //hvx/mpi.
//
//   MpiTestComm world(MPI_COMM_WORLD);            // after MPI_Init
//   auto plane = CreateNcclDataPlane(ContextFor(&world, /*device=*/0), NcclOptions{});
#ifndef HVX_NCCL_MPI_TEST_COMM_H_
#define HVX_NCCL_MPI_TEST_COMM_H_

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "hvx/core/transport.h"

namespace hvx {
namespace nccl {

class MpiTestComm : public Communicator {
 public:
  // Duplicates `comm`; the duplicate is freed with this object.
  explicit MpiTestComm(MPI_Comm comm);
  ~MpiTestComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status Gather(const std::string& mine, std::vector<std::string>* all) override;
  absl::Status Broadcast(std::string* message) override;
  absl::Status Allgather(const std::string& mine, std::vector<std::string>* all) override;
  absl::Status BitwiseAnd(std::vector<uint64_t>* bits) override;
  absl::Status Barrier() override;
  // Host allreduce only (what hierarchical allreduce needs); the other host collectives return
  // Unimplemented.
  DataPlane& cpu() override { return *cpu_; }
  absl::StatusOr<std::unique_ptr<Communicator>> Subset(const std::vector<int>& ranks) override;

  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<DataPlane> cpu_;
};

// The context the engine would pass for `comm` (all of MPI_COMM_WORLD's ranks on this host are
// assumed to share it: local rank = rank on the host, found by MPI_Comm_split_type).
DataPlaneContext ContextFor(MpiTestComm* comm, int device_index);

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_MPI_TEST_COMM_H_
