#include "hvx/data/record.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/memory.h"
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

// ------------------------------------------------------------------------------------ RecordWriter

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
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("creating record file ", path));
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

// ------------------------------------------------------------------------------------ RecordReader

struct RecordReader::Inflater {
  z_stream z{};
  std::string in;
  bool stream_end = false;
};

RecordReader::RecordReader(std::string path, const RecordReaderOptions& options, int fd,
                           uint64_t file_size)
    : path_(std::move(path)), options_(options), fd_(fd), file_size_(file_size) {}

void RecordReader::FreeDeleter::operator()(char* p) const { std::free(p); }

RecordReader::~RecordReader() {
  ReleasePages(buffer_.release(), capacity_);
  if (inflater_) inflateEnd(&inflater_->z);
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(
    const std::string& path, const RecordReaderOptions& options) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("opening record file ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoToStatus(e, absl::StrCat("stat ", path));
  }
  std::unique_ptr<RecordReader> reader(
      new RecordReader(path, options, fd, static_cast<uint64_t>(st.st_size)));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (options.compression != Compression::kNone) {
    reader->inflater_ = std::make_unique<Inflater>();
    if (inflateInit2(&reader->inflater_->z, ZlibWindowBits(options.compression)) != Z_OK) {
      return absl::InternalError(absl::StrCat(path, ": inflateInit2 failed"));
    }
    reader->inflater_->in.resize(256 << 10);
  }
  reader->window_ = RoundUpToPages(std::max<size_t>(options.buffer_size, 1));
  return reader;
}

absl::StatusOr<size_t> RecordReader::ReadSource(char* dst, size_t n) {
  if (!inflater_) {
    while (true) {
      ssize_t r = ::read(fd_, dst, n);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno != EINTR) return ErrnoToStatus(errno, absl::StrCat("reading ", path_));
    }
  }
  z_stream& z = inflater_->z;
  z.next_out = reinterpret_cast<Bytef*>(dst);
  z.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
  while (z.avail_out > 0 && !inflater_->stream_end) {
    if (z.avail_in == 0) {
      ssize_t r;
      do {
        r = ::read(fd_, &inflater_->in[0], inflater_->in.size());
      } while (r < 0 && errno == EINTR);
      if (r < 0) return ErrnoToStatus(errno, absl::StrCat("reading ", path_));
      if (r == 0) {
        if (z.next_out == reinterpret_cast<Bytef*>(dst)) {
          return absl::DataLossError(
              absl::StrCat(path_, ": compressed ", CompressionName(options_.compression),
                           " stream ends without its trailer (truncated file)"));
        }
        break;
      }
      z.next_in = reinterpret_cast<Bytef*>(&inflater_->in[0]);
      z.avail_in = static_cast<uInt>(r);
    }
    int rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      inflater_->stream_end = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return absl::DataLossError(absl::StrCat(path_, ": corrupt ",
                                              CompressionName(options_.compression),
                                              " data: ", z.msg ? z.msg : "inflate failed"));
    }
  }
  return static_cast<size_t>(z.next_out - reinterpret_cast<Bytef*>(dst));
}

absl::StatusOr<size_t> RecordReader::Fill(size_t n) {
  const size_t avail = end_ - pos_;
  if (avail >= n) return avail;
  // The unread tail moves down to the start of the buffer, keeping its page phase. A hostile
  // length field is checked against the file size before we get here (uncompressed); for
  // compressed files the buffer grows only by what actually arrived (at most doubling per read).
  const size_t start = static_cast<size_t>(offset_ % kPageBytes);
  if (buffer_ == nullptr || start != pos_) {
    char* dst = buffer_.get();
    if (dst == nullptr || start + avail + window_ > capacity_) {
      // Room for a tail of up to a window (records up to that size never cause a regrowth).
      size_t capacity;
      dst = AllocatePages(std::max(start + avail, window_ + kPageBytes) + window_, &capacity);
      if (dst == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat(path_, ": cannot allocate a read buffer for ", avail + window_, " bytes"));
      }
      if (avail > 0) std::memcpy(dst + start, buffer_.get() + pos_, avail);
      buffer_.reset(dst);
      capacity_ = capacity;
    } else if (avail > 0) {
      std::memmove(dst + start, dst + pos_, avail);
    }
    pos_ = start;
    end_ = start + avail;
  }
  while (end_ - pos_ < n) {
    // Reads end on page boundaries of the stream: after the first, each one is a whole window of
    // page-aligned data.
    const size_t want = window_ - (end_ % kPageBytes);
    if (end_ + want > capacity_) {
      size_t capacity;
      char* bigger =
          AllocatePages(std::max(end_ + want, std::min(2 * capacity_, pos_ + n)), &capacity);
      if (bigger == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat(path_, ": cannot allocate a ", capacity, "-byte read buffer"));
      }
      std::memcpy(bigger + pos_, buffer_.get() + pos_, end_ - pos_);
      buffer_.reset(bigger);
      capacity_ = capacity;
    }
    HVX_ASSIGN_OR_RETURN(size_t got, ReadSource(buffer_.get() + end_, want));
    if (got == 0) break;
    end_ += got;
  }
  return end_ - pos_;
}

