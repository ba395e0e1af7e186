// Small file-system jobs that several packages need, done one way.
//
//   HVX_RETURN_IF_ERROR(hvx::MakeDirs("/ckpt/run7"));
//   if (!hvx::WriteFully(fd, line)) return hvx::ErrnoToStatus(errno, "writing the log");
#ifndef HVX_COMMON_FILES_H_
#define HVX_COMMON_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hvx {

// Creates `dir` and its missing parents (mode 0750 less the umask: checkpoints and logs are not
// every local user's to read). OK when they exist or `dir` is empty; else the errno of the mkdir
// that failed, naming that directory. An existing `dir` must be fit to write into: owned by this
// user or root (for root: anyone, as a volume mounted into a container keeps its owner on the
// host) and not writable by every user (unless sticky, as /tmp), else
// FailedPrecondition naming the directory, its owner or mode, and the fix. One that another user
// made first (in /tmp, on a shared volume) could have its files replaced or read by them.
absl::Status MakeDirs(const std::string& dir);

// Writes all of `data` to `fd`, continuing after short writes and EINTR. False, with errno set,
// when a write fails.
bool WriteFully(int fd, absl::string_view data);

// Opens `path` to write (truncated, or appended to with `append`), as every log, output and data
// file hvx writes is opened: O_NOFOLLOW, so that a symbolic link planted under the name in a shared
// directory is refused (ELOOP) instead of followed into another user's file, and mode 0640 less
// the process's umask (readable by the group, as a job's other tools and users may need). Errors
// carry the errno and name `what` and the path. The caller owns the descriptor.
absl::StatusOr<int> OpenForWriting(const std::string& path, absl::string_view what,
                                   bool append = false);

// A new file to become `path` later (CommitFile): "<path>.tmp.<pid>.<RandomHex()>", created with
// O_EXCL and O_NOFOLLOW (never an existing file or a link, whatever another host with the same pid
// writes into a shared directory), mode as OpenForWriting's. The caller writes and closes `fd`.
struct TempFile {
  int fd = -1;
  std::string path;
};
absl::StatusOr<TempFile> CreateTempFile(const std::string& path, absl::string_view what);

// The name a temporary of CreateTempFile's stands in for: "ckpt-4.pt" for
// "ckpt-4.pt.tmp.123.0a1b...", or "" when `name` is not "<name>.tmp.<anything>".
absl::string_view TempFileTarget(absl::string_view name);

// Makes the finished temporary file `tmp_path` the file `path`, durably: fsync of the data, the
// rename, fsync of the directory, so that even a machine's crash leaves the old file or the new
// one under `path`. Errors carry the errno and name the paths.
absl::Status CommitFile(const std::string& tmp_path, const std::string& path);

// Replaces `path` with a file holding `data` without ever leaving a partial file under that
// name: written to a CreateTempFile, then renamed (through CommitFile when `durable`); the
// temporary is removed when a step fails. Errors name `what` ("index file") and the path.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view data,
                                 absl::string_view what, bool durable);

// A file opened read-only (O_CLOEXEC): the caller owns `fd` and closes it.
struct ReadOnlyFile {
  int fd = -1;
  uint64_t size = 0;
};
// Opens `path` and reads its size. Errors carry the errno and name the path: "opening <what>
// <path>", "stat <path>".
absl::StatusOr<ReadOnlyFile> OpenReadOnly(const std::string& path, absl::string_view what);

// The directory part of `path`, as dirname(1) but "" for a bare name: "/ckpt" for
// "/ckpt/ckpt-4.pt",
// "/" for "/a", "" for "a" (the current directory).
std::string DirName(absl::string_view path);

// Reads a whole file from disk: a regular file (procfs files included) of at most
// kMaxLauncherFileBytes. Anything else is an error at once: a FIFO planted under a name hvx
// reads (a predictable path in /tmp) would block the read forever, a huge file fill memory.
inline constexpr size_t kMaxLauncherFileBytes = size_t{1} << 20;
absl::StatusOr<std::string> ReadFileFromDisk(const std::string& path);

// The running executable's path (/proc/self/exe), or "" when it cannot be read.
std::string SelfExecutable();

}  // namespace hvx

#endif  // HVX_COMMON_FILES_H_
