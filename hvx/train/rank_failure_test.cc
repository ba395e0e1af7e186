// How a rank's failure reaches the others: the encoding both ways, and rank 0's error shared with
// every rank (2 ranks).
#include "hvx/train/rank_failure.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/core/api.h"
#include "hvx/torch/tensor.h"

namespace hvx {
namespace {

TEST(RankFailureTest, TheOthersGetTheCodeTheRankTheHostAndTheMessage) {
  const absl::Status own = absl::DataLossError("ckpt-4/x.safetensors: 12 bytes short");
  const std::vector<RankFailure> failed =
      Failures({"", EncodeFailure(own, "node-b"), "", EncodeFailure(absl::OkStatus(), "node-d")});
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].rank, 1);
  EXPECT_EQ(StatusOf(failed[0], own, 1), own);
  EXPECT_EQ(StatusOf(failed[0], absl::OkStatus(), 0),
            absl::DataLossError("rank 1 (host node-b): ckpt-4/x.safetensors: 12 bytes short"));
}

TEST(RankFailureTest, BytesThatAreNotAnEncodedFailureAreKeptAsTheMessage) {
  const RankFailure f = DecodeFailure(2, "99 whatever happened");
  EXPECT_EQ(f.code, absl::StatusCode::kUnknown);
  EXPECT_EQ(StatusOf(f, absl::OkStatus(), 0), absl::UnknownError("rank 2: 99 whatever happened"));
  EXPECT_EQ(
      StatusOf(DecodeFailure(0, EncodeFailure(absl::InternalError(""), "h")), absl::OkStatus(), 1),
      absl::InternalError("rank 0 (host h): failed without a message"));
}

TEST(RankFailureTest, RankZerosErrorIsEveryRanks) {
  const absl::Status rank0 = absl::NotFoundError("no checkpoint in /ck");
  const absl::Status s = ShareRank0Error("test.error", Rank() == 0 ? rank0 : absl::OkStatus());
  EXPECT_EQ(s, Rank() == 0 ? rank0
                           : absl::NotFoundError(
                                 absl::StrCat("rank 0 (host ", Host(), "): no checkpoint in /ck")));
  EXPECT_TRUE(ShareRank0Error("test.ok", absl::OkStatus()).ok());
}

TEST(RankFailureTest, RankZerosFailureInPlaceOfABroadcastsData) {
  std::string data = Rank() == 0 ? InBandFailure(absl::FailedPreconditionError("no dir")) : "";
  ASSERT_TRUE(BroadcastBytes("test.in_band", &data, 0).ok());
  EXPECT_EQ(FromInBand(data),
            absl::FailedPreconditionError(absl::StrCat(
                Rank() == 0 ? "" : absl::StrCat("rank 0 (host ", Host(), "): "), "no dir")));
  EXPECT_TRUE(FromInBand("/ck/ckpt-4").ok());
  EXPECT_TRUE(FromInBand("").ok());
}

}  // namespace
}  // namespace hvx
