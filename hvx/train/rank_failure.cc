#include "hvx/train/rank_failure.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/torch/tensor.h"

namespace hvx {

std::string EncodeFailure(const absl::Status& status, const std::string& host) {
  return status.ok()
             ? std::string()
             : absl::StrCat(static_cast<int>(status.code()), " ", host, " ", status.message());
}

RankFailure DecodeFailure(int rank, const std::string& encoded) {
  RankFailure f;
  f.rank = rank;
  std::vector<std::string> parts = absl::StrSplit(encoded, absl::MaxSplits(' ', 2));
  int code = 0;
  if (parts.size() == 3 && absl::SimpleAtoi(parts[0], &code) && code > 0 &&
      code <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    f.code = static_cast<absl::StatusCode>(code);
    f.host = parts[1];
    f.message = parts[2];
  } else {
    f.code = absl::StatusCode::kUnknown;
    f.message = encoded;
  }
  return f;
}

std::vector<RankFailure> Failures(const std::vector<std::string>& encoded) {
  std::vector<RankFailure> failures;
  for (size_t r = 0; r < encoded.size(); ++r) {
    if (!encoded[r].empty()) failures.push_back(DecodeFailure(static_cast<int>(r), encoded[r]));
  }
  return failures;
}

absl::Status StatusOf(const RankFailure& failure, const absl::Status& own, int my_rank) {
  if (failure.rank == my_rank) return own;
  return absl::Status(
      failure.code,
      absl::StrCat("rank ", failure.rank,
                   failure.host.empty() ? "" : absl::StrCat(" (host ", failure.host, ")"), ": ",
                   failure.message.empty() ? "failed without a message" : failure.message));
}

std::string InBandFailure(const absl::Status& status) {
  return absl::StrCat("!", EncodeFailure(status, Host()));
}

absl::Status FromInBand(const std::string& data) {
  if (data.empty() || data[0] != '!') return absl::OkStatus();
  const RankFailure f = DecodeFailure(0, data.substr(1));
  return StatusOf(f, absl::Status(f.code, f.message), Rank());
}

absl::Status ShareRank0Error(const std::string& name, const absl::Status& rank0_status) {
  std::string shared = Rank() == 0 ? EncodeFailure(rank0_status, Host()) : std::string();
  HVX_RETURN_IF_ERROR(BroadcastBytes(name, &shared, 0));
  if (shared.empty()) return Rank() == 0 ? rank0_status : absl::OkStatus();
  return StatusOf(DecodeFailure(0, shared), rank0_status, Rank());
}

}  // namespace hvx
