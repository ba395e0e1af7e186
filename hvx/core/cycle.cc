// The background thread's negotiation cycle for one process set: the cache vote (one bit-AND
// across ranks), and when any rank needs it the slow path (requests gathered at the set's rank 0,
// the coordinator's plan broadcast back), then the agreed responses run (execute.cc).
#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hvx/common/clock.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/engine.h"
#include "hvx/core/fusion.h"

namespace hvx {

bool Engine::RunCycle(SetState& set) {
  bool shutdown_local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!set.incoming.empty()) {
      Entry e = std::move(set.incoming.front());
      set.incoming.pop_front();
      set.order.push_back(e.request.name);
      if (set.id == 0) wait_clock_.Submitted(e.submitted);
      if (!e.request.device.is_cpu())
        set.own_device.emplace(e.request.device.type, e.request.device);
      std::string name = e.request.name;
      set.pending.emplace(std::move(name), std::move(e));
    }
    shutdown_local = shutdown_requested_;
  }
  const bool joined_here = set.id == 0 && joined_;
  if (set.id == 0 && window_start_ == absl::InfinitePast()) window_start_ = MonotonicNow();
  std::vector<Response> cached;
  bool slow = true;
  bool any_joined = joined_here;
  bool stats_due = false;
  if (set.cache->capacity() > 0) {
    absl::StatusOr<CacheOutcome> outcome = VoteOnCache(set, joined_here, shutdown_local);
    if (!outcome.ok()) {
      return Stop(Annotate(outcome.status(), absl::StrCat("negotiation on process set ", set.id)));
    }
    cached = std::move(outcome->ready);
    slow = outcome->negotiate;
    any_joined = outcome->any_joined;
    stats_due = outcome->stats_due;
  }

  ResponseList slow_list;
  if (slow) {
    std::vector<std::string> to_send;
    for (const std::string& name : set.order) {
      Entry& e = set.pending.at(name);
      if (e.sent) continue;
      int bit;
      if (!any_joined && set.cache->capacity() > 0 &&
          set.cache->Find(e.request, &bit) == ResponseCache::Lookup::kHit) {
        continue;  // agreed through the bit vector once every rank has it
      }
      e.sent = true;
      to_send.push_back(name);
    }
    auto list = GatherPlanBroadcast(set, to_send, joined_here);
    if (!list.ok())
      return Stop(Annotate(list.status(), absl::StrCat("negotiation on process set ", set.id)));
    slow_list = std::move(*list);
  }

  for (const Response& r : FuseResponses(std::move(cached), options_.fusion_threshold_bytes)) {
    if (absl::Status s = Execute(set, r); !s.ok()) return Stop(s);
  }
  for (const Response& r : slow_list.responses) {
    if (absl::Status s = Execute(set, r); !s.ok()) return Stop(s);
  }
  if (set.id == 0) {
    if (set.pending.empty()) wait_clock_.Drained(MonotonicNow());
    if (stats_due || slow_list.stats_due) {
      if (absl::Status s = ExchangeWaits(set); !s.ok()) {
        return Stop(Annotate(s, "exchanging straggler samples"));
      }
    }
  }
  if (slow_list.shutdown) return false;
  return true;
}

bool Engine::StragglerWindowDue(absl::Time now) const {
  return options_.straggler_check_s > 0 && topology_.size > 1 && wait_clock_.active() &&
         now - window_start_ >= absl::Seconds(options_.straggler_check_s);
}

absl::Status Engine::ExchangeWaits(SetState& set) {
  const absl::Time now = MonotonicNow();
  WaitSample mine = wait_clock_.TakeWindow(now);
  mine.window_s = absl::ToDoubleSeconds(now - window_start_);
  window_start_ = now;
  std::vector<std::string> all;
  HVX_RETURN_IF_ERROR(set.comm->Allgather(EncodeWaitSample(mine), &all));
  std::vector<WaitSample> samples;
  for (size_t r = 0; r < all.size(); ++r) {
    absl::StatusOr<WaitSample> sample = DecodeWaitSample(all[r]);
    if (!sample.ok()) return Annotate(sample.status(), absl::StrCat("from rank ", r));
    samples.push_back(*sample);
  }
  if (straggler_ == nullptr) {
    std::vector<std::string> who;
    std::map<std::string, int> on_host;
    for (size_t r = 0; r < hosts_.size(); ++r) {
      who.push_back(absl::StrCat("rank ", r, " (host ", hosts_[r], ", local rank ",
                                 on_host[hosts_[r]]++, ")"));
    }
    straggler_ = std::make_unique<StragglerDetector>(StragglerOptions{}, std::move(who));
  }
  const std::string warning = straggler_->Add(samples, samples.empty() ? 0 : samples[0].window_s);
  if (!warning.empty() && set.rank() == 0) HVX_LOG(WARNING) << warning;
  std::lock_guard<std::mutex> lock(mu_);
  stragglers_ = straggler_->status();
  return absl::OkStatus();
}

