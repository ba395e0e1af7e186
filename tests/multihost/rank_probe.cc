// A minimal MPI program for what hvx_info cannot do: fail on purpose after MPI_Init while the
// other ranks wait in a collective (the case where hydra 4.0.2 alone hangs across hosts), and
// time stamp the end of MPI_Init for the start-up benchmark without any hvx code in the way.
//
//   rank_probe --exit-rank 3 --code 3     rank 3 writes a line on stderr and exits 3
//   rank_probe --kill-rank 1              rank 1 kills itself with SIGKILL
//   rank_probe --abort-rank 2 --code 5    rank 2 writes a line on stderr and calls MPI_Abort(5)
//   rank_probe --ready                    every rank prints "ready <ns since epoch>" after MPI_Init
//
// Without flags every rank takes part in one allreduce and prints "rank R sum=S".
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  int exit_rank = -1, code = 0, kill_rank = -1, abort_rank = -1;
  bool ready = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--exit-rank") && i + 1 < argc) {
      exit_rank = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--code") && i + 1 < argc) {
      code = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--kill-rank") && i + 1 < argc) {
      kill_rank = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--abort-rank") && i + 1 < argc) {
      abort_rank = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--ready")) {
      ready = true;
    } else {
      fprintf(stderr, "rank_probe: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (ready) {
    const long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    printf("ready %lld\n", ns);
    fflush(stdout);
    MPI_Finalize();
    return 0;
  }
  // Every rank is past MPI_Init before one fails. Without this, a rank that dies at once can take
  // another rank's MPI_Init down with it: hosts made of network namespaces share one kernel, so
  // UCX connects their ranks through shared memory, which it opens through the peer's /proc entry
  // while MPI_Init exchanges addresses. That is a different failure (an MPI error in MPI_Init on
  // a third rank, which aborts the job) from the one these cases are about.
  if (exit_rank >= 0 || kill_rank >= 0 || abort_rank >= 0) MPI_Barrier(MPI_COMM_WORLD);
  if (rank == exit_rank) {
    fprintf(stderr, "rank %d exiting with %d on purpose\n", rank, code);
    fflush(stderr);
    _exit(code);
  }
  if (rank == kill_rank) {
    fprintf(stderr, "rank %d killing itself\n", rank);
    fflush(stderr);
    kill(getpid(), SIGKILL);
  }
  if (rank == abort_rank) {
    fprintf(stderr, "rank %d calls MPI_Abort(%d)\n", rank, code);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d sum=%d\n", rank, sum);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
