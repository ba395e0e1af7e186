// The coordinator of one process set (its rank 0): collects every rank's requests, decides which
// named tensors are ready, validates that all ranks agree, and plans the fused response list that
// every rank then executes in the same order.
//
//   Coordinator coord(size, options);
//   for (const HostRequestList& host : hosts) HVX_RETURN_IF_ERROR(coord.Add(host, now));
//   ResponseList out = coord.Build(now);
//
// Disagreements become kError responses that name the tensor and the ranks involved, so every
// rank's handle fails instead of hanging. Per name it keeps each distinct request once, with a
// bitset of the ranks that made it, so a cycle costs it per host entry, not per rank.
#ifndef HVX_CORE_COORDINATOR_H_
#define HVX_CORE_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "hvx/core/message.h"
#include "hvx/core/validation.h"

namespace hvx {

// Observes negotiation for the timeline. Times are when the coordinator saw the event.
class NegotiationObserver {
 public:
  virtual ~NegotiationObserver() = default;
  virtual void NegotiationStart(const std::string& name, OpType type) = 0;
  virtual void RankReady(const std::string& name, int rank) = 0;
  virtual void NegotiationEnd(const std::string& name) = 0;
};

struct CoordinatorOptions {
  int64_t fusion_threshold_bytes = int64_t{128} << 20;
  double stall_check_time_s = 60;
  double stall_shutdown_time_s = 0;
  // Global rank of each set rank, for messages.
  std::vector<int> global_ranks;
  NegotiationObserver* observer = nullptr;
  // Host of each set rank, for messages.
  std::vector<std::string> hosts;
  // A name some ranks submitted fails on every rank once it has waited this long for the others
  // (HVX_COLLECTIVE_TIMEOUT_S); 0 = never.
  double collective_timeout_s = 0;
  // Most tensor ids held at once; past it the least recently negotiated names lose theirs.
  size_t max_tensor_ids = 65536;
  // The first tensor id handed out when none was retired (ids are never 0); tests start it near
  // the top of the range to see it wrap.
  uint32_t first_tensor_id = 1;
};

class Coordinator {
 public:
  Coordinator(int size, CoordinatorOptions options);
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // One rank's request list of this cycle. Fails (DataLoss) on a tensor id this coordinator has
  // not announced or has retired; the requests before it are added.
  absl::Status Add(int rank, const RequestList& list, absl::Time now);
  // The merged requests of one host's ranks this cycle. Fails (DataLoss) on a member rank outside
  // the set, on a rank named twice for one tensor and on an unknown tensor id.
  absl::Status Add(const HostRequestList& host, absl::Time now);
  // The same list as it arrived, encoded (EncodeHostRequestList), read entry by entry into the
  // coordinator without decoding it whole (VisitHostRequestList). Fails as Add does, with the
  // list's own error when its first rank could not read its members, and with DataLoss naming
  // "the merged list of host <host>" when the bytes are corrupt (the entries before the corrupt
  // one are added).
  absl::Status AddEncodedHostList(absl::string_view bytes, size_t host, absl::Time now);

  // The responses for every name that became ready (in the order names first arrived), error
  // responses for disagreements and for stalls past the shutdown time, and a Join response when
  // every rank has joined. shutdown is set when any rank asked for it.
  ResponseList Build(absl::Time now);

  // Report of names some ranks submitted more than `older_than` ago and others have not, or "" if
  // none: "Missing ranks:\n  1: [grad.a, grad.b]\n".
  std::string StallReport(absl::Time now, absl::Duration older_than) const;

  // Number of names waiting for some rank.
  size_t pending() const { return table_.size(); }

  // Whether a stall warning, a stall shutdown or a collective timeout is due by `now`: Build must
  // run then even when no rank has anything new to send.
  bool CheckDue(absl::Time now) const;

 private:
  // A set of ranks of the set, one bit each.
  using RankBits = std::vector<uint64_t>;
  // The ranks of one submission: a list while that is smaller than a bitset of the set (an
  // allgather whose first dimension differs per rank is one submission per rank), then a bitset.
  class RankSet {
   public:
    // Adds `rank` of a set of `size`; a rank is added at most once.
    void Add(int rank, int size);
    template <typename Fn>
    void ForEach(Fn fn) const {
      if (bits_.empty()) {
        for (int32_t r : list_) fn(r);
        return;
      }
      for (size_t w = 0; w < bits_.size(); ++w) {
        for (uint64_t word = bits_[w]; word != 0; word &= word - 1) {
          fn(static_cast<int>(w * 64) + __builtin_ctzll(word));
        }
      }
    }

