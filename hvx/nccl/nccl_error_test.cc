#include "hvx/nccl/nccl_error.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace nccl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(NcclVersionStringTest, BothEncodings) {
  EXPECT_EQ(NcclVersionString(22809), "2.28.9");
  EXPECT_EQ(NcclVersionString(21003), "2.10.3");
  EXPECT_EQ(NcclVersionString(2708), "2.7.8");
  EXPECT_EQ(NcclVersionString(0), "unknown");
}

NcclErrorContext Where() {
  NcclErrorContext c;
  c.call = "ncclCommInitRank";
  c.rank = 3;
  c.set_size = 8;
  c.device = 1;
  c.host = "node2";
  return c;
}

TEST(NcclErrorToStatusTest, SuccessIsOk) {
  EXPECT_TRUE(NcclErrorToStatus(kNcclSuccess, "", 22809, Where()).ok());
}

TEST(NcclErrorToStatusTest, SystemErrorAtInitNamesNetworkShmAndVersion) {
  NcclErrorContext c = Where();
  c.dev_shm_bytes = int64_t{64} << 20;
  c.last_error = "socketStartConnect: Connect to 172.17.0.1<43211> failed";
  absl::Status s = NcclErrorToStatus(kNcclSystemError, "unhandled system error", 22809, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  const std::string m(s.message());
  EXPECT_THAT(
      m,
      HasSubstr("ncclCommInitRank failed on rank 3 (host node2), cuda:1, communicator of 8 ranks"));
  EXPECT_THAT(m,
              HasSubstr("unhandled system error (NCCL error 2, NCCL 2.28.9): socketStartConnect"));
  EXPECT_THAT(m, HasSubstr("NCCL_SOCKET_IFNAME=eth0 (it is unset)"));
  EXPECT_THAT(m, HasSubstr("/dev/shm is only 64 MiB"));
  EXPECT_THAT(m, HasSubstr("two ranks on one host use the same GPU"));
  EXPECT_THAT(m, HasSubstr("NCCL_DEBUG=INFO"));
}

TEST(NcclErrorToStatusTest, LargeShmAndSetInterfaceAreNotBlamedBlindly) {
  NcclErrorContext c = Where();
  c.call = "ncclAllReduce";
  c.tensor = "grad.fc1";
  c.dev_shm_bytes = int64_t{16} << 30;
  c.socket_ifname = "ib0";
  const std::string m(
      NcclErrorToStatus(kNcclSystemError, "unhandled system error", 22809, c).message());
  EXPECT_THAT(m, HasSubstr("ncclAllReduce failed for tensor 'grad.fc1'"));
  EXPECT_THAT(m, HasSubstr("NCCL_SOCKET_IFNAME=ib0 may not name an interface"));
  EXPECT_THAT(m, Not(HasSubstr("/dev/shm")));
  EXPECT_THAT(m, Not(HasSubstr("same GPU")));
}

TEST(NcclErrorToStatusTest, CudaErrorsPointAtSharedGpus) {
  NcclErrorContext c = Where();
  c.call = "ncclBroadcast";
  absl::Status s = NcclErrorToStatus(kNcclUnhandledCudaError, "unhandled cuda error", 22809, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()), HasSubstr("two ranks on one host use the same GPU"));
}

TEST(NcclErrorToStatusTest, AsynchronousRemoteErrorsBlameThePeer) {
  NcclErrorContext c = Where();
  c.call = "ncclAllReduce";
  c.asynchronous = true;
  absl::Status s = NcclErrorToStatus(
      kNcclRemoteError, "remote process exited or there was a network error", 22809, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ncclAllReduce failed asynchronously"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("another rank failed or exited"));
}

TEST(NcclErrorToStatusTest, MisuseIsNotBlamedOnTheNetwork) {
  NcclErrorContext c = Where();
  c.call = "ncclAllGather";
  absl::Status s = NcclErrorToStatus(kNcclInvalidArgument, "invalid argument", 22809, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("different arguments"));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("NCCL_SOCKET_IFNAME")));
  EXPECT_EQ(NcclErrorToStatus(kNcclInvalidUsage, "invalid usage", 22809, c).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(FilesystemBytesTest, ReadsAMountedFilesystemAndFailsOnMissingPath) {
  EXPECT_GT(FilesystemBytes("/"), 0);
  EXPECT_EQ(FilesystemBytes("/nonexistent/dir"), -1);
}

}  // namespace
}  // namespace nccl
}  // namespace hvx
