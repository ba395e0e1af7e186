// A rank program for the launcher tests: reports what MPI and hvxrun say about this rank, checks
// an allreduce, and fails on request.
//
//   rank_probe [--exit-rank R --code C] [--kill-rank R] [--ready]
//
// One stdout line per rank: "probe rank=R size=S local=L/LS hvx=R,S,L,LS,CR,CS,HOST host=H sum=OK".
// --ready prints "ready <ns since epoch>" right after MPI_Init (the start-up benchmark's clock).
// The failing rank fails after MPI_Init while the others wait in an allreduce, as a real job does.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

const char* Env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "-";
}

}  // namespace

int main(int argc, char** argv) {
  int exit_rank = -1, code = 0, kill_rank = -1;
  bool ready = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--exit-rank") && i + 1 < argc) exit_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--code") && i + 1 < argc) code = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kill-rank") && i + 1 < argc) kill_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ready")) ready = true;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, local_rank = 0, local_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (ready) {
    long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    printf("ready %lld\n", ns);
    fflush(stdout);
    MPI_Finalize();
    return 0;
  }
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
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
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("probe rank=%d size=%d local=%d/%d hvx=%s,%s,%s,%s,%s,%s,%s host=%s sum=%s\n", rank, size,
         local_rank, local_size, Env("HVX_RANK"), Env("HVX_SIZE"), Env("HVX_LOCAL_RANK"),
         Env("HVX_LOCAL_SIZE"), Env("HVX_CROSS_RANK"), Env("HVX_CROSS_SIZE"), Env("HVX_HOSTNAME"),
         host, sum == size ? "OK" : "BAD");
  fflush(stdout);
  MPI_Comm_free(&local);
  MPI_Finalize();
  return 0;
}
