// Named points where a test can make one rank fail on purpose, to prove that every fault at every
// phase of a job ends it cleanly (tests/faults). Off unless HVX_FAILPOINT is set together with
// HVX_ALLOW_FAILPOINTS=1 (launchers pass every variable to every rank, so a stale HVX_FAILPOINT
// alone must not kill a real job: hvx::Init refuses to start with it); then one comparison per
// call.
//
//   HVX_FAILPOINT=negotiation:2:kill   rank 2 kills itself with SIGKILL the first time it
//                                      reaches hvx::Failpoint("negotiation")
//
// HVX_FAILPOINT is "POINT:RANK:ACTION[:N]" (fire on the Nth pass, default the first), RANK the
// global rank (HVX_RANK, else PMI_RANK) and
// ACTION one of exit (exit(3)), kill (SIGKILL), stop (SIGSTOP: a frozen rank), abort (abort(),
// as an uncaught exception or a failed check ends a program), or one a backend registered
// (hvx/mpi: mpi_abort, MPI_Abort(MPI_COMM_WORLD, 3); the trainer: throw, a C++ exception). It fires
// once per process, after writing "hvx failpoint POINT: rank R ACTION" to stderr. The points:
// "init" (hvx::Init, after the transport started), "negotiation" (a cycle that gathers requests),
// "allreduce" (between the steps of a CPU allreduce: the ring's, or the shared-memory plane's
// publish and fold), "shutdown" (before the transport's finalization), "checkpoint" (the trainer's
// checkpoint file written but not yet renamed into place; for a sharded checkpoint, every shard
// written but the index not yet), "checkpoint_shard" (a rank's shard of a sharded checkpoint
// written but not yet renamed, on the thread that writes it in the background), "shm_create" (the
// shared-memory plane's region created under its name, before the ranks have exchanged names),
// "split" (a communicator split: a process set's, the host gather's at Init, the shared-memory
// plane's at its first allreduce; before the ranks meet for it) and "in_split" (the same, after
// they met, as MPI_Comm_split is called).
#ifndef HVX_COMMON_FAILPOINT_H_
#define HVX_COMMON_FAILPOINT_H_

#include <string>

#include "hvx/common/env.h"

namespace hvx {

// What is wrong with `env` for failpoints: HVX_FAILPOINT set without HVX_ALLOW_FAILPOINTS=1 (a
// message naming both and how to clear it), else "".
std::string FailpointEnvironmentError(const Environment& env);

// Fires the failpoint `point` when HVX_FAILPOINT names it and this rank; otherwise returns.
void Failpoint(const char* point);

// Makes `action` available to HVX_FAILPOINT. Returns true (for static registration).
bool RegisterFailpointAction(const char* action, void (*fire)());

}  // namespace hvx

#endif  // HVX_COMMON_FAILPOINT_H_
