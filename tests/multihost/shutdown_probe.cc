// An hvx program for the ways a job ends: every rank joins a 4 MiB allreduce (enough that its data
// crosses the hosts' network), checks the sum, then ends as asked.
//
//   shutdown_probe                          hvx::Shutdown() explicitly, exit 0
//   shutdown_probe --at-exit                no Shutdown call: hvx shuts down at exit
//   shutdown_probe --code-rank 3 --code 3   rank 3 exits 3 after a clean shutdown
//   shutdown_probe --fail-rank 2 --code 3   rank 2 exits 3 before the allreduce (others wait in it)
//
// Prints "rank R sum ok" on stdout after the allreduce; errors go to stderr with exit status 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "hvx/core/api.h"

int main(int argc, char** argv) {
  bool at_exit = false;
  int code_rank = -1, fail_rank = -1, code = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--at-exit")) {
      at_exit = true;
    } else if (!std::strcmp(argv[i], "--code-rank") && i + 1 < argc) {
      code_rank = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--fail-rank") && i + 1 < argc) {
      fail_rank = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--code") && i + 1 < argc) {
      code = std::atoi(argv[++i]);
    } else {
      std::fprintf(
          stderr, "usage: shutdown_probe [--at-exit] [--code-rank R | --fail-rank R] [--code C]\n");
      return 2;
    }
  }
  absl::Status s = hvx::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "Init: %s\n", s.ToString().c_str());
    return 1;
  }
  const int rank = hvx::Rank();
  if (rank == fail_rank) {
    std::fprintf(stderr, "rank %d exiting with %d before the allreduce\n", rank, code);
    std::exit(code);
  }
  constexpr int kElements = 1 << 20;
  std::vector<float> x(kElements, static_cast<float>(rank + 1));
  hvx::TensorRef t(hvx::DataType::kFloat32, {kElements}, x.data());
  hvx::AllreduceOptions o;
  o.op = hvx::ReduceOp::kSum;
  s = hvx::Wait(hvx::Allreduce("shutdown_probe", t, t, o));
  const float n = static_cast<float>(hvx::Size());
  if (!s.ok() || x[0] != n * (n + 1) / 2 || x[kElements - 1] != x[0]) {
    std::fprintf(stderr, "rank %d: allreduce: %s, got %g\n", rank, s.ToString().c_str(), x[0]);
    return 1;
  }
  std::printf("rank %d sum ok\n", rank);
  std::fflush(stdout);
  if (!at_exit) {
    s = hvx::Shutdown();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: Shutdown: %s\n", rank, s.ToString().c_str());
      return 1;
    }
  }
  return rank == code_rank ? code : 0;
}
