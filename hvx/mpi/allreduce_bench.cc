// Allreduce benchmark: hvx against raw MPI on the same buffers, in the same process.
//
//   bazel build //hvx/mpi:allreduce_bench
//   mpiexec -n 2 bazel-bin/hvx/mpi/allreduce_bench
//
// (a) one 64 MiB float32 allreduce; (b) ResNet-50's 161 gradient tensors (25,557,032 float32)
// submitted together then waited, against one MPI_Allreduce per tensor and against one pre-packed
// MPI_Allreduce including pack/unpack; (c) a 4-byte allreduce, waited, repeated (latency).
// Raw MPI runs before hvx::Init so that no background thread competes with it. Rank 0 prints
// medians and ratios (raw / hvx: > 1 means hvx is faster).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "hvx/core/api.h"
#include "hvx/mpi/mpi_collectives.h"

namespace {

int g_rank = 0;

// Median wall time of `reps` runs of fn in milliseconds, after one warm-up, synchronised by a
// barrier before each run.
double MedianMs(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const absl::Time start = absl::Now();
    fn();
    t.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::sort(t.begin(), t.end());
  double med = t[t.size() / 2];
  // Report the slowest rank's median: the job waits for it.
  MPI_Allreduce(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return med;
}

void Report(const std::string& what, double ms) {
  if (g_rank == 0) std::printf("%-58s %10.3f ms\n", what.c_str(), ms);
}

void Ratio(const std::string& what, double raw, double hvx) {
  if (g_rank == 0) std::printf("%-58s %10.2fx\n", what.c_str(), raw / hvx);
}

// The shapes of torchvision ResNet-50's parameters, in order: 161 tensors, 25,557,032 elements.
std::vector<int64_t> ResNet50Sizes() {
  std::vector<int64_t> s = {64 * 3 * 7 * 7, 64, 64};
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t planes = int64_t{64} << layer;
    for (int b = 0; b < blocks[layer]; ++b) {
      s.insert(s.end(), {planes * in, planes, planes, planes * planes * 9, planes, planes, planes * 4 * planes,
                         planes * 4, planes * 4});
      if (b == 0) s.insert(s.end(), {planes * 4 * in, planes * 4, planes * 4});
      in = planes * 4;
    }
  }
  s.insert(s.end(), {1000 * 2048, 1000});
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int reps = 9;

  // Buffers shared by both sides; touched once up front like a training job's gradients.
  std::vector<float> big(int64_t{16} << 20, 1.0f);
  const std::vector<int64_t> sizes = ResNet50Sizes();
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  std::vector<std::vector<float>> grads;
  for (int64_t n : sizes) grads.emplace_back(n, 1.0f);
  std::vector<float> packed(total, 0.0f);
  float tiny = 1.0f;
  if (g_rank == 0) {
    std::printf("ranks %d; ResNet-50 set: %zu tensors, %lld elements\n", size, sizes.size(),
                static_cast<long long>(total));
  }

  // Raw MPI baselines.
  const double raw_big = MedianMs(reps, [&] {
    MPI_Allreduce(MPI_IN_PLACE, big.data(), static_cast<int>(big.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });
  const double raw_per_tensor = MedianMs(reps, [&] {
    for (auto& g : grads) MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });
  const double raw_packed = MedianMs(reps, [&] {
    float* p = packed.data();
    for (auto& g : grads) {
      std::memcpy(p, g.data(), g.size() * 4);
      p += g.size();
    }
    MPI_Allreduce(MPI_IN_PLACE, packed.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    p = packed.data();
    for (auto& g : grads) {
      std::memcpy(g.data(), p, g.size() * 4);
      p += g.size();
    }
  });
  const int tiny_reps = 2000;
  const double raw_tiny = MedianMs(5, [&] {
    for (int i = 0; i < tiny_reps; ++i) MPI_Allreduce(MPI_IN_PLACE, &tiny, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }) / tiny_reps;
  // The piece size of the chunked reduction hvx uses, against neighbours.
  std::vector<std::pair<int64_t, double>> chunks;
  for (int64_t c : {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20}) {
    chunks.emplace_back(c, MedianMs(5, [&] {
      (void)hvx::ChunkedAllreduce(MPI_COMM_WORLD, big.data(), static_cast<int64_t>(big.size()),
                                  hvx::DataType::kFloat32, hvx::ReduceOp::kSum, c);
    }));
  }

  hvx::InitOptions options;
  if (!hvx::Init(options).ok()) {
    std::fprintf(stderr, "hvx::Init failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  hvx::AllreduceOptions sum;
  sum.op = hvx::ReduceOp::kSum;
  const double hvx_big = MedianMs(reps, [&] {
    hvx::TensorRef t(hvx::DataType::kFloat32, {static_cast<int64_t>(big.size())}, big.data());
    (void)hvx::Wait(hvx::Allreduce("big", t, t, sum));
  });
  hvx::AllreduceOptions avg;  // the DistributedOptimizer pattern: averaged, one handle per tensor
  const double hvx_resnet = MedianMs(reps, [&] {
    std::vector<hvx::Handle> handles;
    for (size_t i = 0; i < grads.size(); ++i) {
      hvx::TensorRef t(hvx::DataType::kFloat32, {static_cast<int64_t>(grads[i].size())}, grads[i].data());
      handles.push_back(hvx::Allreduce(absl::StrCat("grad.", i), t, t, avg));
    }
    (void)hvx::WaitAll(handles);
  });
  const double hvx_tiny = MedianMs(5, [&] {
    hvx::TensorRef t(hvx::DataType::kFloat32, {1}, &tiny);
    for (int i = 0; i < tiny_reps; ++i) (void)hvx::Wait(hvx::Allreduce("tiny", t, t, sum));
  }) / tiny_reps;
  (void)hvx::Shutdown();

  Report("(a) raw MPI_Allreduce 64 MiB", raw_big);
  Report("(a) hvx Allreduce 64 MiB", hvx_big);
  Ratio("(a) speedup vs raw MPI", raw_big, hvx_big);
  Report("(b) raw MPI, one MPI_Allreduce per tensor", raw_per_tensor);
  Report("(b) raw MPI, pre-packed single MPI_Allreduce (+pack/unpack)", raw_packed);
  Report("(b) hvx, 161 async Allreduce (average) then wait", hvx_resnet);
  Ratio("(b) speedup vs per-tensor MPI", raw_per_tensor, hvx_resnet);
  Ratio("(b) speedup vs pre-packed MPI", raw_packed, hvx_resnet);
  Report("(c) raw MPI_Allreduce 4 B, per op", raw_tiny);
  Report("(c) hvx Allreduce 4 B + Wait, per op", hvx_tiny);
  Ratio("(c) raw / hvx", raw_tiny, hvx_tiny);
  for (const auto& [c, ms] : chunks) {
    Report(absl::StrCat("chunked MPI_Allreduce 64 MiB, pieces of ", c >> 10, " KiB"), ms);
  }
  MPI_Finalize();
  return 0;
}
