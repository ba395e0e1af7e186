#include "hvx/data/record_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/data/index.h"

namespace hvx {
namespace data {
namespace {

absl::Status FullWrite(int fd, const char* data, size_t n, const std::string& path) {
  if (!WriteFully(fd, absl::string_view(data, n)))
    return ErrnoToStatus(errno, absl::StrCat("writing ", path));
  return absl::OkStatus();
}

}  // namespace

struct RecordWriter::Deflater {
  z_stream z{};
  std::string out;
};

RecordWriter::RecordWriter(std::string path, const RecordWriterOptions& options, int fd)
    : path_(std::move(path)),
      options_(options),
      fd_(fd),
      deflate_piece_(std::numeric_limits<uInt>::max()) {}

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Open(
    const std::string& path, const RecordWriterOptions& options) {
  if (options.write_index && options.compression != Compression::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": an index cannot be written for a ", CompressionName(options.compression),
        " file (compressed files have no record offsets)"));
  }
  HVX_ASSIGN_OR_RETURN(const int fd, OpenForWriting(path, "record file"));
  std::unique_ptr<RecordWriter> writer(new RecordWriter(path, options, fd));
  if (options.compression != Compression::kNone) {
    writer->deflater_ = std::make_unique<Deflater>();
    if (deflateInit2(&writer->deflater_->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED,
                     ZlibWindowBits(options.compression), 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      return absl::InternalError(absl::StrCat(path, ": deflateInit2 failed"));
    }
    writer->deflater_->out.resize(256 << 10);
  }
  writer->buffer_.reserve(options.buffer_size + 64);
  return writer;
}

RecordWriter::~RecordWriter() {
  absl::Status s = Close();
  if (!s.ok()) HVX_LOG(ERROR) << "closing record file: " << s.message();
}

absl::Status RecordWriter::Write(absl::string_view payload) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": write after Close()"));
  if (payload.size() > kMaxRecordLength) {
    // A record no reader of hvx's would take back.
    return absl::InvalidArgumentError(absl::StrCat(path_, ": a record of ", payload.size(),
                                                   " bytes is over the limit of ", kMaxRecordLength,
                                                   " bytes"));
  }
  if (options_.write_index) {
    index_offsets_.push_back(offset_);
    index_lengths_.push_back(payload.size());
  }
  if (payload.size() >= options_.buffer_size) {
    // Large payloads go straight to the file instead of through the buffer.
    std::string framed;
    framed.reserve(payload.size() + kRecordOverhead);
    HVX_RETURN_IF_ERROR(Drain(Z_NO_FLUSH));
    AppendFramedRecord(payload, &framed);
    HVX_RETURN_IF_ERROR(WriteToFile(framed.data(), framed.size()));
  } else {
    AppendFramedRecord(payload, &buffer_);
    if (buffer_.size() >= options_.buffer_size) HVX_RETURN_IF_ERROR(Drain(Z_NO_FLUSH));
  }
  offset_ += payload.size() + kRecordOverhead;
  ++num_records_;
  return absl::OkStatus();
}

absl::Status RecordWriter::WriteToFile(const char* data, size_t n) {
  if (!deflater_) return FullWrite(fd_, data, n, path_);
  z_stream& z = deflater_->z;
  while (n > 0) {
    const size_t piece = std::min(n, deflate_piece_);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    z.avail_in = static_cast<uInt>(piece);
    do {
      z.next_out = reinterpret_cast<Bytef*>(&deflater_->out[0]);
      z.avail_out = static_cast<uInt>(deflater_->out.size());
      if (deflate(&z, Z_NO_FLUSH) == Z_STREAM_ERROR) {
        return absl::InternalError(absl::StrCat(path_, ": deflate failed"));
      }
      HVX_RETURN_IF_ERROR(
          FullWrite(fd_, deflater_->out.data(), deflater_->out.size() - z.avail_out, path_));
    } while (z.avail_in > 0);
    data += piece;
    n -= piece;
  }
  return absl::OkStatus();
}

// Writes the buffer out; for compressed files also runs deflate with `zlib_flush`.
absl::Status RecordWriter::Drain(int zlib_flush) {
  if (!buffer_.empty()) {
    HVX_RETURN_IF_ERROR(WriteToFile(buffer_.data(), buffer_.size()));
    buffer_.clear();
  }
  if (deflater_ && zlib_flush != Z_NO_FLUSH) {
    z_stream& z = deflater_->z;
    z.avail_in = 0;
    int rc;
    do {
      z.next_out = reinterpret_cast<Bytef*>(&deflater_->out[0]);
      z.avail_out = static_cast<uInt>(deflater_->out.size());
      rc = deflate(&z, zlib_flush);
      if (rc == Z_STREAM_ERROR) return absl::InternalError(absl::StrCat(path_, ": deflate failed"));
      HVX_RETURN_IF_ERROR(
          FullWrite(fd_, deflater_->out.data(), deflater_->out.size() - z.avail_out, path_));
    } while (z.avail_out == 0 || (zlib_flush == Z_FINISH && rc != Z_STREAM_END));
  }
  return absl::OkStatus();
}

absl::Status RecordWriter::Flush() {
  if (fd_ < 0) return absl::OkStatus();
  return Drain(Z_SYNC_FLUSH);
}

absl::Status RecordWriter::Sync() {
  HVX_RETURN_IF_ERROR(Flush());
  if (fd_ >= 0 && ::fsync(fd_) != 0) return ErrnoToStatus(errno, absl::StrCat("fsync ", path_));
  return absl::OkStatus();
}

absl::Status RecordWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status status = Drain(deflater_ ? Z_FINISH : Z_NO_FLUSH);
  if (deflater_) deflateEnd(&deflater_->z);
  if (::close(fd_) != 0 && status.ok())
    status = ErrnoToStatus(errno, absl::StrCat("closing ", path_));
  fd_ = -1;
  if (status.ok() && options_.write_index) {
    std::vector<RecordLocation> index(index_offsets_.size());
    for (size_t i = 0; i < index.size(); ++i) index[i] = {index_offsets_[i], index_lengths_[i]};
    status = WriteIndexFile(IndexPathFor(path_), index);
  }
  return status;
}

}  // namespace data
}  // namespace hvx
