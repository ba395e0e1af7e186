// TFRecord files: writing, sequential reading (plain, GZIP, ZLIB) and random access by offset.
//
//   HVX_ASSIGN_OR_RETURN(auto writer, RecordWriter::Open("/d/train-00000-of-00001", {}));
//   HVX_RETURN_IF_ERROR(writer->Write(example_bytes));  // ... then writer->Close()
//
// The file format (TFRecord framing, optionally GZIP or ZLIB around it) is in record_format.h.
//
// Every corruption is a DataLoss status whose message reads "<path>:<offset>: <what is wrong>",
// where <offset> is the start of the damaged record. Nothing is skipped unless the caller asks for
// it (CorruptionPolicy::kSkipRestOfFile), and then every skip is recorded in skipped().
#ifndef HVX_DATA_RECORD_H_
#define HVX_DATA_RECORD_H_

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

struct RecordWriterOptions {
  Compression compression = Compression::kNone;
  // Writes IndexPathFor(path) on Close() (uncompressed files only).
  bool write_index = false;
  // Bytes buffered before they are handed to the OS; Flush() hands them over earlier.
  size_t buffer_size = 256 << 10;
};

// Writes one record file. Not thread-safe.
class RecordWriter {
 public:
  // Creates (or truncates) `path`.
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Open(const std::string& path,
                                                            const RecordWriterOptions& options);
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;
  // Closes the file if Close() was not called; an error is then logged, not returned.
  ~RecordWriter();

  // Appends one record with any payload (an Example, a TensorBoard Event, raw bytes).
  absl::Status Write(absl::string_view payload);
  // Hands everything written so far to the OS, so that another process reading the file sees
  // whole records (for compressed files: a zlib sync point).
  absl::Status Flush();
  // Flush() and fsync(): the records survive a machine crash.
  absl::Status Sync();
  // Flushes, finishes the compressed stream, writes the index if asked, closes. Idempotent.
  absl::Status Close();

  const std::string& path() const { return path_; }
  int64_t num_records() const { return num_records_; }
  // Bytes of framed records written (uncompressed stream).
  uint64_t bytes_written() const { return offset_; }

 private:
  friend class RecordWriterTestPeer;  // record_test.cc lowers deflate_piece_

  RecordWriter(std::string path, const RecordWriterOptions& options, int fd);
  // Writes n bytes (any size) of the framed stream, compressing them if asked.
  absl::Status WriteToFile(const char* data, size_t n);
  absl::Status Drain(int zlib_flush);

  const std::string path_;
  const RecordWriterOptions options_;
  int fd_;
  std::string buffer_;
  struct Deflater;
  std::unique_ptr<Deflater> deflater_;
  uint64_t offset_ = 0;
  int64_t num_records_ = 0;
  std::vector<uint64_t> index_offsets_;
  std::vector<uint64_t> index_lengths_;
  // Most bytes handed to one deflate() call: zlib counts its input in a 32-bit uInt.
  size_t deflate_piece_;
};

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
  // Page-aligned; the byte at stream offset x sits at an address congruent to x modulo the page
  // size, so that reads copy whole pages into whole pages, as a plain read() loop does.
  std::unique_ptr<char, FreeDeleter> buffer_;
  size_t capacity_ = 0;
  size_t window_ = 0;  // bytes asked of the source per read (options.buffer_size, page multiple)
  size_t pos_ = 0;     // next unread byte in buffer_
  size_t end_ = 0;     // end of valid bytes in buffer_
  uint64_t offset_ = 0;
  bool done_ = false;
  std::vector<CorruptionReport> skipped_;
};

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

// Reads records at known offsets; safe to use from many threads at once. pread() by default;
// numbers for the three kinds of access in hvx/data/README.md.
class RecordFile {
 public:
  static absl::StatusOr<std::unique_ptr<RecordFile>> Open(const std::string& path,
                                                          RecordFileAccess access);
  static absl::StatusOr<std::unique_ptr<RecordFile>> Open(const std::string& path,
                                                          bool use_mmap = false) {
    return Open(path, use_mmap ? RecordFileAccess::kMmap : RecordFileAccess::kPread);
  }
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

#endif  // HVX_DATA_RECORD_H_