   private:
    std::vector<int32_t> list_;
    RankBits bits_;  // empty while list_ holds the ranks
  };
  // One distinct request for a name, and the ranks that made it.
  struct Submission {
    Request request;
    RankSet ranks;
    int lowest = 0;  // the lowest rank in `ranks`
    // Nonzero when it came as this tensor id: each rank's device is then its own
    // (device_of_rank_), whatever request.device says.
    uint32_t id = 0;
    uint64_t key = 0;  // SubmissionKey of the request as it came (its id, or a hash)
  };
  struct Pending {
    std::vector<Submission> submissions;
    // Indexes into submissions by SubmissionKey, once there are more than a few (empty until
    // then); a key's candidates are compared in full.
    std::unordered_map<uint64_t, std::vector<int32_t>> by_key;
    RankBits submitted;
    absl::Time first_seen;
    int64_t arrival = 0;
    bool by_name = false;  // some rank sent it by name, not by id
    // The members of the host list last added (host_list: its number) that named it.
    int64_t host_list = -1;
    std::vector<uint64_t> host_members;
  };
  struct IdEntry {
    std::string name;
    Request request;  // what the id stands for
    int64_t last_used = 0;
  };

  // Adds `request` for the ranks `members[i]` with bit i of `mask` (members ascending), sent by
  // members[0] itself or, `from_host`, by its host's first rank.
  // Add's steps: a host list's header (members and shutdown mask; entries ignored), then each
  // entry with that header.
  absl::Status AddHostHeader(const HostRequestList& host);
  absl::Status AddHostEntry(const HostRequestList& host, const Request& request,
                            const std::vector<uint64_t>& mask, absl::Time now);
  absl::Status AddRequest(const Request& request, const std::vector<int32_t>& members,
                          const std::vector<uint64_t>& mask, bool from_host, absl::Time now);
  void AddJoin(int rank, absl::Time submitted);
  // Forgets every joined rank (joined_ and joined_bits_ together).
  void ClearJoined();
  // The submission p's lowest rank made (p has at least one).
  static const Submission& LowestSubmission(const Pending& p);
  // For each rank, the index of its submission in p.submissions (-1: none yet).
  std::vector<int32_t> SubmissionOfEachRank(const Pending& p) const;
  // `rank`'s device for submission s.
  Device DeviceOf(const Submission& s, int rank) const;
  // Gives ids to `agreed` (the requests of names that succeeded this cycle and that some rank
  // sent by name), and retires the least recently used past max_tensor_ids, in *out.
  void AssignIds(std::vector<Request> agreed, ResponseList* out);
  // An id no name holds, not 0: a retired one when there is one.
  uint32_t NewTensorId();

  bool IsReady(const Pending& p) const;
  // Whether `p` is an op other than allreduce while some rank has joined: an error however the
  // other ranks answer (a joined rank submits nothing until every rank joins), so it fails now
  // instead of waiting for ranks whose unnamed ops may be counted differently.
  bool FailsForJoin(const Pending& p) const;
  // The response every rank gets for `name`: the op to run, or an error naming the tensor, the
  // ranks and what differs. Its checks, each "" when it finds nothing wrong:
  Response Validate(const std::string& name, const Pending& p) const;
  // a GPU tensor on another device than the rank's earlier ones;
  std::string DeviceProblem(const Pending& p) const;
  // what differs between two ranks' requests and an op other than allreduce while ranks have
  // joined (Mismatch, JoinProblem: validation.h); what the op itself needs (NegativeDimension,
  // OpLimits, AlltoallRows), filling the response's rows for the gathers.
  std::string OpProblem(const Pending& p, const Request& a, Response* resp) const;
  Response ErrorResponse(const std::string& name, std::string message,
                         absl::StatusCode code = absl::StatusCode::kInvalidArgument) const;
  void MaybeWarnStall(absl::Time now, std::vector<Response>* errors);
  // Fails every name that has waited HVX_COLLECTIVE_TIMEOUT_S, naming the ranks that did not come,
  // and the join of the joined ranks when no collective completed for that long.
  void FailTimedOut(absl::Time now, std::vector<Response>* errors);
  // Whether some ranks have joined and none of the others joined or completed a collective with
  // them within HVX_COLLECTIVE_TIMEOUT_S.
  bool JoinTimedOut(absl::Time now) const;

  const int size_;
  const CoordinatorOptions options_;
  const RankNames names_;  // for messages: options_'s global ranks and hosts
  std::unordered_map<std::string, Pending> table_;
  std::unordered_map<uint32_t, IdEntry> ids_;
  std::unordered_map<std::string, uint32_t> id_of_name_;
  // Retired ids, handed out again before next_id_ moves on. Every rank forgets a retired id
  // before it sends again (ResponseList::retired), so one can stand for a new name next cycle.
  std::vector<uint32_t> free_ids_;
  uint32_t next_id_;
  int64_t builds_ = 0;
  RankBits joined_bits_;
  int64_t next_arrival_ = 0;
  int64_t host_lists_added_ = 0;  // Add(HostRequestList) calls so far
  // Each rank's device of each non-CPU type: the first one its requests named.
  std::vector<std::map<DeviceType, Device>> device_of_rank_;
  std::set<int> joined_;
  // When the first rank joined or, since, the last collective completed.
  absl::Time join_progress_ = absl::InfinitePast();
  int last_joined_ = -1;
  bool shutdown_ = false;
  absl::Time last_stall_warning_ = absl::InfinitePast();
};

}  // namespace hvx

#endif  // HVX_CORE_COORDINATOR_H_
