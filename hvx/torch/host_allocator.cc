#include "hvx/torch/host_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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
  Header* older;  // neighbours in the freed order while cached
  Header* newer;
};

namespace {

// Every live allocator, for the fork handlers: a fork() while another thread holds an allocator's
// mutex (the engine thread allocating an allgather's output as a DataLoader forks its workers)
// left the child with the mutex locked forever, and its first allocation of 1 MiB hung. Before a
// fork the forking thread takes every allocator's mutex, and releases them in both processes
// after it: the child's only thread is the one that took them.
std::mutex& RegistryMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
std::vector<std::mutex*>& Registry() {
  static std::vector<std::mutex*>* all = new std::vector<std::mutex*>();
  return *all;
}
void LockAllForFork() {
  RegistryMutex().lock();
  for (std::mutex* mu : Registry()) mu->lock();
}
void UnlockAllAfterFork() {
  for (auto it = Registry().rbegin(); it != Registry().rend(); ++it) (*it)->unlock();
  RegistryMutex().unlock();
}

}  // namespace

CachingHostAllocator::CachingHostAllocator(HostAllocatorOptions options) : options_(options) {
  static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit its room before the data");
  static const int installed =
      pthread_atfork(&LockAllForFork, &UnlockAllAfterFork, &UnlockAllAfterFork);
  (void)installed;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().push_back(&mu_);
}

CachingHostAllocator::~CachingHostAllocator() {
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    std::vector<std::mutex*>& all = Registry();
    all.erase(std::find(all.begin(), all.end(), &mu_));
  }
  for (auto& [capacity, blocks] : free_) {
    for (Header* h : blocks) munmap(h, capacity);
  }
}

c10::DataPtr CachingHostAllocator::Allocate(size_t n) const {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n + kHeaderBytes < options_.min_cached_bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, kHeaderBytes, n + kHeaderBytes) != 0) throw std::bad_alloc();
    new (p) Header{this, n + kHeaderBytes, kMagicHeap, nullptr, nullptr};
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
      Unlink(h);
      stats_.hits++;
      stats_.cached_bytes -= capacity;
      stats_.live_bytes += capacity;
      char* data = reinterpret_cast<char*>(h) + kHeaderBytes;
      return c10::DataPtr(data, data, &Free, cpu);
    }
  }
  char* aligned = MapHugePages(capacity);
  if (aligned == nullptr) throw std::bad_alloc();
  new (aligned) Header{this, capacity, kMagicMap, nullptr, nullptr};
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

void CachingHostAllocator::LinkNewest(Header* h) const {
  h->older = newest_;
  h->newer = nullptr;
  (newest_ != nullptr ? newest_->newer : oldest_) = h;
  newest_ = h;
}

void CachingHostAllocator::Unlink(Header* h) const {
  (h->older != nullptr ? h->older->newer : oldest_) = h->newer;
  (h->newer != nullptr ? h->newer->older : newest_) = h->older;
  h->older = h->newer = nullptr;
}

void CachingHostAllocator::Release(Header* h) const {
  const size_t capacity = h->capacity;
  std::vector<Header*> unmap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.live_bytes -= capacity;
    if (capacity > options_.max_cached_bytes) {
      unmap.push_back(h);
    } else {
      // Make room by dropping the blocks freed longest ago.
      while (static_cast<size_t>(stats_.cached_bytes) + capacity > options_.max_cached_bytes) {
        Header* victim = oldest_;
        Unlink(victim);
        std::vector<Header*>& same = free_[victim->capacity];
        same.erase(std::find(same.begin(), same.end(), victim));
        stats_.cached_bytes -= victim->capacity;
        stats_.evictions++;
        unmap.push_back(victim);
      }
      free_[capacity].push_back(h);
      LinkNewest(h);
      stats_.cached_bytes += capacity;
    }
    stats_.unmaps += static_cast<int64_t>(unmap.size());
  }
  for (Header* u : unmap) munmap(u, u->capacity);
}

HostAllocatorStats CachingHostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t DefaultHostCacheBytes(uint64_t physical_bytes, int local_processes) {
  const uint64_t share = physical_bytes / 4 / static_cast<uint64_t>(std::max(local_processes, 1));
  return static_cast<size_t>(std::clamp<uint64_t>(share, uint64_t{64} << 20, uint64_t{4} << 30));
}

namespace {
const CachingHostAllocator* g_installed = nullptr;
std::string* const g_installed_line = new std::string;
std::once_flag g_install_once;
}  // namespace

absl::StatusOr<std::string> UseCachingHostAllocator(const Environment& env) {
  bool enabled = true;
  int64_t max_bytes = -1;
  KnobReader knobs(env);
  knobs.Read("HVX_HOST_ALLOCATOR", &enabled);
  knobs.ReadBytes("HVX_HOST_CACHE_MAX_BYTES", &max_bytes);
  if (!knobs.status().ok()) return knobs.status();
  if (!enabled) return std::string("host tensors: LibTorch's allocator (HVX_HOST_ALLOCATOR=0)");
  HostAllocatorOptions options;
  std::string why;
  if (max_bytes >= 0) {
    options.max_cached_bytes = static_cast<uint64_t>(max_bytes);
    why = "HVX_HOST_CACHE_MAX_BYTES";
  } else {
    int local = 1;
    for (const char* var : {"HVX_LOCAL_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
      int n = 0;
      if (auto v = env.GetNonEmpty(var); v && absl::SimpleAtoi(*v, &n) && n > 0) {
        local = n;
        break;
      }
    }
    const uint64_t physical = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                              static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    options.max_cached_bytes = DefaultHostCacheBytes(physical, local);
    why = absl::StrCat("a quarter of ", physical >> 30, " GiB over ", local, " local process",
                       local == 1 ? "" : "es", ", at most 4 GiB");
  }
  std::call_once(g_install_once, [&] {
    // Never destroyed: tensors may outlive main().
    auto* allocator = new CachingHostAllocator(options);
    c10::SetCPUAllocator(allocator, /*priority=*/1);
    g_installed = allocator;
    *g_installed_line =
        absl::StrCat("host tensors: blocks of 1 MiB and more cached for reuse (up to ",
                     options.max_cached_bytes >> 20, " MiB: ", why, ")");
  });
  // Later calls change nothing: they report what the first one installed.
  return *g_installed_line;
}

absl::StatusOr<std::string> KeepHostMemoryForReuse(const Environment& env) {
  HVX_ASSIGN_OR_RETURN(const std::string heap, RetainFreedHeapMemory(env));
  HVX_ASSIGN_OR_RETURN(const std::string tensors, UseCachingHostAllocator(env));
  return absl::StrCat(heap, "; ", tensors);
}

const CachingHostAllocator* InstalledHostAllocator() { return g_installed; }

}  // namespace hvx
