// The MPICH transport: control plane on a duplicated MPI_COMM_WORLD, CPU collectives on a
// persistent pre-touched fusion buffer, process sets as sub-communicators, Adasum on CPU.
// When it initialized MPI it also ends it: with MPI_Finalize, or, under hydra with an MPICH whose
// finalize can deadlock over TCP, through hydra's PMI (hydra_pmi.h, README.md).
//
//   // Linking //hvx/mpi:hvx registers it as "mpi"; hvx::Init() then uses it.
//   HVX_RETURN_IF_ERROR(hvx::Init());
//
// All MPI calls come from the engine's background thread (see hvx/core/transport.h).
#ifndef HVX_MPI_MPI_TRANSPORT_H_
#define HVX_MPI_MPI_TRANSPORT_H_

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hvx/core/transport.h"
#include "hvx/mpi/hydra_pmi.h"
#include "hvx/mpi/mpi_collectives.h"

namespace hvx {

class MpiTransport : public Transport {
 public:
  MpiTransport() = default;
  absl::StatusOr<std::unique_ptr<Communicator>> Start(const InitOptions& options) override;
  absl::Status Finalize(absl::Time deadline) override;
  std::string Describe() const override { return description_; }

 private:
  bool initialized_here_ = false;
  // Set when this transport initialized MPI, hydra started the process and MPICH's finalize may
  // deadlock: Finalize then ends MPI through hydra's PMI (see hydra_pmi.h) instead.
  std::optional<HydraPmi> hydra_;
  std::string description_ = "mpi";
};

// True for MPICH before 4.2.0 (from MPI_Get_library_version's text), whose ch4/ucx MPI_Finalize
// can deadlock when ranks are connected over TCP.
bool MpichFinalizeMayDeadlock(absl::string_view library_version);

// "MPI_THREAD_FUNNELED" for MPI_THREAD_FUNNELED, and so on.
std::string ThreadLevelName(int level);

// Wraps a communicator this object owns (MPI_Comm_free on destruction). Its cpu() plane is MPI's
// (a ring, Adasum); the engine lays hvx/shm's plane over it where HVX_CPU_PLANE says.
std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm comm);

}  // namespace hvx

#endif  // HVX_MPI_MPI_TRANSPORT_H_