absl::Status RecordReader::Corruption(uint64_t record_offset, const std::string& reason) {
  absl::Status status = absl::DataLossError(reason);
  if (options_.on_corruption == CorruptionPolicy::kFail) return status;
  CorruptionReport report;
  report.path = path_;
  report.offset = record_offset;
  report.bytes_skipped = inflater_ ? -1 : static_cast<int64_t>(file_size_ - record_offset);
  report.reason = reason;
  HVX_LOG(WARNING) << "skipping the rest of " << path_ << " from offset " << record_offset << " ("
                   << (report.bytes_skipped < 0 ? std::string("unknown")
                                                : absl::StrCat(report.bytes_skipped))
                   << " bytes): " << reason;
  skipped_.push_back(std::move(report));
  done_ = true;
  return absl::OutOfRangeError(
      absl::StrCat(path_, ": end of file (rest skipped after corruption)"));
}

absl::Status RecordReader::ReadRecord(absl::string_view* record) {
  // The common case: a whole record in the buffer, both CRCs good. Anything else (end of buffer,
  // end of file, corruption, the skip policy) goes through ReadRecordSlow(), which checks again
  // and says what is wrong.
  const size_t avail = end_ - pos_;
  if (avail >= kRecordOverhead && !done_) {
    const char* framed = buffer_.get() + pos_;
    const uint64_t length = DecodeFixed64(framed);
    if (length <= avail - kRecordOverhead &&
        (!options_.verify_crc ||
         (LengthCrcMatches(framed) && DataCrcMatches(framed + kRecordHeaderSize, length)))) {
      *record = absl::string_view(framed + kRecordHeaderSize, length);
      const size_t total = static_cast<size_t>(length) + kRecordOverhead;
      pos_ += total;
      offset_ += total;
      return absl::OkStatus();
    }
  }
  return ReadRecordSlow(record);
}

absl::Status RecordReader::ReadRecordSlow(absl::string_view* record) {
  if (done_) return absl::OutOfRangeError(absl::StrCat(path_, ": end of file"));
  const uint64_t start = offset_;
  HVX_ASSIGN_OR_RETURN(size_t avail, Fill(kRecordHeaderSize));
  if (avail == 0) {
    done_ = true;
    return absl::OutOfRangeError(absl::StrCat(path_, ": end of file"));
  }
  if (avail < kRecordHeaderSize) {
    return Corruption(
        start,
        absl::StrCat(path_, ":", start, ": truncated record: the header needs ", kRecordHeaderSize,
                     " bytes, the file has ", avail, NotTfrecordHint(start)));
  }
  uint64_t length;
  absl::Status header =
      ParseRecordHeader(buffer_.get() + pos_, options_.verify_crc, path_, start, &length);
  if (!header.ok()) return Corruption(start, std::string(header.message()));
  if (inflater_ && length > (uint64_t{1} << 40)) {
    // A compressed stream has no known size; refuse lengths no real record has (1 TiB).
    return Corruption(start, absl::StrCat(path_, ":", start, ": record size too large: length ",
                                          "field ", length, NotTfrecordHint(start)));
  }
  const uint64_t left = inflater_ ? UINT64_MAX : file_size_ - start - kRecordHeaderSize;
  if (left < kRecordFooterSize || length > left - kRecordFooterSize) {
    return Corruption(
        start, absl::StrCat(path_, ":", start, ": truncated record: length field ", length,
                            " needs ", length, "+", kRecordFooterSize, " bytes, the file has ",
                            left, " left", NotTfrecordHint(start)));
  }
  const size_t total = kRecordHeaderSize + static_cast<size_t>(length) + kRecordFooterSize;
  HVX_ASSIGN_OR_RETURN(avail, Fill(total));
  if (avail < total) {
    return Corruption(start, absl::StrCat(path_, ":", start, ": truncated record: length field ",
                                          length, " but the stream ends ", avail,
                                          " bytes into the record", NotTfrecordHint(start)));
  }
  const char* payload = buffer_.get() + pos_ + kRecordHeaderSize;
  if (options_.verify_crc) {
    absl::Status data = CheckDataCrc(payload, length, path_, start);
    if (!data.ok()) return Corruption(start, std::string(data.message()));
  }
  *record = absl::string_view(payload, length);
  pos_ += total;
  offset_ += total;
  return absl::OkStatus();
}

absl::Status RecordReader::ReadRecord(std::string* record) {
  absl::string_view view;
  HVX_RETURN_IF_ERROR(ReadRecord(&view));
  record->assign(view.data(), view.size());
  return absl::OkStatus();
}

absl::Status RecordReader::Seek(uint64_t offset) {
  if (inflater_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": cannot seek in a ", CompressionName(options_.compression), " file"));
  }
  if (offset > file_size_) {
    return absl::OutOfRangeError(
        absl::StrCat(path_, ": seek to ", offset, " past the end of the file (", file_size_, ")"));
  }
  if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
    return ErrnoToStatus(errno, absl::StrCat("seeking in ", path_));
  }
  pos_ = end_ = 0;
  offset_ = offset;
  done_ = false;
  return absl::OkStatus();
}

// -------------------------------------------------------------------------------------- RecordFile

absl::StatusOr<std::unique_ptr<RecordFile>> RecordFile::Open(const std::string& path,
                                                             RecordFileAccess access) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("opening record file ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoToStatus(e, absl::StrCat("stat ", path));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
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
