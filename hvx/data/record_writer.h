// Writes record files: any payload (an Example, a TensorBoard Event, raw bytes) TFRecord-framed,
// optionally GZIP or ZLIB compressed, optionally with an index file beside it.
//
//   HVX_ASSIGN_OR_RETURN(auto writer, RecordWriter::Open("/d/train-00000-of-00001", {}));
//   HVX_RETURN_IF_ERROR(writer->Write(example_bytes));  // ... then writer->Close()
#ifndef HVX_DATA_RECORD_WRITER_H_
#define HVX_DATA_RECORD_WRITER_H_

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

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_RECORD_WRITER_H_
