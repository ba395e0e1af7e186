#include "hvx/torch/host_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hvx/common/memory.h"
#include "hvx/common/status.h"

namespace hvx {
namespace {

// Room before the data for the header, keeping the data 64-byte aligned as LibTorch expects.
constexpr size_t kHeaderBytes = 64;
constexpr uint64_t kMagicHeap = 0x6876782d68656170;  // "hvx-heap"
constexpr uint64_t kMagicMap = 0x6876782d6d617070;   // "hvx-mapp"

}  // namespace

struct CachingHostAllocator::Header {
  const CachingHostAllocator* owner;
  size_t capacity;  // bytes of the whole block, header included
  uint64_t magic;
};

CachingHostAllocator::CachingHostAllocator(HostAllocatorOptions options) : options_(options) {
  static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit its room before the data");
}

CachingHostAllocator::~CachingHostAllocator() {
  for (auto& [capacity, blocks] : free_) {
    for (Header* h : blocks) munmap(h, capacity);
  }
}

c10::DataPtr CachingHostAllocator::allocate(size_t n) const {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n + kHeaderBytes < options_.min_cached_bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, kHeaderBytes, n + kHeaderBytes) != 0) throw std::bad_alloc();
    new (p) Header{this, n + kHeaderBytes, kMagicHeap};
    char* data = static_cast<char*>(p) + kHeaderBytes;
    return c10::DataPtr(data, data, &Free, cpu);
  }
  const size_t capacity = RoundUpToHugePages(n + kHeaderBytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(capacity);
    if (it != free_.end() && !it->second.empty()) {
      Header* h = it->second.back();
      it->second.pop_back();
      stats_.hits++;
      stats_.cached_bytes -= capacity;
      stats_.live_bytes += capacity;
      char* data = reinterpret_cast<char*>(h) + kHeaderBytes;
      return c10::DataPtr(data, data, &Free, cpu);
    }
  }
  char* aligned = MapHugePages(capacity);
  if (aligned == nullptr) throw std::bad_alloc();
  new (aligned) Header{this, capacity, kMagicMap};
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.maps++;
    stats_.live_bytes += capacity;
  }
  char* data = aligned + kHeaderBytes;
  return c10::DataPtr(data, data, &Free, cpu);
}

c10::DeleterFnPtr CachingHostAllocator::raw_deleter() const { return &Free; }

void CachingHostAllocator::Free(void* data) {
  if (data == nullptr) return;
  Header* h = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
  if (h->magic == kMagicHeap) {
    std::free(h);
    return;
  }
  h->owner->Release(h);
}

void CachingHostAllocator::Release(Header* h) const {
  const size_t capacity = h->capacity;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.live_bytes -= capacity;
    if (static_cast<size_t>(stats_.cached_bytes) + capacity <= options_.max_cached_bytes) {
      free_[capacity].push_back(h);
      stats_.cached_bytes += capacity;
      return;
    }
    stats_.unmaps++;
  }
  munmap(h, capacity);
}

HostAllocatorStats CachingHostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

namespace {
const CachingHostAllocator* g_installed = nullptr;
std::once_flag g_install_once;
}  // namespace

absl::StatusOr<std::string> UseCachingHostAllocator(const Environment& env) {
  if (env.Get("HVX_HOST_ALLOCATOR").value_or("1") == "0") {
    return "host tensors: LibTorch's allocator (HVX_HOST_ALLOCATOR=0)";
  }
  HostAllocatorOptions options;
  if (auto v = env.GetNonEmpty("HVX_HOST_CACHE_MAX_BYTES")) {
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(*v, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("HVX_HOST_CACHE_MAX_BYTES=", *v, " is not a byte count (e.g. 4294967296 for 4 GiB)"));
    }
    options.max_cached_bytes = bytes;
  }
  std::call_once(g_install_once, [&] {
    // Never destroyed: tensors may outlive main().
    auto* allocator = new CachingHostAllocator(options);
    c10::SetCPUAllocator(allocator, /*priority=*/1);
    g_installed = allocator;
  });
  return absl::StrCat("host tensors: blocks of 1 MiB and more cached for reuse (up to ", options.max_cached_bytes >> 20,
                      " MiB)");
}

absl::StatusOr<std::string> KeepHostMemoryForReuse(const Environment& env) {
  const std::string heap = RetainFreedHeapMemory(env);
  HVX_ASSIGN_OR_RETURN(const std::string tensors, UseCachingHostAllocator(env));
  return absl::StrCat(heap, "; ", tensors);
}

const CachingHostAllocator* InstalledHostAllocator() { return g_installed; }

}  // namespace hvx
