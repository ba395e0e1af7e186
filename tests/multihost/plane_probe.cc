// An hvx program for the CPU allreduce planes across hosts: every rank allreduces (sum) the same
// four float32 tensors of random values seeded by its rank, three steps in a row, and prints a
// digest of the final bits. The same ranks on any layout of hosts must print the same digest.
//
//   plane_probe        prints "rank R digest D" on stdout; errors on stderr, exit status 1
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "hvx/core/api.h"

int main() {
  absl::Status s = hvx::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "Init: %s\n", s.ToString().c_str());
    return 1;
  }
  const int rank = hvx::Rank();
  const std::vector<int64_t> counts = {5, 300001, 1000, 70000};
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over every step's results
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> tensors;
    std::vector<hvx::Handle> handles;
    std::mt19937 rng(rank * 7919 + step);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (int64_t n : counts) {
      tensors.emplace_back(n);
      for (float& v : tensors.back()) v = value(rng);
    }
    hvx::AllreduceOptions o;
    o.op = hvx::ReduceOp::kSum;
    for (size_t i = 0; i < tensors.size(); ++i) {
      hvx::TensorRef t(hvx::DataType::kFloat32, {counts[i]}, tensors[i].data());
      handles.push_back(hvx::Allreduce("probe." + std::to_string(i), t, t, o));
    }
    s = hvx::WaitAll(handles);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: allreduce: %s\n", rank, s.ToString().c_str());
      return 1;
    }
    for (const auto& t : tensors) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(t.data());
      for (size_t i = 0; i < t.size() * sizeof(float); ++i) {
        digest = (digest ^ bytes[i]) * 1099511628211ull;
      }
    }
  }
  std::printf("rank %d digest %016llx\n", rank, static_cast<unsigned long long>(digest));
  std::fflush(stdout);
  s = hvx::Shutdown();
  if (!s.ok()) {
    std::fprintf(stderr, "Shutdown: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