StragglerStatus Engine::Stragglers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stragglers_;
}

absl::StatusOr<Engine::CacheOutcome> Engine::VoteOnCache(SetState& set, bool joined_here,
                                                         bool shutdown_here) {
  ResponseCache& cache = *set.cache;
  CacheVote vote(cache.capacity());
  const absl::Time now = MonotonicNow();
  absl::Duration stalled_after = absl::InfiniteDuration();
  for (double s : {options_.stall_check_time_s, options_.collective_timeout_s}) {
    if (s > 0) stalled_after = std::min(stalled_after, absl::Seconds(s));
  }
  for (const std::string& name : set.order) {
    const Entry& e = set.pending.at(name);
    if (e.sent) continue;
    int bit = -1;
    ResponseCache::Lookup lookup = cache.Find(e.request, &bit);
    // A tensor on another device than this rank's own must reach the coordinator, which fails it
    // on every rank: invalidate its entry so that every rank sends it.
    if (lookup == ResponseCache::Lookup::kHit && !OnOwnDevice(set, e.request))
      lookup = ResponseCache::Lookup::kInvalid;
    // A stalled tensor leaves the cache so that the coordinator's stall inspector and collective
    // timeout see it.
    const bool stalled = now - e.submitted > stalled_after;
    if (lookup == ResponseCache::Lookup::kHit && !stalled) {
      vote.Ready(bit);
    } else if (lookup != ResponseCache::Lookup::kMiss) {
      vote.Invalidate(bit);
    } else {
      vote.Raise(CacheVote::kUncached);
    }
  }
  if (joined_here) vote.Raise(CacheVote::kJoined);
  if (shutdown_here && set.id == 0) vote.Raise(CacheVote::kShutdown);
  // Tensors the coordinator holds for absent ranks reach their stall warning or timeout even
  // when no rank has anything new to negotiate.
  if (set.coordinator != nullptr && set.coordinator->CheckDue(now))
    vote.Raise(CacheVote::kCheckDue);
  if (set.id == 0 && StragglerWindowDue(now)) vote.Raise(CacheVote::kStatsDue);
  HVX_RETURN_IF_ERROR(Vote(set, vote.words()));

  CacheOutcome outcome;
  outcome.any_joined = vote.AnyRank(CacheVote::kJoined);
  outcome.stats_due = vote.AnyRank(CacheVote::kStatsDue);
  const std::vector<int> invalidated = vote.Invalidated();
  for (int bit : invalidated) cache.Erase(bit);
  // While a rank has joined, every tensor goes through the coordinator, which stands in for it.
  if (!outcome.any_joined) {
    for (int bit : vote.ReadyOnEveryRank()) {
      if (!cache.InUse(bit)) continue;
      outcome.ready.push_back(cache.Get(bit));
      set.pending.at(outcome.ready.back().names[0]).sent = true;
    }
  }
  outcome.negotiate = !invalidated.empty() || vote.AnyRank(CacheVote::kUncached) ||
                      outcome.any_joined || vote.AnyRank(CacheVote::kShutdown) ||
                      vote.AnyRank(CacheVote::kCheckDue);
  return outcome;
}

bool Engine::RunCycleOrStop(SetState& set) {
  // The last line of defence: an exception thrown on this thread (a library's, or hvx's own) must
  // not end the process through std::terminate with nothing said; the engine stops with it, and
  // every pending op fails with it on this rank (the others' ops then end at their deadline).
  try {
    return RunCycle(set);
  } catch (const std::exception& e) {
    return Stop(absl::InternalError(absl::StrCat(
        "an exception on hvx's background thread (process set ", set.id, "): ", e.what())));
  }
}

