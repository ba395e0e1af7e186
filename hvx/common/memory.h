// Process-wide heap settings for training processes.
//
//   // First thing in main(), before the framework allocates:
//   HVX_ASSIGN_OR_RETURN(std::string line,
//   hvx::RetainFreedHeapMemory(hvx::Environment::Process()));
//
// Why: the first touch of every fresh page is a page fault, expensive in a virtual machine. A
// training step allocates its activations and gradients and frees them again, and glibc's default
// policy hands freed memory at the top of the main heap back to the kernel (trim) and serves blocks
// over its adaptive threshold with a fresh mmap, so every step paid those faults again (LibTorch's
// CPU training ran at about half speed). Keeping freed memory in the process (it is reused by the
// next step) removes that; the cost is that the heap does not shrink after a peak.
#ifndef HVX_COMMON_MEMORY_H_
#define HVX_COMMON_MEMORY_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "hvx/common/env.h"

namespace hvx {

// Sets glibc's trim threshold to 1 GiB and its mmap threshold to its maximum (32 MiB on 64-bit
// Linux), so blocks up to 32 MiB come from the heap and freed memory stays there for reuse. Does
// nothing when GLIBC_TUNABLES names a glibc.malloc setting (the user's choice wins) or when
// HVX_RETAIN_FREED_MEMORY=0 (a boolean knob: 1/0, true/false, yes/no, on/off). Returns one line
// saying what it did, for the log, or InvalidArgument for a value that is not a boolean.
absl::StatusOr<std::string> RetainFreedHeapMemory(const Environment& env);

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Maps `bytes` (rounded up to a multiple of 2 MiB) of fresh anonymous memory starting on a 2 MiB
// boundary, with transparent huge pages requested (MADV_HUGEPAGE, a hint), so the kernel can back
// it with huge pages: one fault per 2 MiB instead of one per 4 KiB. Returns nullptr with errno set
// on failure. Release with munmap(p, RoundUpToHugePages(bytes)).
char* MapHugePages(size_t bytes);
inline size_t RoundUpToHugePages(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

enum class FaultScope { kThisThread, kThisProcess };

// Minor page faults so far (getrusage): the cost that dominates large fresh buffers, counted around
// a step by benchmarks and tests.
long MinorPageFaults(FaultScope scope);

}  // namespace hvx

#endif  // HVX_COMMON_MEMORY_H_
