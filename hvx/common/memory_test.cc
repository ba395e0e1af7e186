#include "hvx/common/memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/base/config.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

// One training step's pattern on the main thread: activations of a few MiB allocated and written,
// then freed. Returns the page faults it took.
long OneStep() {
  const long before = MinorPageFaults(FaultScope::kThisThread);
  std::vector<void*> blocks;
  for (size_t mib : {6, 3, 12, 1, 6}) {
    void* p = std::malloc(mib << 20);
    std::memset(p, 1, mib << 20);
    blocks.push_back(p);
  }
  for (void* p : blocks) std::free(p);
  return MinorPageFaults(FaultScope::kThisThread) - before;
}

TEST(MemoryTest, LaterStepsReuseFreedMemoryWithoutPageFaults) {
#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || defined(ABSL_HAVE_THREAD_SANITIZER)  // gcc and clang
  GTEST_SKIP() << "sanitizer allocators do not take mallopt settings";
#endif
  // With glibc's defaults every step of this pattern faults in ~7000 pages (28 MiB) again.
  const std::string what = RetainFreedHeapMemory(MapEnvironment({})).value();
  EXPECT_TRUE(absl::StrContains(what, "kept for reuse")) << what;
  for (int warmup = 0; warmup < 3; ++warmup) OneStep();
  long faults = 0;
  for (int step = 0; step < 5; ++step) faults += OneStep();
  EXPECT_LT(faults, 5 * 100) << "steps after the first should reuse the heap's pages";
}

TEST(MemoryTest, UserSettingsWin) {
  EXPECT_TRUE(absl::StrContains(
      RetainFreedHeapMemory(MapEnvironment({{"GLIBC_TUNABLES", "glibc.malloc.hugetlb=1"}})).value(),
      "GLIBC_TUNABLES"));
  for (const char* off : {"0", "off", "false", "no"}) {
    EXPECT_TRUE(absl::StrContains(
        RetainFreedHeapMemory(MapEnvironment({{"HVX_RETAIN_FREED_MEMORY", off}})).value(),
        "glibc defaults"))
        << off;
  }
}

TEST(MemoryTest, ANonBooleanKnobIsAnError) {
  auto bad = RetainFreedHeapMemory(MapEnvironment({{"HVX_RETAIN_FREED_MEMORY", "sometimes"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "HVX_RETAIN_FREED_MEMORY='sometimes'"))
      << bad.status();
}

bool AlignedTo(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// Runs `body` on a new thread, which starts without a kept block.
template <typename Body>
void OnFreshThread(Body body) {
  std::thread(body).join();
}

TEST(MemoryTest, HugePagesAreWholeAlignedAndWritable) {
  for (size_t bytes : {size_t{1}, kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes}) {
    char* p = static_cast<char*>(AllocateHugePages(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(AlignedTo(p, kHugePageBytes)) << bytes;
    std::memset(p, 7, RoundUpToHugePages(bytes));
    std::free(p);
  }
  EXPECT_EQ(RoundUpToHugePages(kHugePageBytes + 1), 2 * kHugePageBytes);
}

TEST(MemoryTest, SmallBlocksArePageMultiplesAndLargeOnesHugePageMultiples) {
  OnFreshThread([] {
    struct Case {
      size_t bytes, capacity, alignment;
    } cases[] = {
        {0, 0, kPageBytes},
        {1, kPageBytes, kPageBytes},
        {kPageBytes + 1, 2 * kPageBytes, kPageBytes},
        {kHugePageBytes / 8 - 1, kHugePageBytes / 8, kPageBytes},
        {kHugePageBytes / 8, kHugePageBytes, kHugePageBytes},
        {5 * kHugePageBytes + 1, 6 * kHugePageBytes, kHugePageBytes},
    };
    for (const Case& c : cases) {
      size_t capacity = 0;
      char* p = AllocatePages(c.bytes, &capacity);
      EXPECT_EQ(capacity, c.capacity) << c.bytes;
      if (c.capacity == 0) {
        std::free(p);
        continue;
      }
      ASSERT_NE(p, nullptr) << c.bytes;
      EXPECT_TRUE(AlignedTo(p, c.alignment)) << c.bytes;
      std::memset(p, 1, capacity);
      std::free(p);  // keeps nothing: the next case starts without a kept block too
    }
    EXPECT_EQ(RoundUpToPages(kPageBytes), kPageBytes);
  });
}

TEST(MemoryTest, AThreadReusesTheLargestBlockOfUpToTwoHugePagesItReleased) {
  OnFreshThread([] {
    size_t one, two, six;
    char* a = AllocatePages(kHugePageBytes, &one);
    char* b = AllocatePages(2 * kHugePageBytes, &two);
    char* c = AllocatePages(6 * kHugePageBytes, &six);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_NE(c, nullptr);
    ReleasePages(a, one);
    ReleasePages(b, two);  // larger: replaces a
    ReleasePages(c, six);  // too large to keep: freed
    size_t capacity;
    char* reused = AllocatePages(kHugePageBytes / 8, &capacity);
    EXPECT_EQ(reused, b);
    EXPECT_EQ(capacity, 2 * kHugePageBytes);
    // Nothing is kept now: the next block is new memory of its own size.
    size_t fresh_capacity;
    char* fresh = AllocatePages(kHugePageBytes / 8, &fresh_capacity);
    EXPECT_NE(fresh, reused);
    EXPECT_EQ(fresh_capacity, kHugePageBytes);
    // A block smaller than asked for is not handed out.
    ReleasePages(fresh, fresh_capacity);
    char* bigger = AllocatePages(kHugePageBytes + 1, &capacity);
    EXPECT_NE(bigger, fresh);
    EXPECT_EQ(capacity, 2 * kHugePageBytes);
    std::free(bigger);
    std::free(reused);
    // Blocks under a huge page are never kept.
    char* small = AllocatePages(kPageBytes, &capacity);
    ReleasePages(small, capacity);
    char* next = AllocatePages(kHugePageBytes, &capacity);
    EXPECT_EQ(next, fresh);  // the block kept above, not the small one
    std::free(next);
  });
}

TEST(MemoryTest, AKeptBlockBelongsToTheThreadThatReleasedIt) {
  OnFreshThread([] {
    size_t capacity;
    char* kept = AllocatePages(kHugePageBytes, &capacity);
    ASSERT_NE(kept, nullptr);
    ReleasePages(kept, capacity);
    OnFreshThread([kept] {
      size_t other_capacity;
      char* other = AllocatePages(kHugePageBytes, &other_capacity);
      EXPECT_NE(other, kept);
      ReleasePages(other, other_capacity);  // freed when this thread ends
    });
    size_t again_capacity;
    EXPECT_EQ(AllocatePages(kHugePageBytes, &again_capacity), kept);
    std::free(kept);
  });
}

}  // namespace
}  // namespace hvx
