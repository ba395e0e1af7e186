#include "hvx/common/memory.h"

#include <cstdlib>
#include <cstring>
#include <vector>

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
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
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

}  // namespace
}  // namespace hvx
