// Process-wide bookkeeping of NCCL communicators, keyed by who is in them (global ranks) and the
// GPU they run on. A communicator is created by a collective among exactly its members, so each
// member holds the same entries: a lookup hits or misses alike on every member, and two process
// sets with the same members (or a host's ranks shared by several sets) reuse one communicator.
// Generic over the handle type so the bookkeeping is tested without NCCL.
//
//   CommunicatorCache<ncclComm_t> cache([](ncclComm_t c) { ncclCommDestroy(c); });
//   HVX_ASSIGN_OR_RETURN(ncclComm_t* comm, cache.GetOrCreate({{0, 1}, /*device=*/0}, create));
#ifndef HVX_NCCL_COMM_CACHE_H_
#define HVX_NCCL_COMM_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hvx {
namespace nccl {

struct CommKey {
  std::vector<int> global_ranks;  // ascending
  int device = 0;

  friend bool operator<(const CommKey& a, const CommKey& b) {
    return std::tie(a.device, a.global_ranks) < std::tie(b.device, b.global_ranks);
  }
  friend bool operator==(const CommKey& a, const CommKey& b) {
    return a.device == b.device && a.global_ranks == b.global_ranks;
  }
  // "cuda:0 ranks {0,1,2}"
  std::string DebugString() const {
    return absl::StrCat("cuda:", device, " ranks {", absl::StrJoin(global_ranks, ","), "}");
  }
};

template <typename Comm>
class CommunicatorCache {
 public:
  using Destroyer = std::function<void(Comm)>;
  using Creator = std::function<absl::StatusOr<Comm>()>;

  // `destroy` releases a communicator: at Erase, and at destruction for those left, newest first.
  explicit CommunicatorCache(Destroyer destroy) : destroy_(std::move(destroy)) {}
  ~CommunicatorCache() { Clear(); }
  CommunicatorCache(const CommunicatorCache&) = delete;
  CommunicatorCache& operator=(const CommunicatorCache&) = delete;

  // The communicator for `key`, made by `create` when absent. A failed creation caches nothing and
  // returns create's status. The pointer stays valid until that key is erased or the cache dies.
  absl::StatusOr<Comm*> GetOrCreate(const CommKey& key, const Creator& create) {
    if (Comm* found = Find(key)) {
      ++hits_;
      return found;
    }
    absl::StatusOr<Comm> made = create();
    if (!made.ok()) return made.status();
    auto it = entries_.emplace(key, Entry{std::move(*made), next_serial_++}).first;
    return &it->second.comm;
  }

  // nullptr when absent.
  Comm* Find(const CommKey& key) {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second.comm;
  }
  bool Contains(const CommKey& key) const { return entries_.count(key) > 0; }

  // Releases one communicator (after an error left it unusable). False when absent.
  bool Erase(const CommKey& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    Comm comm = std::move(it->second.comm);
    entries_.erase(it);
    destroy_(std::move(comm));
    return true;
  }

  // Releases every communicator, newest first (a later one may depend on an earlier, e.g. a split).
  void Clear() {
    while (!entries_.empty()) {
      auto newest = entries_.begin();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->second.serial > newest->second.serial) newest = it;
      }
      Erase(CommKey(newest->first));
    }
  }

  size_t size() const { return entries_.size(); }
  // Creations so far (erased ones included) and lookups answered from the cache.
  int64_t creations() const { return next_serial_; }
  int64_t hits() const { return hits_; }
  std::vector<CommKey> Keys() const {
    std::vector<CommKey> keys;
    for (const auto& e : entries_) keys.push_back(e.first);
    return keys;
  }

 private:
  struct Entry {
    Comm comm;
    int64_t serial;
  };
  Destroyer destroy_;
  std::map<CommKey, Entry> entries_;
  int64_t next_serial_ = 0;
  int64_t hits_ = 0;
};

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_COMM_CACHE_H_
