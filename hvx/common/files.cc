#include "hvx/common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/random_hex.h"
#include "hvx/common/status.h"

namespace hvx {

absl::Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0750) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("creating directory ", part));
    }
  }
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat ", dir));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  }
  // Root may write into its users' directories (a volume mounted into a container keeps its
  // owner on the host); any other user only into its own or root's.
  if (geteuid() != 0 && st.st_uid != geteuid() && st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "directory ", dir, " belongs to user id ", st.st_uid, ", not this process's (", geteuid(),
        "): that user could replace or read what is written there; use a directory of your own, "
        "or give this one to this user (chown)"));
  }
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "directory %s is writable by every user (mode %04o): any of them could replace what is "
        "written there; remove that permission (chmod o-w) or use a directory of your own",
        dir, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReadOnlyFile> OpenReadOnly(const std::string& path, absl::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("opening ", what, " ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return ErrnoToStatus(e, absl::StrCat("stat ", path));
  }
  return ReadOnlyFile{fd, static_cast<uint64_t>(st.st_size)};
}

bool WriteFully(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

namespace {

absl::Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoToStatus(err, absl::StrCat("fsync ", path));
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  return ErrnoToStatus(errno, absl::StrCat("renaming ", from, " to ", to));
}

}  // namespace

absl::Status CommitFile(const std::string& tmp_path, const std::string& path) {
  HVX_RETURN_IF_ERROR(FsyncPath(tmp_path));
  HVX_RETURN_IF_ERROR(Rename(tmp_path, path));
  const std::string dir = DirName(path);
  return FsyncPath(dir.empty() ? "." : dir);
}

absl::StatusOr<int> OpenForWriting(const std::string& path, absl::string_view what, bool append) {
  const int fd =
      ::open(path.c_str(),
             O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (append ? O_APPEND : O_TRUNC), 0640);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("creating ", what, " ", path));
  return fd;
}

absl::StatusOr<TempFile> CreateTempFile(const std::string& path, absl::string_view what) {
  TempFile tmp;
  tmp.path = absl::StrCat(path, ".tmp.", ::getpid(), ".", RandomHex());
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (tmp.fd < 0) return ErrnoToStatus(errno, absl::StrCat("creating ", what, " ", tmp.path));
  return tmp;
}

absl::string_view TempFileTarget(absl::string_view name) {
  const size_t tmp = name.rfind(".tmp.");
  return tmp == absl::string_view::npos ? absl::string_view() : name.substr(0, tmp);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view data,
                                 absl::string_view what, bool durable) {
  HVX_ASSIGN_OR_RETURN(TempFile file, CreateTempFile(path, what));
  const int fd = file.fd;
  const std::string& tmp = file.path;
  absl::Status status;
  if (!WriteFully(fd, data))
    status = ErrnoToStatus(errno, absl::StrCat("writing ", what, " ", tmp));
  if (::close(fd) != 0 && status.ok()) {
    status = ErrnoToStatus(errno, absl::StrCat("closing ", what, " ", tmp));
  }
  if (status.ok()) status = durable ? CommitFile(tmp, path) : Rename(tmp, path);
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

std::string DirName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return "";
  return slash == 0 ? "/" : std::string(path.substr(0, slash));
}

absl::StatusOr<std::string> ReadFileFromDisk(const std::string& path) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once (and is refused below).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  absl::Cleanup closer = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", path, ": not a regular file"));
  }
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxLauncherFileBytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read ", path, ": larger than ", kMaxLauncherFileBytes, " bytes"));
    }
  }
}

std::string SelfExecutable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace hvx
