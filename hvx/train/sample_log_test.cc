#include "hvx/train/sample_log.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/sample_log_test_" + name;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SampleLogTest, OneIdALineWithPaddingMarkedAndAResumedEpochAppended) {
  const std::string dir = Dir("ids");
  {
    SampleLog log;
    ASSERT_TRUE(log.Open(dir, 1, 0, /*append=*/false).ok());
    ASSERT_TRUE(log.Add({7, 3}, 0).ok());
    ASSERT_TRUE(log.Close().ok());
  }
  SampleLog resumed;
  ASSERT_TRUE(resumed.Open(dir, 1, 0, /*append=*/true).ok());
  ASSERT_TRUE(resumed.Add({5, 9, 7}, 1).ok());
  ASSERT_TRUE(resumed.Close().ok());
  EXPECT_EQ(Read(dir + "/rank1-epoch0.txt"), "7\n3\n5\n9\n7 pad\n");
  SampleLog fresh;
  ASSERT_TRUE(fresh.Open(dir, 1, 0, /*append=*/false).ok());
  ASSERT_TRUE(fresh.Add({2}, 0).ok());
  ASSERT_TRUE(fresh.Close().ok());
  EXPECT_EQ(Read(dir + "/rank1-epoch0.txt"), "2\n");
}

TEST(SampleLogTest, NoDirectoryWritesNothing) {
  SampleLog log;
  ASSERT_TRUE(log.Open("", 0, 0, false).ok());
  EXPECT_TRUE(log.Add({1, 2}, 0).ok());
  EXPECT_TRUE(log.Close().ok());
}

}  // namespace
}  // namespace train
}  // namespace hvx
