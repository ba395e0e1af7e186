// Copies of large host buffers, tuned for the data planes' pattern: a tensor (malloc'd, 16 bytes
// into its page) against page-aligned shared memory.
//
//   CopyBytes(slot, tensor.data(), bytes);       // into a shared-memory chunk a peer reads soon
//   StreamBytes(out, finished_chunk, bytes);     // into the output, not read again by this core
#ifndef HVX_COMMON_COPY_H_
#define HVX_COMMON_COPY_H_

#include <cstddef>

namespace hvx {

// memcpy for large host buffers, in pieces below glibc's `rep movsb` threshold: that path runs 3-4x
// slower on AMD Zen when the destination lies a few bytes past the source modulo 4 KiB, which is
// where a malloc'd tensor (16 bytes into its page) lands against page-aligned shared memory.
void CopyBytes(void* dst, const void* src, size_t n);

// CopyBytes with non-temporal stores (x86-64; elsewhere CopyBytes), for large copies whose
// destination this core will not read soon: the stores skip the read of each destination line
// that an ordinary store makes, a third of the memory traffic of a copy. Ends with a store fence,
// so a later release store (a flag telling another process the data is there) is ordered after.
void StreamBytes(void* dst, const void* src, size_t n);

// StreamBytes into dst and, unless `also` is null, into `also` too, reading src once.
void StreamBytes(void* dst, void* also, const void* src, size_t n);

}  // namespace hvx

#endif  // HVX_COMMON_COPY_H_
