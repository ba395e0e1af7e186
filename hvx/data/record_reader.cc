#include "hvx/data/record_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/memory.h"
#include "hvx/common/status.h"

namespace hvx {
namespace data {

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
  HVX_ASSIGN_OR_RETURN(const ReadOnlyFile file, OpenReadOnly(path, "record file"));
  const int fd = file.fd;
  std::unique_ptr<RecordReader> reader(new RecordReader(path, options, fd, file.size));
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

}  // namespace data
}  // namespace hvx
