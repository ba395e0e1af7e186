#include "hvx/common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(FilesTest, MakeDirsCreatesParentsAndAcceptsExisting) {
  const std::string dir = TempDir() + "/a/b/c";
  ASSERT_TRUE(MakeDirs(dir).ok());
  EXPECT_TRUE(IsDir(dir));
  EXPECT_TRUE(MakeDirs(dir).ok());
  EXPECT_TRUE(MakeDirs(dir + "/").ok());
  EXPECT_TRUE(MakeDirs("").ok());
}

TEST(FilesTest, MakeDirsNamesTheDirectoryItCouldNotCreate) {
  const std::string file = TempDir() + "/plain_file";
  const int fd = open(file.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  absl::Status s = MakeDirs(file + "/sub");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "creating directory " + file + "/sub")) << s;
}

TEST(FilesTest, WriteFullyWritesEverythingOrSaysWhy) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string data(10000, 'x');
  ASSERT_TRUE(WriteFully(fds[1], data));
  close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
  close(fds[0]);
  EXPECT_EQ(got, data);
  EXPECT_FALSE(WriteFully(-1, "x"));
  EXPECT_EQ(errno, EBADF);
}

TEST(FilesTest, OpenReadOnlyGivesTheSizeOrNamesThePath) {
  const std::string path = TempDir() + "/seven_bytes";
  const int w = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(w, 0);
  ASSERT_TRUE(WriteFully(w, "1234567"));
  ::close(w);
  absl::StatusOr<ReadOnlyFile> f = OpenReadOnly(path, "record file");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size, 7u);
  ::close(f->fd);
  const absl::StatusOr<ReadOnlyFile> missing = OpenReadOnly(path + ".nope", "record file");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_TRUE(absl::StartsWith(missing.status().message(), "opening record file " + path + ".nope"))
      << missing.status();
}

std::string ReadAll(const std::string& path) {
  absl::StatusOr<ReadOnlyFile> f = OpenReadOnly(path, "file");
  if (!f.ok()) return "<" + std::string(f.status().message()) + ">";
  std::string got(f->size, '\0');
  const ssize_t n = pread(f->fd, got.data(), got.size(), 0);
  ::close(f->fd);
  return n == static_cast<ssize_t>(got.size()) ? got : "<short read>";
}

TEST(FilesTest, WriteFileAtomicallyReplacesTheFileAndLeavesNoTemporary) {
  const std::string dir = TempDir() + "/atomic";
  ASSERT_TRUE(MakeDirs(dir).ok());
  for (bool durable : {false, true}) {
    const std::string path = dir + (durable ? "/durable" : "/plain");
    ASSERT_TRUE(WriteFileAtomically(path, "first", "test file", durable).ok());
    EXPECT_EQ(ReadAll(path), "first");
    ASSERT_TRUE(WriteFileAtomically(path, std::string(100000, 'y'), "test file", durable).ok());
    EXPECT_EQ(ReadAll(path), std::string(100000, 'y'));
    EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
  }
  // A directory in the way of the rename: the error names it, the temporary is gone.
  const std::string blocked = dir + "/blocked";
  ASSERT_TRUE(MakeDirs(blocked + "/inside").ok());
  const absl::Status s = WriteFileAtomically(blocked, "x", "test file", /*durable=*/true);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "to " + blocked)) << s;
  EXPECT_NE(access((blocked + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
  // No directory to write into: the error names what was being written.
  const absl::Status missing = WriteFileAtomically(dir + "/no/such", "x", "index file", false);
  EXPECT_TRUE(absl::StrContains(missing.message(), "creating index file " + dir + "/no/such.tmp."))
      << missing;
}

TEST(FilesTest, SelfExecutableIsThisTest) {
  EXPECT_TRUE(absl::EndsWith(SelfExecutable(), "/files_test")) << SelfExecutable();
}

}  // namespace
}  // namespace hvx
