#include "hvx/common/memory.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace hvx {

absl::StatusOr<std::string> RetainFreedHeapMemory(const Environment& env) {
  bool retain = true;
  KnobReader knobs(env);
  knobs.Read("HVX_RETAIN_FREED_MEMORY", &retain);
  if (!knobs.status().ok()) return knobs.status();
  if (!retain) return std::string("heap: glibc defaults (HVX_RETAIN_FREED_MEMORY=0)");
  const std::string tunables = env.Get("GLIBC_TUNABLES").value_or("");
  if (absl::StrContains(tunables, "glibc.malloc.")) {
    return absl::StrCat("heap: as GLIBC_TUNABLES sets it (", tunables, ")");
  }
  constexpr int kTrim = 1 << 30;
  constexpr int kMmap = 32 << 20;
  // mallopt returns 1 on success; a glibc that rejects a value keeps its default for it.
  const bool trim = mallopt(M_TRIM_THRESHOLD, kTrim) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kMmap) == 1;
  if (!trim || !mmap)
    return std::string("heap: glibc defaults (this allocator does not take mallopt settings)");
  return std::string(
      "heap: freed memory kept for reuse (trim threshold 1 GiB, blocks up to 32 MiB from the "
      "heap)");
}

char* MapHugePages(size_t bytes) {
  const size_t size = RoundUpToHugePages(bytes);
  // Map one huge page more than needed and trim both ends, so the block starts on a boundary.
  const size_t span = size + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(raw);
  char* aligned = reinterpret_cast<char*>(RoundUpToHugePages(reinterpret_cast<uintptr_t>(base)));
  if (aligned > base) munmap(base, aligned - base);
  char* end = aligned + size;
  if (base + span > end) munmap(end, base + span - end);
  madvise(aligned, size, MADV_HUGEPAGE);  // without THP (or in "never" mode) it does nothing
  return aligned;
}

namespace {

// The block a thread released last (the largest one of one or two huge pages), for its next
// AllocatePages.
struct SpareBlock {
  char* data = nullptr;
  size_t capacity = 0;
  // Blocks released after this thread's SpareBlock is gone (by objects destroyed later, such as
  // statics) are freed: no capacity is larger than SIZE_MAX.
  ~SpareBlock() {
    std::free(data);
    data = nullptr;
    capacity = SIZE_MAX;
  }
};
thread_local SpareBlock spare_block;
constexpr size_t kMaxSpareBytes = 2 * kHugePageBytes;

}  // namespace

void* AllocateHugePages(size_t bytes) {
  const size_t size = RoundUpToHugePages(bytes);
  void* p = std::aligned_alloc(kHugePageBytes, size);
  if (p != nullptr) madvise(p, size, MADV_HUGEPAGE);
  return p;
}

char* AllocatePages(size_t bytes, size_t* capacity) {
  if (bytes >= kHugePageBytes / 8) {
    *capacity = RoundUpToHugePages(bytes);
    if (spare_block.data != nullptr && spare_block.capacity >= *capacity) {
      *capacity = spare_block.capacity;
      spare_block.capacity = 0;
      return std::exchange(spare_block.data, nullptr);
    }
    return static_cast<char*>(AllocateHugePages(bytes));
  }
  *capacity = RoundUpToPages(bytes);
  void* p = nullptr;
  return posix_memalign(&p, kPageBytes, *capacity) == 0 ? static_cast<char*>(p) : nullptr;
}

void ReleasePages(char* block, size_t capacity) {
  if (block == nullptr) return;
  if (capacity >= kHugePageBytes && capacity <= kMaxSpareBytes && capacity > spare_block.capacity) {
    std::swap(block, spare_block.data);
    spare_block.capacity = capacity;
  }
  std::free(block);
}

long MinorPageFaults(FaultScope scope) {
  rusage u;
  getrusage(scope == FaultScope::kThisThread ? RUSAGE_THREAD : RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace hvx
