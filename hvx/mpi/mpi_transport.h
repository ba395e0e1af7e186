// The MPICH transport: control plane on a duplicated MPI_COMM_WORLD, CPU collectives on a
// persistent pre-touched fusion buffer, process sets as sub-communicators, Adasum on CPU.
//
//   // Linking //hvx/mpi:hvx registers it as "mpi"; hvx::Init() then uses it.
//   HVX_RETURN_IF_ERROR(hvx::Init());
//
// All MPI calls come from the engine's background thread (see hvx/core/transport.h).
#ifndef HVX_MPI_MPI_TRANSPORT_H_
#define HVX_MPI_MPI_TRANSPORT_H_

#include <mpi.h>

#include <memory>
#include <string>

#include "hvx/core/transport.h"
#include "hvx/mpi/mpi_collectives.h"

namespace hvx {

class MpiTransport : public Transport {
 public:
  MpiTransport() = default;
  absl::StatusOr<std::unique_ptr<Communicator>> Start() override;
  absl::Status Finalize() override;
  std::string Describe() const override { return description_; }

 private:
  bool initialized_here_ = false;
  std::string description_ = "mpi";
};

// Wraps a communicator this object owns (MPI_Comm_free on destruction).
std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm comm);

}  // namespace hvx

#endif  // HVX_MPI_MPI_TRANSPORT_H_
