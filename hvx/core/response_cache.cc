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

namespace {

// The set bits of `words`, ascending.
std::vector<int> SetBits(const uint64_t* words, size_t n) {
  std::vector<int> bits;
  for (size_t w = 0; w < n; ++w) {
    for (uint64_t v = words[w]; v != 0; v &= v - 1) {
      bits.push_back(static_cast<int>(w * 64) + __builtin_ctzll(v));
    }
  }
  return bits;
}

}  // namespace

CacheVote::CacheVote(int64_t capacity)
    : section_words_(static_cast<size_t>(std::max<int64_t>(capacity, 0) + 63) / 64),
      words_(2 * section_words_ + 1, 0) {
  std::fill(words_.begin() + section_words_, words_.end(), ~uint64_t{0});
}

void CacheVote::Ready(int bit) { words_[bit / 64] |= uint64_t{1} << (bit % 64); }

void CacheVote::Invalidate(int bit) {
  words_[section_words_ + bit / 64] &= ~(uint64_t{1} << (bit % 64));
}

void CacheVote::Raise(Flag flag) { words_[2 * section_words_] &= ~static_cast<uint64_t>(flag); }

bool CacheVote::AnyRank(Flag flag) const {
  return (~words_[2 * section_words_] & static_cast<uint64_t>(flag)) != 0;
}

std::vector<int> CacheVote::Invalidated() const {
  std::vector<uint64_t> invalid(section_words_);
  for (size_t w = 0; w < section_words_; ++w) invalid[w] = ~words_[section_words_ + w];
  return SetBits(invalid.data(), invalid.size());
}

std::vector<int> CacheVote::ReadyOnEveryRank() const {
  std::vector<uint64_t> ready(section_words_);
  for (size_t w = 0; w < section_words_; ++w) ready[w] = words_[w] & words_[section_words_ + w];
  return SetBits(ready.data(), ready.size());
}

}  // namespace hvx
