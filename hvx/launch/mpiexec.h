// Which mpiexec hvxrun runs: MPICH's hydra, which it drives with hydra's own flags (-rmk,
// -launcher, hostfiles, PMI), even where another MPI's mpiexec comes first on PATH (AWS's deep
// learning images put Open MPI's /opt/amazon/openmpi/bin there; Debian's alternatives may name
// either).
//
//   std::string note;
//   HVX_ASSIGN_OR_RETURN(options.mpiexec, ResolveMpiexec(options.mpiexec, env, &note));
#ifndef HVX_LAUNCH_MPIEXEC_H_
#define HVX_LAUNCH_MPIEXEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "hvx/common/env.h"

namespace hvx {
namespace launch {

enum class MpiKind { kHydra, kOpenMpi, kUnknown };

// What `path` is: by its name or the name it resolves to (mpiexec.hydra, mpiexec.mpich; orterun,
// prterun, *openmpi*), else, when `ask`, by what `path --version` prints (HYDRA; Open MPI,
// OpenRTE), else kUnknown.
MpiKind IdentifyMpiexec(const std::string& path, bool ask);

// The mpiexec to run for `requested` (--mpiexec; "mpiexec" by default). A path is taken as it is,
// unless its name says it is Open MPI's (FailedPrecondition naming it and the fix). "mpiexec" is
// looked for in every directory of env's PATH as mpiexec.hydra, mpiexec.mpich and mpiexec, then in
// /usr/bin (another bare name: only that name, on PATH): the first that is MPICH's wins; without
// one, the first of unknown kind (a wrapper script); with only Open MPI's, FailedPrecondition
// saying so and how to get MPICH's; with none, NotFound. `*note` (may be null) gets a line for the
// user when the name on PATH is not what runs.
absl::StatusOr<std::string> ResolveMpiexec(const std::string& requested, const Environment& env,
                                           std::string* note);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_MPIEXEC_H_
