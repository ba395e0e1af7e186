// Reads a record file front to back: plain, GZIP or ZLIB, checking both CRCs of every record.
//
//   HVX_ASSIGN_OR_RETURN(auto reader, RecordReader::Open(path, {}));
//   absl::string_view record;
//   absl::Status s;
//   while ((s = reader->ReadRecord(&record)).ok()) Use(record);
//   if (!absl::IsOutOfRange(s)) return s;  // OutOfRange: the file ended at a record boundary
//
// Every corruption is a DataLoss status whose message reads "<path>:<offset>: <what is wrong>",
// where <offset> is the start of the damaged record. Nothing is skipped unless the caller asks for
// it (CorruptionPolicy::kSkipRestOfFile), and then every skip is recorded in skipped().
#ifndef HVX_DATA_RECORD_READER_H_
#define HVX_DATA_RECORD_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/data/record_format.h"

namespace hvx {
namespace data {

enum class CorruptionPolicy {
  kFail,            // a corrupt record is a DataLoss error (the default)
  kSkipRestOfFile,  // stop reading the file, record what was skipped, report end of file
};

// What a reader skipped under CorruptionPolicy::kSkipRestOfFile.
struct CorruptionReport {
  std::string path;
  uint64_t offset = 0;        // start of the first unread record
  int64_t bytes_skipped = 0;  // from offset to the end of the file; -1 when unknown (compressed)
  std::string reason;         // the DataLoss message that caused the skip
};

struct RecordReaderOptions {
  Compression compression = Compression::kNone;
  bool verify_crc = true;
  size_t buffer_size = 256 << 10;
  CorruptionPolicy on_corruption = CorruptionPolicy::kFail;
};

// Reads one record file front to back. Not thread-safe.
class RecordReader {
 public:
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(const std::string& path,
                                                            const RecordReaderOptions& options);
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;
  ~RecordReader();

  // OK: *record views the next payload, valid until the next call on this reader.
  // OutOfRange: the file ended cleanly at a record boundary (or the rest was skipped by policy).
  // DataLoss: corruption, "<path>:<offset>: <reason>". Other codes: I/O errors.
  absl::Status ReadRecord(absl::string_view* record);
  // As above, copying the payload into *record.
  absl::Status ReadRecord(std::string* record);
  // Continues at `offset`, which must be the start of a record (e.g. from an index).
  // Uncompressed files only.
  absl::Status Seek(uint64_t offset);

  // Offset of the next record in the (uncompressed) stream.
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }
  const std::vector<CorruptionReport>& skipped() const { return skipped_; }

 private:
  struct FreeDeleter {
    void operator()(char* p) const;
  };
  RecordReader(std::string path, const RecordReaderOptions& options, int fd, uint64_t file_size);
  // Everything ReadRecord() does, with every check and error message; ReadRecord() itself only
  // handles the common case of a whole, intact record already in the buffer.
  absl::Status ReadRecordSlow(absl::string_view* record);
  // Makes at least `n` bytes available at buffer_[pos_]; returns how many are (fewer at EOF).
  absl::StatusOr<size_t> Fill(size_t n);
  absl::StatusOr<size_t> ReadSource(char* dst, size_t n);
  absl::Status Corruption(uint64_t record_offset, const std::string& reason);

  const std::string path_;
  const RecordReaderOptions options_;
  int fd_;
  const uint64_t file_size_;
  struct Inflater;
  std::unique_ptr<Inflater> inflater_;
  // From hvx::AllocatePages, and given back with ReleasePages when the reader goes, so that the
  // thread's next reader can take it. The byte at stream offset x sits at an address congruent to x
  // modulo the page size, so that reads copy whole pages into whole pages, as a plain read() loop
  // does.
  std::unique_ptr<char, FreeDeleter> buffer_;
  size_t capacity_ = 0;
  size_t window_ = 0;  // bytes asked of the source per read (options.buffer_size, page multiple)
  size_t pos_ = 0;     // next unread byte in buffer_
  size_t end_ = 0;     // end of valid bytes in buffer_
  uint64_t offset_ = 0;
  bool done_ = false;
  std::vector<CorruptionReport> skipped_;
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_RECORD_READER_H_
