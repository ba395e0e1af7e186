#include "hvx/common/status.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace hvx {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  HVX_ASSIGN_OR_RETURN(int h, Half(x));
  HVX_ASSIGN_OR_RETURN(*out, Half(h));
  return absl::OkStatus();
}

absl::Status FailIfNegative(int x) {
  HVX_RETURN_IF_ERROR(x < 0 ? absl::OutOfRangeError("negative") : absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusTest, AssignOrReturnPropagatesValueAndError) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  absl::Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd");
}

TEST(StatusTest, ReturnIfError) {
  EXPECT_TRUE(FailIfNegative(1).ok());
  EXPECT_EQ(FailIfNegative(-1).code(), absl::StatusCode::kOutOfRange);
}

TEST(StatusTest, UnsharedKeepsCodeAndMessage) {
  const absl::Status s = absl::NotFoundError("no such tensor");
  const absl::Status u = Unshared(s);
  EXPECT_EQ(u, s);
  EXPECT_NE(u.message().data(), s.message().data());
  EXPECT_TRUE(Unshared(absl::OkStatus()).ok());
}

TEST(StatusTest, AnnotateKeepsCodeAndPrefixesMessage) {
  absl::Status s = Annotate(absl::DataLossError("bad crc"), "/data/a.rec:120");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "/data/a.rec:120: bad crc");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

TEST(StatusTest, ErrnoToStatusMapsCodes) {
  absl::Status s = ErrnoToStatus(ENOENT, "open /nope");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open /nope: No such file or directory");
  EXPECT_EQ(ErrnoToStatus(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EIO, "x").code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace hvx
