#include "hvx/torch/host_allocator.h"

#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hvx/common/memory.h"

namespace hvx {
namespace {

TEST(CachingHostAllocatorTest, FreedBlockOfTheSameSizeIsReusedWithoutPageFaults) {
  CachingHostAllocator a({});
  // Over glibc's largest heap block (32 MiB); this and kBytes - 1000 round to the same 50 MiB block.
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

TEST(CachingHostAllocatorTest, InstalledItServesTorchTensors) {
  MapEnvironment bad({{"HVX_HOST_CACHE_MAX_BYTES", "lots"}});
  auto refused = UseCachingHostAllocator(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "HVX_HOST_CACHE_MAX_BYTES=lots"));
  EXPECT_EQ(InstalledHostAllocator(), nullptr);

  auto line = UseCachingHostAllocator(MapEnvironment({}));
  ASSERT_TRUE(line.ok()) << line.status();
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