absl::StatusOr<ResponseList> Engine::GatherPlanBroadcast(SetState& set,
                                                         const std::vector<std::string>& to_send,
                                                         bool joined) {
  RequestList mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine.shutdown = shutdown_requested_ && set.id == 0;
  }
  const absl::Time now = MonotonicNow();
  for (const std::string& name : to_send) {
    const Entry& e = set.pending.at(name);
    if (e.request.type == OpType::kJoin) joined_ = true;
    auto known = set.ids.find(name);
    if (known != set.ids.end() && SameRequest(known->second.request, e.request)) {
      Request by_id;
      by_id.id = known->second.id;
      by_id.rank = e.request.rank;
      mine.requests.push_back(by_id);
    } else {
      mine.requests.push_back(e.request);
    }
    mine.requests.back().waited_s = absl::ToDoubleSeconds(now - e.submitted);
  }
  mine.joined = joined || joined_;
  Failpoint("negotiation");
  absl::Status unreadable;
  HVX_RETURN_IF_ERROR(GatherAtCoordinator(set, EncodeRequestList(mine), &unreadable));
  std::string out;
  if (set.comm->rank() == 0) {
    ResponseList plan;
    if (unreadable.ok()) {
      const absl::Time built = MonotonicNow();
      plan = set.coordinator->Build(built);
      // Without the cache's vote, rank 0's window decides for every rank.
      plan.stats_due = set.id == 0 && set.cache->capacity() == 0 && StragglerWindowDue(built);
    } else {
      // Every rank stops now with the cause, instead of waiting for a broadcast until its
      // collective timeout.
      plan.error = absl::StrCat("the coordinator could not read this cycle's requests: ",
                                unreadable.message());
      plan.shutdown = true;
    }
    out = EncodeResponseList(plan);
  }
  HVX_RETURN_IF_ERROR(set.comm->Broadcast(&out));
  HVX_ASSIGN_OR_RETURN(ResponseList list, DecodeResponseList(out));
  if (!list.error.empty()) return absl::DataLossError(list.error);
  LearnIds(set, list);
  return list;
}

absl::Status Engine::GatherAtCoordinator(SetState& set, const std::string& mine,
                                         absl::Status* unreadable) {
  std::vector<std::string> all;
  if (set.host_comm == nullptr) {
    HVX_RETURN_IF_ERROR(set.comm->Gather(mine, &all));
    const absl::Time now = MonotonicNow();  // after the gather, which waited for every rank
    for (int r = 0; r < static_cast<int>(all.size()) && unreadable->ok(); ++r) {
      absl::StatusOr<RequestList> list = DecodeRequestList(all[r]);
      if (!list.ok()) {
        *unreadable = Annotate(list.status(), absl::StrCat("set rank ", r));
      } else {
        *unreadable = set.coordinator->Add(r, *list, now);
      }
    }
    return absl::OkStatus();
  }
  HVX_RETURN_IF_ERROR(set.host_comm->Gather(mine, &all));
  if (set.leaders_comm == nullptr) return absl::OkStatus();
  // A host's first rank that cannot read its members' lists still takes part in the gather
  // across hosts, with the error for the coordinator to stop every rank with.
  HostRequestList merged;
  std::vector<RequestList> lists;
  for (size_t i = 0; i < all.size() && merged.error.empty(); ++i) {
    absl::StatusOr<RequestList> list = DecodeRequestList(all[i]);
    if (!list.ok()) {
      merged.error =
          absl::StrCat("set rank ", set.host_members[i], ", read by its host's first rank ",
                       set.host_members[0], ": ", list.status().message());
    } else {
      lists.push_back(*std::move(list));
    }
  }
  if (merged.error.empty()) {
    absl::StatusOr<HostRequestList> m = MergeHostRequests(set.host_members, lists);
    if (m.ok()) {
      merged = *std::move(m);
    } else {
      merged.error = absl::StrCat("set rank ", set.host_members[0], ": ", m.status().message());
    }
  }
  std::vector<std::string> hosts;
  HVX_RETURN_IF_ERROR(set.leaders_comm->Gather(EncodeHostRequestList(merged), &hosts));
  const absl::Time now = MonotonicNow();
  for (size_t h = 0; h < hosts.size() && unreadable->ok(); ++h) {
    *unreadable = set.coordinator->AddEncodedHostList(hosts[h], h, now);
  }
  return absl::OkStatus();
}

void Engine::LearnIds(SetState& set, const ResponseList& list) {
  for (uint32_t id : list.retired) {
    auto it = set.id_names.find(id);
    if (it == set.id_names.end()) continue;
    set.ids.erase(it->second);
    set.id_names.erase(it);
  }
  for (const TensorId& t : list.assigned) {
    auto pending = set.pending.find(t.name);
    // A rank that had joined made no request for the name: it sends the name next time.
    if (pending == set.pending.end()) {
      auto known = set.ids.find(t.name);
      if (known != set.ids.end()) {
        set.id_names.erase(known->second.id);
        set.ids.erase(known);
      }
      continue;
    }
    set.ids[t.name] = {t.id, pending->second.request};
    set.id_names[t.id] = t.name;
  }
}

bool Engine::OnOwnDevice(const SetState& set, const Request& request) {
  if (request.device.is_cpu()) return true;
  auto it = set.own_device.find(request.device.type);
  return it == set.own_device.end() || it->second == request.device;
}

}  // namespace hvx
