#include "hvx/torch/host_allocator.h"

#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hvx/common/memory.h"

namespace hvx {
namespace {

TEST(CachingHostAllocatorTest, FreedBlockOfTheSameSizeIsReusedWithoutPageFaults) {
  CachingHostAllocator a({});
  // Over glibc's largest heap block (32 MiB); this and kBytes - 1000 round to the same 50 MiB
  // block.
  constexpr size_t kBytes = (size_t{50} << 20) - 4096;
  void* first;
  {
    c10::DataPtr p = a.allocate(kBytes);
    first = p.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    std::memset(first, 1, kBytes);
  }
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(RoundUpToHugePages(kBytes + 64)));
  const long before = MinorPageFaults(FaultScope::kThisThread);
  c10::DataPtr again = a.allocate(kBytes - 1000);  // same rounded size
  std::memset(again.get(), 2, kBytes - 1000);
  const long faults = MinorPageFaults(FaultScope::kThisThread) - before;
  EXPECT_EQ(again.get(), first);
  EXPECT_LT(faults, 10) << "a reused block must not fault its pages in again";
  const HostAllocatorStats s = a.stats();
  EXPECT_EQ(s.maps, 1);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.cached_bytes, 0);
}

// A fork while another thread holds the allocator's mutex (the engine thread allocating an
// allgather's output as a DataLoader forks a worker) left the child with the mutex locked: its
// first allocation of 1 MiB or more hung for ever. Here one thread allocates and frees without
// pause while the main thread forks 100 children, each of which allocates once and exits.
TEST(CachingHostAllocatorTest, AChildForkedWhileAnotherThreadAllocatesCanAllocate) {
  CachingHostAllocator a({});
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) c10::DataPtr p = a.allocate(size_t{4} << 20);
  });
  int hung = 0;
  for (int i = 0; i < 100 && hung == 0; ++i) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      c10::DataPtr p = a.allocate(size_t{2} << 20);
      _exit(p.get() != nullptr ? 0 : 1);
    }
    int status = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        ++hung;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (hung == 0) EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  stop = true;
  busy.join();
  EXPECT_EQ(hung, 0) << "a child hung on its first allocation";
}

TEST(CachingHostAllocatorTest, SmallBlocksAndRawInterface) {
  CachingHostAllocator a({});
  std::vector<c10::DataPtr> small;
  for (size_t n : {0, 1, 63, 64, 4096, 100000}) {
    small.push_back(a.allocate(n));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.back().get()) % 64, 0u) << n;
    if (n > 0) std::memset(small.back().get(), 7, n);
  }
  small.clear();
  EXPECT_EQ(a.stats().maps, 0) << "blocks under 1 MiB come from the heap";
  void* raw = a.raw_allocate(size_t{3} << 20);
  std::memset(raw, 3, size_t{3} << 20);
  a.raw_deallocate(raw);
  EXPECT_EQ(a.stats().maps, 1);
  EXPECT_GT(a.stats().cached_bytes, 0);
}

TEST(CachingHostAllocatorTest, CacheBeyondItsBoundIsReturnedToTheKernel) {
  HostAllocatorOptions o;
  o.max_cached_bytes = size_t{64} << 20;
  CachingHostAllocator a(o);
  {
    c10::DataPtr x = a.allocate(size_t{40} << 20);
    c10::DataPtr y = a.allocate(size_t{40} << 20);
    EXPECT_EQ(a.stats().live_bytes, int64_t{84} << 20);  // 40 MiB + header, rounded to 2 MiB
  }
  const HostAllocatorStats s = a.stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.unmaps, 1);
  EXPECT_LE(s.cached_bytes, int64_t{64} << 20);
}

