// Allreduce bandwidth of the NCCL data plane against raw ncclAllReduce on the same GPUs, per size,
// in the nccl-tests convention: algbw = bytes / time, busbw = algbw * 2(n-1)/n (n = ranks), so
// busbw is comparable with the hardware's link bandwidth whatever the rank count (0 at n = 1).
// The last columns are a device-to-device copy of the same bytes, the GPU's own ceiling. Run one
// rank per GPU:  mpiexec -n <gpus> nccl_allreduce_bench [--max_bytes=268435456] [--iters=20] Ranks
// meet over the real MPI transport (//hvx/mpi), as under hvx::Init.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvx/nccl/nccl_data_plane.h"
#include "hvx/nccl/policy.h"
#include "hvx/nccl/test_world.h"

namespace hvx {
namespace nccl {
namespace {

int64_t Flag(int argc, char** argv, const char* name, int64_t fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return std::atoll(argv[i] + prefix.size());
  }
  return fallback;
}

// Mean seconds per call over `iters` calls after 3 warm-up calls; the slowest rank's mean.
template <typename F>
double MeanSeconds(Communicator& comm, int iters, F&& once) {
  for (int i = 0; i < 3; ++i) once();
  comm.Barrier().IgnoreError();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  std::vector<std::string> all;
  comm.Allgather(std::to_string(s), &all).IgnoreError();
  for (const std::string& v : all) s = std::max(s, std::stod(v));
  return s;
}

int Run(int argc, char** argv) {
  const int64_t max_bytes = Flag(argc, argv, "max_bytes", int64_t{256} << 20);
  const int iters = static_cast<int>(Flag(argc, argv, "iters", 20));
  auto started = TestWorld::Start();
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", std::string(started.status().message()).c_str());
    return 1;
  }
  Communicator& world = (*started)->comm();
  DataPlaneContext ctx = (*started)->Context(0);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    if (world.rank() == 0) std::printf("SKIPPED: no CUDA device on this host\n");
    return 0;
  }
  auto device = BindLocalDevice(ctx.local_rank, ctx.local_size);
  if (!device.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", world.rank(),
                 std::string(device.status().message()).c_str());
    return 1;
  }
  ctx.device = Device::Cuda(*device);
  auto plane = CreateNcclDataPlane(
      ctx, NcclOptions::From(InitOptions::FromEnv(Environment::Process()).value_or(InitOptions{})));
  if (!plane.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", world.rank(),
                 std::string(plane.status().message()).c_str());
    return 1;
  }
  // The baseline: a raw NCCL communicator over the same ranks.
  ncclUniqueId id;
  if (world.rank() == 0) ncclGetUniqueId(&id);
  std::string id_bytes(reinterpret_cast<const char*>(&id), sizeof(id));
  if (!world.Broadcast(&id_bytes).ok() || id_bytes.size() != sizeof(id)) return 1;
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  ncclComm_t raw;
  if (ncclCommInitRank(&raw, world.size(), id, world.rank()) != ncclSuccess) return 1;
  cudaStream_t stream;
  cudaStreamCreate(&stream);

  const int n = world.size();
  float* buf = nullptr;
  cudaMalloc(&buf, max_bytes);
  cudaMemset(buf, 0, max_bytes);
  // The ceiling: a device-to-device copy of the same bytes on this rank's GPU.
  float* copy = nullptr;
  cudaMalloc(&copy, max_bytes);
  if (world.rank() == 0) {
    std::printf(
        "# ranks %d, NCCL %d, float32 sum in place; hvx = NcclDataPlane::Allreduce, raw = "
        "ncclAllReduce\n",
        n, LoadedNcclVersion());
    std::printf("%12s %12s %10s %10s %10s %10s %10s %8s %10s %10s\n", "size(B)", "count", "hvx(us)",
                "algbw", "busbw", "raw(us)", "raw_busbw", "ratio", "copy(us)", "copy_GB/s");
  }
  for (int64_t bytes = 8; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / sizeof(float);
    AllreduceWork w;
    w.names = {"bench"};
    w.inputs = {TensorRef(DataType::kFloat32, TensorShape({count}), buf, ctx.device)};
    w.outputs = w.inputs;
    const int reps = bytes >= (int64_t{64} << 20) ? std::max(3, iters / 4) : iters;
    bool ok = true;
    const double hvx_s = MeanSeconds(world, reps, [&] { ok &= (*plane)->Allreduce(w).ok(); });
    const double raw_s = MeanSeconds(world, reps, [&] {
      ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, raw, stream);
      cudaStreamSynchronize(stream);
    });
    const double copy_s = MeanSeconds(world, reps, [&] {
      cudaMemcpyAsync(copy, buf, bytes, cudaMemcpyDeviceToDevice, stream);
      cudaStreamSynchronize(stream);
    });
    if (!ok) {
      std::fprintf(stderr, "rank %d: allreduce of %lld bytes failed\n", world.rank(),
                   static_cast<long long>(bytes));
      return 1;
    }
    const double factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    const double algbw = bytes / hvx_s / 1e9;
    const double raw_algbw = bytes / raw_s / 1e9;
    if (world.rank() == 0) {
      std::printf("%12lld %12lld %10.1f %10.2f %10.2f %10.1f %10.2f %8.2f %10.1f %10.2f\n",
                  static_cast<long long>(bytes), static_cast<long long>(count), hvx_s * 1e6, algbw,
                  algbw * factor, raw_s * 1e6, raw_algbw * factor, raw_s / hvx_s, copy_s * 1e6,
                  bytes / copy_s / 1e9);
    }
  }
  ncclCommDestroy(raw);
  cudaStreamDestroy(stream);
  cudaFree(copy);
  cudaFree(buf);
  return 0;
}

}  // namespace
}  // namespace nccl
}  // namespace hvx

int main(int argc, char** argv) { return hvx::nccl::Run(argc, argv); }
