// Memory for training processes: process-wide heap settings, huge-page and page-aligned blocks.
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

// Page-aligned heap blocks for buffers a thread allocates and frees over and over, such as the
// read buffer of one RecordReader per file in a pass over many files:
//
//   size_t capacity;
//   char* buffer = hvx::AllocatePages(256 << 10, &capacity);  // capacity: 2 MiB, huge pages
//   ...
//   hvx::ReleasePages(buffer, capacity);  // kept for this thread's next AllocatePages
//
// From 256 KiB (an eighth of a huge page) on, a block is whole huge pages (AllocateHugePages): a
// fresh 4 KiB page costs a fault each, a huge page one fault. A fresh huge page still costs a fault
// and 2 MiB of zeroing, so each thread keeps the largest block of one or two huge pages it
// released, and its next AllocatePages that fits takes that block instead of new memory (a thread
// holds at most 4 MiB this way).
inline constexpr size_t kPageBytes = 4096;
inline size_t RoundUpToPages(size_t bytes) {
  return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

// A block of at least `bytes`, aligned to kPageBytes (to kHugePageBytes from kHugePageBytes / 8
// on); *capacity is its usable size, `bytes` rounded up to whole pages or huge pages, or this
// thread's kept block's larger size. Set also when the allocation fails, which returns nullptr.
// Free with ReleasePages (or std::free, which keeps nothing for later).
char* AllocatePages(size_t bytes, size_t* capacity);

// Frees `block` (from AllocatePages, nullptr allowed), or keeps it for this thread's next
// AllocatePages when it is one or two huge pages and larger than the block kept so far.
void ReleasePages(char* block, size_t capacity);

// Heap memory of RoundUpToHugePages(bytes) bytes starting on a 2 MiB boundary, with transparent
// huge pages requested (MADV_HUGEPAGE, a hint). Free with std::free. nullptr when out of memory.
void* AllocateHugePages(size_t bytes);

enum class FaultScope { kThisThread, kThisProcess };

// Minor page faults so far (getrusage): the cost that dominates large fresh buffers, counted around
// a step by benchmarks and tests.
long MinorPageFaults(FaultScope scope);

}  // namespace hvx

#endif  // HVX_COMMON_MEMORY_H_
