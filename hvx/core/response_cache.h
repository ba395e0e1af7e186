// The response cache: single-tensor allreduce responses that already went through negotiation,
// each on a fixed bit, so later steps agree on them with one bit-vector AND across ranks.
//
//   ResponseCache cache(1024);
//   int bit;
//   if (cache.Find(request, &bit) == ResponseCache::Lookup::kHit) { ...set bit in the vector... }
//
// Every rank holds an identical cache: entries are added, touched and evicted only while executing
// the (identical) response lists, in the same order. Bits are assigned lowest-free-first.
#ifndef HVX_CORE_RESPONSE_CACHE_H_
#define HVX_CORE_RESPONSE_CACHE_H_

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvx/core/message.h"

namespace hvx {

class ResponseCache {
 public:
  enum class Lookup { kMiss, kHit, kInvalid };

  explicit ResponseCache(int64_t capacity);
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  int64_t capacity() const { return capacity_; }
  size_t size() const { return by_name_.size(); }

  // kHit when `request` names a cached allreduce with the same dtype, shape, device, op and
  // scales (*bit is then its bit); kInvalid when the name is cached with other parameters (*bit
  // is the stale entry's bit); kMiss otherwise.
  Lookup Find(const Request& request, int* bit) const;

  // Records an executed single-tensor allreduce response (or marks it most recently used if it is
  // already there with the same parameters). Evicts the least recently used entry when full.
  // Returns true when an entry had to be evicted.
  bool Put(const Response& response);

  // The response on `bit`; the bit must be in use.
  const Response& Get(int bit) const;
  bool InUse(int bit) const;
  void Erase(int bit);

 private:
  struct Entry {
    Response response;
    std::list<int>::iterator lru;
  };
  int64_t capacity_;
  std::vector<Entry> entries_;  // by bit
  std::vector<bool> used_;
  std::unordered_map<std::string, int> by_name_;
  std::list<int> lru_;  // front = most recent
};

// One cycle's vote on the response cache, combined across the ranks of a set by a single bitwise
// AND of words(); then every rank reads the same outcome.
//
//   CacheVote vote(cache.capacity());
//   vote.Ready(bit);                                  // this rank's tensor on `bit` is ready
//   HVX_RETURN_IF_ERROR(comm->BitwiseAnd(vote.words()));
//   for (int bit : vote.ReadyOnEveryRank()) ...       // run these without negotiation
//
// words() is [ready bits | valid bits | flags, inverted]. A ready bit survives the AND only if
// every rank set it; a valid bit starts set and is clear after the AND if any rank invalidated it;
// the flag word is inverted so that the AND yields the OR of every rank's flags.
class CacheVote {
 public:
  // Conditions any rank may raise; each but kStatsDue sends the whole set to the coordinator this
  // cycle.
  enum Flag : uint64_t {
    kUncached = 1,  // a tensor that is not in the cache
    kJoined = 2,    // this rank has joined
    kShutdown = 4,  // this rank is shutting down
    kCheckDue = 8,  // the coordinator's stall warning or collective timeout is due
    // Not a reason to negotiate: this rank's straggler window ended, so every rank exchanges its
    // sample after this cycle (straggler.h).
    kStatsDue = 16,
  };

  explicit CacheVote(int64_t capacity);

  // Before the AND. `bit` must be in [0, capacity).
  void Ready(int bit);
  // The entry on `bit` must leave every rank's cache: stale here (another shape, dtype, op or
  // scale under its name) or stalled, so that the coordinator sees it.
  void Invalidate(int bit);
  void Raise(Flag flag);

  // The words to AND across the set, in place.
  std::vector<uint64_t>* words() { return &words_; }

  // After the AND: whether any rank raised `flag`; the bits some rank invalidated; the bits ready
  // on every rank and invalidated by none. Both lists ascend.
  bool AnyRank(Flag flag) const;
  std::vector<int> Invalidated() const;
  std::vector<int> ReadyOnEveryRank() const;

 private:
  size_t section_words_;         // words per section (ready, valid)
  std::vector<uint64_t> words_;  // 2 * section_words_ + 1
};

// Whether a request is exactly what a cached response describes.
bool RequestMatchesResponse(const Request& request, const Response& response);

}  // namespace hvx

#endif  // HVX_CORE_RESPONSE_CACHE_H_
