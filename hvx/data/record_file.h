// Random access to the records of an uncompressed record file by their place in it (from an index
// file, see index.h), from many threads at once.
//
//   HVX_ASSIGN_OR_RETURN(auto file, RecordFile::Open(path, RecordFileAccess::kPread));
//   HVX_RETURN_IF_ERROR(file->ReadAt(index[k], /*verify_crc=*/true, &payload));  // record k
#ifndef HVX_DATA_RECORD_FILE_H_
#define HVX_DATA_RECORD_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/data/record_format.h"

namespace hvx {
namespace data {

// One record's place in an uncompressed file.
struct RecordLocation {
  uint64_t offset = 0;  // start of the framed record
  uint64_t length = 0;  // payload bytes (the record occupies length + kRecordOverhead bytes)
};

// How RecordFile gets at the bytes.
enum class RecordFileAccess {
  // One pread() per record (header, payload and footer together) into memory the caller owns.
  // A file that shrinks while it is read gives a DataLoss "truncated record" error.
  kPread,
  // The file is mapped and records are viewed in place, without a system call or a copy. A mapped
  // file that is truncated (rewritten in place, a shard regenerated during a run) makes the next
  // access to a lost page raise SIGBUS, which kills the process. Checking the size before handing
  // out bytes cannot prevent that: the decoder touches the bytes later, from another thread, and
  // the file can shrink in between. Only for files nothing rewrites while the job runs.
  kMmap,
  // The whole file is read into memory at Open() (its size in RAM, huge pages) and records are
  // viewed there: no system call per record and nothing a later truncation can break.
  kMemory,
};

// Reads records at known offsets; safe to use from many threads at once.
class RecordFile {
 public:
  // Opens `path` for `access`; kPread is the one that survives the file changing during a run.
  // An empty file is read with kPread whatever was asked, and so is one that cannot be mapped for
  // kMmap; access() says which applies.
  static absl::StatusOr<std::unique_ptr<RecordFile>> Open(const std::string& path,
                                                          RecordFileAccess access);
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;
  ~RecordFile();

  // Reads the record at `location` into *payload (resized to location.length). The stored length
  // must equal location.length; with verify_crc both CRCs are checked. DataLoss on any mismatch.
  absl::Status ReadAt(const RecordLocation& location, bool verify_crc, std::string* payload) const;
  // The same without a copy when the file is mapped or in memory (mapped() is true): *payload then
  // points into this RecordFile (valid while it lives); otherwise the bytes are read into *scratch
  // and *payload views it.
  absl::Status ViewAt(const RecordLocation& location, bool verify_crc, std::string* scratch,
                      absl::string_view* payload) const;
  // As ViewAt, reading into `buffer` (FramedSize(location) bytes, unused when mapped): lets a
  // caller read many records into one allocation.
  absl::Status ViewInto(const RecordLocation& location, bool verify_crc, char* buffer,
                        absl::string_view* payload) const;
  static size_t FramedSize(const RecordLocation& location) {
    return static_cast<size_t>(location.length) + kRecordOverhead;
  }

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Records are viewed in place (kMmap or kMemory; kMmap falls back to pread() when mapping fails).
  bool mapped() const { return map_ != nullptr; }
  RecordFileAccess access() const { return access_; }

 private:
  RecordFile(std::string path, int fd, uint64_t size, const char* map, RecordFileAccess access)
      : path_(std::move(path)), fd_(fd), size_(size), map_(map), access_(access) {}
  absl::Status CheckBounds(const RecordLocation& location) const;
  absl::Status Verify(const char* framed, const RecordLocation& location, bool verify_crc) const;

  const std::string path_;
  const int fd_;
  const uint64_t size_;
  const char* const map_;  // the mapping or the loaded bytes; nullptr for pread()
  const RecordFileAccess access_;
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_RECORD_FILE_H_
