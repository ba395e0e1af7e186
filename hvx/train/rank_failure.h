// How one rank's failure in a collective step of the trainer (a checkpoint written or resumed)
// reaches the others, so that every rank returns an error and whichever rank's line an operator
// reads names the rank, its host and what went wrong there:
//
//   // Every rank, after its own part (collective):
//   HVX_ASSIGN_OR_RETURN(std::vector<std::string> all,
//                        AllgatherBytes("resume.read", EncodeFailure(own, Host())));
//   std::vector<RankFailure> failed = Failures(all);
//   if (!failed.empty()) return StatusOf(failed.front(), own, Rank());
//
//   // Or where rank 0 alone decides:
//   HVX_RETURN_IF_ERROR(ShareRank0Error("resume.error", rank0_status));
//
// On the failing rank the status is its own; on the others it has the same code and the message
// "rank R (host H): <the failing rank's message>".
#ifndef HVX_TRAIN_RANK_FAILURE_H_
#define HVX_TRAIN_RANK_FAILURE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace hvx {

// "<code> <host> <message>"; empty for OK.
std::string EncodeFailure(const absl::Status& status, const std::string& host);

struct RankFailure {
  int rank = -1;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string host, message;
};

// `rank`'s EncodeFailure. Bytes that are not one (another version's) are kept as the message,
// with code UNKNOWN.
RankFailure DecodeFailure(int rank, const std::string& encoded);

// The failures among every rank's EncodeFailure, indexed by rank, in rank order.
std::vector<RankFailure> Failures(const std::vector<std::string>& encoded);

// What rank `my_rank` returns for `failure`: `own` on the failing rank, else the failure's code and
// "rank R (host H): message".
absl::Status StatusOf(const RankFailure& failure, const absl::Status& own, int my_rank);

// Rank 0's failure sent in band, in place of a broadcast's data (which then never starts with '!'):
//   std::string data = ok ? the_data : InBandFailure(status);   // rank 0
//   HVX_RETURN_IF_ERROR(BroadcastBytes("x", &data, 0));
//   HVX_RETURN_IF_ERROR(FromInBand(data));                       // every rank
std::string InBandFailure(const absl::Status& status);
// Rank 0's status if `data` is its InBandFailure (as StatusOf says on each rank), else OK.
absl::Status FromInBand(const std::string& data);

// Collective over the global set: rank 0's `rank0_status` on every rank (as StatusOf says); OK
// everywhere when rank 0's is. `name` is the broadcast's, unique among the step's collectives.
absl::Status ShareRank0Error(const std::string& name, const absl::Status& rank0_status);

}  // namespace hvx

#endif  // HVX_TRAIN_RANK_FAILURE_H_
