// The per-rank wrapper: hydra starts `hvxrun_rank --hvx-rank-wrapper --plan h1:2,h2:2 -- PROGRAM
// ...` once per rank; the wrapper runs PROGRAM as its child.
//
//   int main(int argc, char** argv) {
//     if (int rc = hvx::launch::MaybeRunRankWrapper(argc, argv); rc >= 0) return rc;
//
// It exports the plan's view of the rank (HVX_RANK, HVX_SIZE, HVX_LOCAL_RANK, HVX_LOCAL_SIZE,
// HVX_CROSS_RANK, HVX_CROSS_SIZE, HVX_HOSTNAME), checks that hydra placed the rank where the plan
// says (MPI_LOCALRANKID/MPI_LOCALNRANKS), reports start and exit to hvxrun as control records on
// stderr (records.h), passes the program's stdout and stderr on through pipes of its own with
// every \x01 escaped, so that only the wrapper can write a record or a rank marker, and when the
// program ends non-zero (other than kPreemptedExitCode, a clean end asking for a rerun) or by a
// signal sends a PMI abort on the inherited PMI_FD: hydra 4.0.2 otherwise stops only that host's
// ranks and the job hangs. The program's PMI connection runs through the wrapper, which holds back
// the program's own abort (MPI_Abort) until an error record has told hvxrun which rank it was, and
// for up to 1 s. A wrapper whose proxy dies gets SIGHUP (parent-death signal) and passes it on; the
// program gets SIGKILL if the wrapper itself dies, so no rank outlives its host's share of the job.
//
// This library links only the C++ library (no Abseil, no hvx/common): it runs once per rank on
// the start-up path, and loading a few dozen shared libraries per rank was most of hvxrun's
// start-up cost. //tools/hvxrun:hvxrun_rank is the binary hvxrun uses; a program that passes
// itself as LaunchOptions::wrapper works too, at the cost of its own start-up time per rank.
#ifndef HVX_LAUNCH_RANK_WRAPPER_H_
#define HVX_LAUNCH_RANK_WRAPPER_H_

namespace hvx {
namespace launch {

// The first argument that switches a binary into the per-rank wrapper.
inline constexpr char kRankWrapperFlag[] = "--hvx-rank-wrapper";

// Runs the wrapper when argv[1] is kRankWrapperFlag and returns its exit code; -1 otherwise.
// Programs that call RunJob with themselves as LaunchOptions::wrapper must call this first.
int MaybeRunRankWrapper(int argc, char** argv);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_RANK_WRAPPER_H_
