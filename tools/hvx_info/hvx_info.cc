// hvx_info: prints where this rank sits in the job as one JSON line, and with --check proves that
// allreduce, allgather and broadcast work across all ranks (hvx/core/job_info.h).
//
//   hvxrun -np 4 -H a:2,b:2 -- hvx_info --check
//   {"rank":0,"size":4,"local_rank":0,"local_size":2,"cross_rank":0,"cross_size":2,
//    "homogeneous":true,"host":"a","pid":4242,"visible_gpus":0,"check":"pass"}
//
//   hvx_info --version   # this build's GPU backend, NCCL and CUDA runtime; no job needed
//
// Keys are documented in hvx/core/README.md. Exit status: 0, or 1 when Init or a check fails.
#include <cstdio>
#include <cstring>
#include <string>

#include "hvx/core/api.h"
#include "hvx/core/job_info.h"
#include "hvx/nccl/gpu_backend.h"

int main(int argc, char** argv) {
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check") == 0) {
      check = true;
    } else if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("hvx_info: %s\n", hvx::nccl::DescribeGpuBackend().c_str());
      return 0;
    } else {
      std::fprintf(stderr, "usage: hvx_info [--check | --version]\n");
      return 2;
    }
  }
  absl::Status s = hvx::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "hvx_info: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const hvx::JobInfo info = hvx::DescribeJob(check);
  const std::string line = info.json + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
  int status = info.check_failed ? 1 : 0;
  s = hvx::Shutdown();
  if (!s.ok()) {
    std::fprintf(stderr, "hvx_info: %s\n", std::string(s.message()).c_str());
    status = 1;
  }
  return status;
}
