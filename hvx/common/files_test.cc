#include "hvx/common/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

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

// Checkpoints, logs and timelines were world-readable (0644 files in 0755 directories) on shared
// volumes: files are 0640 and directories 0750 now, less the umask.
TEST(FilesTest, NewDirectoriesAndFilesAreNotEveryonesToRead) {
  const mode_t old_mask = umask(022);
  const std::string dir = TempDir() + "/private/run";
  ASSERT_TRUE(MakeDirs(dir).ok());
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  auto fd = OpenForWriting(dir + "/log.txt", "log");
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  ASSERT_EQ(stat((dir + "/log.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  ASSERT_TRUE(WriteFileAtomically(dir + "/ckpt-1.pt", "data", "checkpoint", true).ok());
  ASSERT_EQ(stat((dir + "/ckpt-1.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  umask(old_mask);
}

// A directory someone else can write into is not used as it is: every user could replace the
// checkpoints in a world-writable one (a sticky one, as /tmp, keeps each user's files theirs),
// and another user's own directory is theirs to change.
TEST(FilesTest, MakeDirsRefusesADirectoryOthersCanWriteInto) {
  const std::string dir = TempDir() + "/open_to_all";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  absl::Status s = MakeDirs(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "directory " + dir +
                                                 " is writable by every user "
                                                 "(mode 0777)"))
      << s;
  ASSERT_EQ(chmod(dir.c_str(), 01777), 0);
  EXPECT_TRUE(MakeDirs(dir).ok());
  ASSERT_EQ(chmod(dir.c_str(), 0750), 0);

  if (geteuid() != 0) GTEST_SKIP() << "another user's directory needs root to make";
  char base[] = "/tmp/hvx-files-test-XXXXXX";
  ASSERT_NE(mkdtemp(base), nullptr);
  ASSERT_EQ(chmod(base, 0755), 0);
  const std::string theirs = std::string(base) + "/theirs", roots = std::string(base) + "/roots";
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(roots.c_str(), 0755), 0);
  if (chown(theirs.c_str(), 12345, 12345) != 0) {
    rmdir(theirs.c_str());
    rmdir(roots.c_str());
    rmdir(base);
    GTEST_SKIP() << "cannot give a directory to another user here";
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
    const absl::Status s = MakeDirs(theirs);
    const bool refused =
        s.code() == absl::StatusCode::kFailedPrecondition &&
        absl::StrContains(s.message(), "directory " + theirs + " belongs to user id 12345");
    _exit(refused && MakeDirs(roots).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  rmdir(theirs.c_str());
  rmdir(roots.c_str());
  rmdir(base);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot become nobody here";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // Root itself may write into its users' directories (a volume mounted into a container).
  EXPECT_TRUE(MakeDirs(TempDir()).ok());
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

// The names in `dir` that start with `prefix`.
std::vector<std::string> Names(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> found;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return found;
  while (dirent* e = readdir(d)) {
    if (absl::StartsWith(e->d_name, prefix)) found.push_back(e->d_name);
  }
  closedir(d);
  return found;
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
    EXPECT_TRUE(Names(dir, path.substr(dir.size() + 1) + ".tmp.").empty());
  }
  // A directory in the way of the rename: the error names it, the temporary is gone.
  const std::string blocked = dir + "/blocked";
  ASSERT_TRUE(MakeDirs(blocked + "/inside").ok());
  const absl::Status s = WriteFileAtomically(blocked, "x", "test file", /*durable=*/true);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "to " + blocked)) << s;
  EXPECT_TRUE(Names(dir, "blocked.tmp.").empty());
  // No directory to write into: the error names what was being written.
  const absl::Status missing = WriteFileAtomically(dir + "/no/such", "x", "index file", false);
  EXPECT_TRUE(absl::StrContains(missing.message(), "creating index file " + dir + "/no/such.tmp."))
      << missing;
}

// In a shared directory a name can be planted as a link to another user's file: it is refused,
// not followed, and the other file is untouched.
TEST(FilesTest, LinksPlantedUnderTheNameAreNotFollowed) {
  const std::string dir = TempDir() + "/links";
  ASSERT_TRUE(MakeDirs(dir).ok());
  const std::string victim = dir + "/victim";
  ASSERT_TRUE(WriteFileAtomically(victim, "precious", "test file", false).ok());
  const std::string log = dir + "/rank.0.log";
  ASSERT_EQ(symlink(victim.c_str(), log.c_str()), 0);
  for (bool append : {false, true}) {
    absl::StatusOr<int> fd = OpenForWriting(log, "log", append);
    EXPECT_FALSE(fd.ok());
    EXPECT_TRUE(absl::StrContains(fd.status().message(), "creating log " + log)) << fd.status();
  }
  EXPECT_EQ(ReadAll(victim), "precious");
  // A plain new file gets 0666 less the umask.
  const mode_t old_umask = umask(027);
  absl::StatusOr<int> fd = OpenForWriting(dir + "/plain.log", "log");
  umask(old_umask);
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  struct stat st;
  ASSERT_EQ(stat((dir + "/plain.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

// Temporary names are random beyond the pid: two hosts with equal pids writing one shared
// checkpoint directory do not open each other's temporary file.
TEST(FilesTest, TempFilesAreNewAndRandomlyNamed) {
  const std::string dir = TempDir() + "/temps";
  ASSERT_TRUE(MakeDirs(dir).ok());
  const std::string path = dir + "/ckpt-4.pt";
  absl::StatusOr<TempFile> a = CreateTempFile(path, "checkpoint");
  absl::StatusOr<TempFile> b = CreateTempFile(path, "checkpoint");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->path, b->path);
  EXPECT_TRUE(absl::StartsWith(a->path, path + ".tmp." + std::to_string(getpid()) + "."));
  EXPECT_EQ(TempFileTarget(a->path.substr(dir.size() + 1)), "ckpt-4.pt");
  EXPECT_EQ(TempFileTarget("ckpt-4.pt"), "");
  close(a->fd);
  close(b->fd);
  EXPECT_EQ(Names(dir, "ckpt-4.pt.tmp.").size(), 2u);
}

TEST(FilesTest, SelfExecutableIsThisTest) {
  EXPECT_TRUE(absl::EndsWith(SelfExecutable(), "/files_test")) << SelfExecutable();
}

TEST(FilesTest, DirNameIsTheDirectoryPartOrEmptyForABareName) {
  EXPECT_EQ(DirName("/ckpt/run7/ckpt-4.pt"), "/ckpt/run7");
  EXPECT_EQ(DirName("logs/metrics.jsonl"), "logs");
  EXPECT_EQ(DirName("/a"), "/");
  EXPECT_EQ(DirName("a"), "");
  EXPECT_EQ(DirName(""), "");
  // What callers do with it: the directories exist.
  EXPECT_TRUE(MakeDirs(DirName("/a")).ok());
  EXPECT_TRUE(MakeDirs(DirName("a")).ok());
}

}  // namespace
}  // namespace hvx
