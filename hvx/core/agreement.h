// Settings that must be the same on every rank (engine knobs, build identity, a dataset's size),
// compared in one exchange so that a difference fails every rank alike instead of hanging some.
//
//   Settings mine = {{"HVX_FUSION_THRESHOLD", "128MiB"}, {"hvx build", BuildIdentity()}};
//   std::vector<std::string> all;
//   HVX_RETURN_IF_ERROR(comm.Allgather(EncodeSettings(mine), &all));
//   HVX_RETURN_IF_ERROR(CompareSettings(all));  // the same verdict on every rank
#ifndef HVX_CORE_AGREEMENT_H_
#define HVX_CORE_AGREEMENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/core/transport.h"

namespace hvx {

// (name, value) pairs in a fixed order; every rank lists the same names.
using Settings = std::vector<std::pair<std::string, std::string>>;

std::string EncodeSettings(const Settings& settings);
absl::StatusOr<Settings> DecodeSettings(absl::string_view bytes);

// OK when every rank's settings (encoded, by rank) are equal. Otherwise FailedPrecondition with one
// line per setting that differs, naming each distinct value and the ranks that hold it:
//   "HVX_FUSION_THRESHOLD: ranks 0-3 have 128MiB, ranks 4-7 have 64MiB"
absl::Status CompareSettings(const std::vector<std::string>& encoded_by_rank);

// Collective over `comm`: OK when `local` is OK on every rank. Otherwise every rank fails: a rank
// that failed with its own error, the others with FailedPrecondition(describe(r, why)) for the
// lowest failing rank r of `comm` and its message (a failure without a message counts too).
//
//   HVX_RETURN_IF_ERROR(AgreeOnEveryRank(comm, group.status(), [&](int r, absl::string_view why) {
//     return absl::StrCat("rank ", r, " could not map its region: ", why);
//   }));
absl::Status AgreeOnEveryRank(
    Communicator& comm, const absl::Status& local,
    absl::FunctionRef<std::string(int rank, absl::string_view why)> describe);

// "0-3,5,7-8" for {0,1,2,3,5,7,8} (ascending input).
std::string RankRanges(const std::vector<int>& ranks);

// A byte count as the knobs take it: "128MiB", "64KiB", "1000".
std::string FormatBytes(int64_t bytes);

}  // namespace hvx

#endif  // HVX_CORE_AGREEMENT_H_
