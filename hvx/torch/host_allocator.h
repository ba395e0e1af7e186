// A caching allocator for LibTorch's CPU tensors: blocks of 1 MiB and more are kept when a tensor
// is freed and handed to the next tensor of the same rounded size, instead of going back to the
// kernel.
//
//   hvx::UseCachingHostAllocator(hvx::Environment::Process());  // before the model is built
//   at::Tensor t = torch::empty({64, 512, 28, 28});               // served from the cache
//
// Why: the first touch of every fresh page is a page fault, expensive in a virtual machine, and
// glibc serves every allocation over 32 MiB with a fresh mmap and unmaps it on free. A training or
// evaluation step allocates the same activation sizes every time (an evaluation batch of 500
// Fashion-MNIST images has 50 MiB activations; a ResNet-50 batch of 64, 200 MiB ones), so each step
// paid those faults again. New blocks are mapped with transparent huge pages requested, so even
// the first step faults per 2 MiB, not per 4 KiB. Smaller blocks go to the heap (see
// hvx/common/memory.h for keeping those).
#ifndef HVX_TORCH_HOST_ALLOCATOR_H_
#define HVX_TORCH_HOST_ALLOCATOR_H_

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hvx/common/env.h"
#include "hvx/torch/version.h"

namespace hvx {

struct HostAllocatorOptions {
  // Allocations from this size up are mapped and cached; smaller ones use the heap.
  size_t min_cached_bytes = size_t{1} << 20;
  // Bytes of freed blocks kept at most. A freed block that would exceed it makes room by
  // unmapping the blocks freed longest ago (of any size): sizes a program stopped using (say, an
  // evaluation batch's) give way to the ones it uses now.
  size_t max_cached_bytes = size_t{4} << 30;
};

// The default bound: a quarter of physical memory shared by the processes on the host, at most
// 4 GiB and at least 64 MiB.
size_t DefaultHostCacheBytes(uint64_t physical_bytes, int local_processes);

struct HostAllocatorStats {
  int64_t hits = 0;          // allocations served by a cached block
  int64_t maps = 0;          // allocations that mapped a new block
  int64_t unmaps = 0;        // freed blocks returned to the kernel (cache full)
  int64_t evictions = 0;     // of those, cached blocks unmapped to make room for a newer one
  int64_t cached_bytes = 0;  // bytes in freed blocks kept for reuse
  int64_t live_bytes = 0;    // bytes in mapped blocks that tensors hold now
};

class CachingHostAllocator final : public c10::Allocator {
 public:
  explicit CachingHostAllocator(HostAllocatorOptions options);
  // Blocks still held by tensors keep a pointer to their allocator: destroy one only after them.
  ~CachingHostAllocator() override;

  // LibTorch 2.3 made allocate() non-const and added copy_data().
#if HVX_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t n) override { return Allocate(n); }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return Allocate(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override;
  HostAllocatorStats stats() const;

 private:
  struct Header;
  c10::DataPtr Allocate(size_t n) const;
  static void Free(void* data);
  void Release(Header* header) const;
  // Least recently freed order of the cached blocks; mu_ held.
  void LinkNewest(Header* h) const;
  void Unlink(Header* h) const;

  const HostAllocatorOptions options_;
  mutable std::mutex mu_;
  // Freed mapped blocks by capacity (a multiple of 2 MiB), most recently freed last.
  mutable std::map<size_t, std::vector<Header*>> free_;
  // The same blocks in the order they were freed, through their headers.
  mutable Header* oldest_ = nullptr;
  mutable Header* newest_ = nullptr;
  mutable HostAllocatorStats stats_;
};

// Installs one process-wide CachingHostAllocator as LibTorch's CPU allocator (first call only) and
// returns a line for the log. HVX_HOST_ALLOCATOR=0 leaves LibTorch's own allocator in place;
// HVX_HOST_CACHE_MAX_BYTES bounds the cache (InvalidArgument if not a byte count); by default
// DefaultHostCacheBytes of this machine's memory and the local process count the launcher set
// (HVX_LOCAL_SIZE, MPI_LOCALNRANKS or OMPI_COMM_WORLD_LOCAL_SIZE; 1 without one).
absl::StatusOr<std::string> UseCachingHostAllocator(const Environment& env);

// What a CPU training program calls first, before LibTorch allocates: RetainFreedHeapMemory
// (hvx/common/memory.h) for blocks under 1 MiB, then UseCachingHostAllocator. Returns one line
// for the log saying what each did.
absl::StatusOr<std::string> KeepHostMemoryForReuse(const Environment& env);

// The installed allocator, or nullptr.
const CachingHostAllocator* InstalledHostAllocator();

}  // namespace hvx

#endif  // HVX_TORCH_HOST_ALLOCATOR_H_
