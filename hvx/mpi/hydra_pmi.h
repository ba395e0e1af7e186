// The PMI-1 connection that MPICH's hydra (mpiexec, and so hvxrun) gives each process it starts,
// used to end a job without MPICH 4.0.2's ch4/ucx MPI_Finalize, which can deadlock over TCP.
//
//   std::optional<HydraPmi> pmi = HydraPmi::FromEnvironment(Environment::Process());
//   if (pmi) HVX_RETURN_IF_ERROR(pmi->Leave(deadline, [] { /* drive MPI progress */ }));
//
// Why: MPICH 4.0.2's UCX netmod closes every endpoint in MPI_Finalize and then waits in a PMI
// barrier without progressing UCX, so a peer whose close needs this rank's answer over TCP spins
// forever (fixed upstream in MPICH 4.2.0, which moves the barrier before the closes). Leave() does
// what a fixed MPI_Finalize does towards hydra: a barrier over PMI (during which MPI keeps
// progressing, so every message still travelling reaches its rank), then PMI's finalize
// handshake. Hydra then counts the process as finalized and reports whatever status it exits with;
// the kernel closes its sockets at exit. See hvx/mpi/README.md.
#ifndef HVX_MPI_HYDRA_PMI_H_
#define HVX_MPI_HYDRA_PMI_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hvx/common/env.h"

namespace hvx {

class HydraPmi {
 public:
  // The connection described by `env`: PMI_FD from hydra's proxy (which also sets
  // MPI_LOCALRANKID), speaking PMI-1 (MPIR_CVAR_PMI_VERSION unset or 1). nullopt otherwise, e.g.
  // under srun's PMI-2 or in a process MPI started as a singleton.
  static std::optional<HydraPmi> FromEnvironment(const Environment& env);

  explicit HydraPmi(int fd) : fd_(fd) {}

  // Waits on the PMI barrier with every other process of the job, then finalizes this process's
  // PMI membership. `progress` runs between 1 ms polls of the connection (it must not block).
  // Errors (a closed connection, an unexpected reply, `deadline` passing while a peer has not
  // arrived) say which step failed. After an OK return the process must make no further MPI
  // calls and must not call MPI_Finalize.
  absl::Status Leave(absl::Time deadline, const std::function<void()>& progress);

  // Sends one PMI-1 command line (`command` without its newline) and waits for the reply line,
  // which must start with `reply`; `progress` runs between polls. Exposed for tests.
  absl::Status Exchange(absl::string_view command, absl::string_view reply, absl::Time deadline,
                        const std::function<void()>& progress);

 private:
  int fd_;
  std::string pending_;  // bytes read after the last complete reply line
};

}  // namespace hvx

#endif  // HVX_MPI_HYDRA_PMI_H_
