// hvxrun_rank: the per-rank wrapper hvxrun starts through mpiexec (hvx/launch/rank_wrapper.h).
// Not meant to be run by hand:
//   mpiexec ... hvxrun_rank --hvx-rank-wrapper --plan h1:2,h2:2 -- PROGRAM ARGS...
#include "hvx/launch/rank_wrapper.h"
#include "hvx/launch/records.h"

int main(int argc, char** argv) {
  const int rc = hvx::launch::MaybeRunRankWrapper(argc, argv);
  if (rc >= 0) return rc;
  hvx::launch::WriteFully(2, std::string("usage: ") + argv[0] + " " +
                                 hvx::launch::kRankWrapperFlag +
                                 " --plan HOST:N,... -- PROGRAM [ARGS...] (started by hvxrun)\n");
  return 2;
}
