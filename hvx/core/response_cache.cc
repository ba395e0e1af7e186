#include "hvx/core/response_cache.h"

#include <algorithm>

#include "hvx/common/logging.h"

namespace hvx {

bool RequestMatchesResponse(const Request& request, const Response& response) {
  return request.type == OpType::kAllreduce && response.type == OpType::kAllreduce &&
         response.names.size() == 1 && request.dtype == response.dtype &&
         request.device.type == response.device_type && request.reduce_op == response.reduce_op &&
         request.prescale == response.prescale && request.postscale == response.postscale &&
         response.shapes.size() == 1 && request.shape == response.shapes[0];
}

ResponseCache::ResponseCache(int64_t capacity)
    : capacity_(std::max<int64_t>(capacity, 0)), entries_(capacity_), used_(capacity_, false) {}

ResponseCache::Lookup ResponseCache::Find(const Request& request, int* bit) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return Lookup::kMiss;
  *bit = it->second;
  return RequestMatchesResponse(request, entries_[it->second].response) ? Lookup::kHit
                                                                        : Lookup::kInvalid;
}

bool ResponseCache::Put(const Response& response) {
  if (capacity_ == 0 || response.type != OpType::kAllreduce || response.names.size() != 1)
    return false;
  const std::string& name = response.names[0];
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    Entry& e = entries_[it->second];
    e.response = response;
    lru_.splice(lru_.begin(), lru_, e.lru);
    return false;
  }
  bool evicted = false;
  if (static_cast<int64_t>(by_name_.size()) == capacity_) {
    Erase(lru_.back());
    evicted = true;
  }
  const int bit = static_cast<int>(std::find(used_.begin(), used_.end(), false) - used_.begin());
  used_[bit] = true;
  lru_.push_front(bit);
  entries_[bit] = Entry{response, lru_.begin()};
  by_name_[name] = bit;
  return evicted;
}

const Response& ResponseCache::Get(int bit) const { return entries_[bit].response; }

bool ResponseCache::InUse(int bit) const { return bit >= 0 && bit < capacity_ && used_[bit]; }

void ResponseCache::Erase(int bit) {
  if (!InUse(bit)) return;
  Entry& e = entries_[bit];
  by_name_.erase(e.response.names[0]);
  lru_.erase(e.lru);
  e = Entry{};
  used_[bit] = false;
}

}  // namespace hvx
