#include "hvx/common/memory.h"

#include <malloc.h>
#include <sys/resource.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace hvx {

std::string RetainFreedHeapMemory(const Environment& env) {
  if (env.Get("HVX_RETAIN_FREED_MEMORY").value_or("1") == "0") {
    return "heap: glibc defaults (HVX_RETAIN_FREED_MEMORY=0)";
  }
  const std::string tunables = env.Get("GLIBC_TUNABLES").value_or("");
  if (absl::StrContains(tunables, "glibc.malloc.")) {
    return absl::StrCat("heap: as GLIBC_TUNABLES sets it (", tunables, ")");
  }
  constexpr int kTrim = 1 << 30;
  constexpr int kMmap = 32 << 20;
  // mallopt returns 1 on success; a glibc that rejects a value keeps its default for it.
  const bool trim = mallopt(M_TRIM_THRESHOLD, kTrim) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kMmap) == 1;
  if (!trim || !mmap) return "heap: glibc defaults (this allocator does not take mallopt settings)";
  return "heap: freed memory kept for reuse (trim threshold 1 GiB, blocks up to 32 MiB from the heap)";
}

long MinorPageFaults(FaultScope scope) {
  rusage u;
  getrusage(scope == FaultScope::kThisThread ? RUSAGE_THREAD : RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace hvx
