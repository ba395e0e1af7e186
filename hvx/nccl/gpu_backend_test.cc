#include "hvx/nccl/gpu_backend.h"

#include <regex>

#include "gtest/gtest.h"

namespace hvx {
namespace nccl {
namespace {

// Both kinds of build say which they are; a GPU build names the libraries it loaded.
TEST(GpuBackendTest, SaysWhichBuildThisIs) {
  const std::string line = DescribeGpuBackend();
  if (HasGpuBackend()) {
    EXPECT_TRUE(std::regex_match(
        line, std::regex(R"(hvx with its GPU backend \(--config=cuda\), NCCL [1-9][0-9]*\.[0-9]+\.)"
                         R"([0-9]+, CUDA runtime [1-9][0-9]*\.[0-9]+)")))
        << line;
  } else {
    EXPECT_EQ(line, "hvx without a GPU backend (built without --config=cuda)");
  }
}

}  // namespace
}  // namespace nccl
}  // namespace hvx
