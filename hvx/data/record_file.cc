#include "hvx/data/record_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hvx/common/files.h"
#include "hvx/common/memory.h"
#include "hvx/common/status.h"

namespace hvx {
namespace data {

absl::StatusOr<std::unique_ptr<RecordFile>> RecordFile::Open(const std::string& path,
                                                             RecordFileAccess access) {
  HVX_ASSIGN_OR_RETURN(const ReadOnlyFile file, OpenReadOnly(path, "record file"));
  const int fd = file.fd;
  uint64_t size = file.size;
  const char* map = nullptr;
  if (access == RecordFileAccess::kMmap && size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) map = static_cast<const char*>(m);
  } else if (access == RecordFileAccess::kMemory && size > 0) {
    size_t capacity;
    char* bytes = AllocatePages(static_cast<size_t>(size), &capacity);
    if (bytes == nullptr) {
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": cannot hold the ", size, "-byte file in memory"));
    }
    uint64_t got = 0;
    while (got < size) {
      ssize_t r =
          ::read(fd, bytes + got, static_cast<size_t>(std::min<uint64_t>(size - got, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        int e = errno;
        std::free(bytes);
        ::close(fd);
        return ErrnoToStatus(e, absl::StrCat("reading ", path));
      }
      if (r == 0) break;  // shrank since fstat: what is there is what the index is checked against
      got += static_cast<uint64_t>(r);
    }
    size = got;
    map = bytes;
  }
  if (map == nullptr && access == RecordFileAccess::kMemory) access = RecordFileAccess::kPread;
  if (map == nullptr && access == RecordFileAccess::kMmap) access = RecordFileAccess::kPread;
  return std::unique_ptr<RecordFile>(new RecordFile(path, fd, size, map, access));
}

RecordFile::~RecordFile() {
  if (access_ == RecordFileAccess::kMmap) ::munmap(const_cast<char*>(map_), size_);
  if (access_ == RecordFileAccess::kMemory) std::free(const_cast<char*>(map_));
  ::close(fd_);
}

absl::Status RecordFile::CheckBounds(const RecordLocation& location) const {
  const uint64_t off = location.offset;
  if (off > size_ || location.length > size_ - off ||
      size_ - off - location.length < kRecordOverhead) {
    return absl::DataLossError(absl::StrCat(path_, ":", off, ": truncated record: a record of ",
                                            location.length, " payload bytes does not fit in the ",
                                            size_, "-byte file (stale index?)"));
  }
  return absl::OkStatus();
}

absl::Status RecordFile::Verify(const char* framed, const RecordLocation& location,
                                bool verify_crc) const {
  const uint64_t off = location.offset;
  uint64_t length;
  HVX_RETURN_IF_ERROR(ParseRecordHeader(framed, verify_crc, path_, off, &length));
  if (length != location.length) {
    return absl::DataLossError(absl::StrCat(path_, ":", off, ": length field says ", length,
                                            " bytes, the index says ", location.length,
                                            " (stale or wrong index?)"));
  }
  if (verify_crc) return CheckDataCrc(framed + kRecordHeaderSize, length, path_, off);
  return absl::OkStatus();
}

absl::Status RecordFile::ViewAt(const RecordLocation& location, bool verify_crc,
                                std::string* scratch, absl::string_view* payload) const {
  if (map_ == nullptr) {
    HVX_RETURN_IF_ERROR(CheckBounds(location));
    scratch->resize(FramedSize(location));
    return ViewInto(location, verify_crc, &(*scratch)[0], payload);
  }
  return ViewInto(location, verify_crc, nullptr, payload);
}

absl::Status RecordFile::ViewInto(const RecordLocation& location, bool verify_crc, char* buffer,
                                  absl::string_view* payload) const {
  HVX_RETURN_IF_ERROR(CheckBounds(location));
  const uint64_t off = location.offset;
  if (map_ != nullptr) {
    HVX_RETURN_IF_ERROR(Verify(map_ + off, location, verify_crc));
    *payload = absl::string_view(map_ + off + kRecordHeaderSize, location.length);
    return absl::OkStatus();
  }
  // One pread for header, payload and footer.
  const size_t want = FramedSize(location);
  size_t got = 0;
  while (got < want) {
    ssize_t r = ::pread(fd_, buffer + got, want - got, static_cast<off_t>(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("reading ", path_, " at offset ", off));
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(path_, ":", off, ": truncated record: the file ",
                                              "ended ", got, " bytes into the ", want,
                                              "-byte record (shrunk since it was opened?)"));
    }
    got += static_cast<size_t>(r);
  }
  HVX_RETURN_IF_ERROR(Verify(buffer, location, verify_crc));
  *payload = absl::string_view(buffer + kRecordHeaderSize, location.length);
  return absl::OkStatus();
}

absl::Status RecordFile::ReadAt(const RecordLocation& location, bool verify_crc,
                                std::string* payload) const {
  std::string scratch;
  absl::string_view view;
  HVX_RETURN_IF_ERROR(ViewAt(location, verify_crc, &scratch, &view));
  if (map_ != nullptr) {
    payload->assign(view.data(), view.size());
  } else {
    std::memmove(&scratch[0], view.data(), view.size());
    scratch.resize(view.size());
    *payload = std::move(scratch);
  }
  return absl::OkStatus();
}

}  // namespace data
}  // namespace hvx