TEST(CachingHostAllocatorTest, AFullCacheDropsTheBlocksFreedLongestAgo) {
  HostAllocatorOptions o;
  o.max_cached_bytes = size_t{64} << 20;
  CachingHostAllocator a(o);
  constexpr size_t kA = size_t{20} << 20;  // a 22 MiB block with its header
  constexpr size_t kB = size_t{30} << 20;  // a 32 MiB block
  void* second_a;
  {
    c10::DataPtr a1 = a.allocate(kA);
    c10::DataPtr a2 = a.allocate(kA);
    second_a = a2.get();
    a1.clear();  // freed first: the oldest in the cache
  }
  EXPECT_EQ(a.stats().cached_bytes, int64_t{44} << 20);
  { c10::DataPtr b = a.allocate(kB); }  // 44 + 32 > 64: the first A block makes room
  HostAllocatorStats s = a.stats();
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.unmaps, 1);
  EXPECT_EQ(s.cached_bytes, int64_t{54} << 20);
  const int64_t maps = s.maps;
  c10::DataPtr b = a.allocate(kB);
  c10::DataPtr a3 = a.allocate(kA);
  EXPECT_EQ(a3.get(), second_a) << "the block freed last stays";
  s = a.stats();
  EXPECT_EQ(s.maps, maps) << "both sizes served from the cache";
  EXPECT_EQ(s.cached_bytes, 0);
  // A block larger than the whole bound is never cached, and evicts nothing.
  { c10::DataPtr huge = a.allocate(size_t{80} << 20); }
  EXPECT_EQ(a.stats().evictions, 1);
  EXPECT_EQ(a.stats().unmaps, 2);
}

TEST(CachingHostAllocatorTest, DefaultBoundSharesAQuarterOfMemoryAmongLocalProcesses) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(DefaultHostCacheBytes(24 * kGiB, 1), 4 * kGiB);  // capped
  EXPECT_EQ(DefaultHostCacheBytes(24 * kGiB, 4), 1536u << 20);
  EXPECT_EQ(DefaultHostCacheBytes(1024 * kGiB, 8), 4 * kGiB);
  EXPECT_EQ(DefaultHostCacheBytes(kGiB, 8), size_t{64} << 20);  // floor
  EXPECT_EQ(DefaultHostCacheBytes(0, 0), size_t{64} << 20);
}

TEST(CachingHostAllocatorTest, InstalledItServesTorchTensors) {
  MapEnvironment bad({{"HVX_HOST_CACHE_MAX_BYTES", "lots"}});
  auto refused = UseCachingHostAllocator(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "HVX_HOST_CACHE_MAX_BYTES='lots'"))
      << refused.status();
  EXPECT_FALSE(UseCachingHostAllocator(MapEnvironment({{"HVX_HOST_ALLOCATOR", "perhaps"}})).ok());
  // Booleans are booleans: "off" and "no" turn it off like "0" (they used to leave it on).
  for (const char* off : {"0", "off", "no", "false"}) {
    auto kept = UseCachingHostAllocator(MapEnvironment({{"HVX_HOST_ALLOCATOR", off}}));
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_TRUE(absl::StrContains(*kept, "LibTorch's allocator")) << off << ": " << *kept;
  }
  EXPECT_EQ(InstalledHostAllocator(), nullptr);

  auto line = UseCachingHostAllocator(MapEnvironment({{"MPI_LOCALNRANKS", "2"}}));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, " GiB over 2 local processes, at most 4 GiB)")) << *line;
  auto again = UseCachingHostAllocator(MapEnvironment({{"HVX_HOST_CACHE_MAX_BYTES", "4GiB"}}));
  ASSERT_TRUE(again.ok()) << again.status();  // a byte knob like the others
  EXPECT_EQ(*again, *line) << "a second call reports what is installed";
  const CachingHostAllocator* a = InstalledHostAllocator();
  ASSERT_NE(a, nullptr);
  const int64_t maps = a->stats().maps, hits = a->stats().hits;
  void* first;
  {
    at::Tensor t = torch::ones({500, 32, 28, 28});  // one Fashion-MNIST evaluation activation
    first = t.data_ptr();
    EXPECT_EQ(t.sum().item<double>(), 500.0 * 32 * 28 * 28);
  }
  at::Tensor u = torch::full({500, 32, 28, 28}, 2.0f);
  EXPECT_EQ(u.data_ptr(), first);
  EXPECT_EQ(u.sum().item<double>(), 2.0 * 500 * 32 * 28 * 28);
  EXPECT_EQ(a->stats().maps, maps + 1);
  EXPECT_EQ(a->stats().hits, hits + 1);
  at::Tensor small = torch::arange(10);
  EXPECT_EQ(small.sum().item<int64_t>(), 45);
}

}  // namespace
}  // namespace hvx
