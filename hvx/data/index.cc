#include "hvx/data/index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/data/record_format.h"
#include "hvx/data/record_reader.h"

namespace hvx {
namespace data {

std::string IndexPathFor(const std::string& record_path) {
  return absl::StrCat(record_path, kIndexSuffix);
}

bool IsIndexPath(absl::string_view path) { return absl::EndsWith(path, kIndexSuffix); }

absl::Status WriteIndexFile(const std::string& index_path,
                            const std::vector<RecordLocation>& index) {
  std::string text;
  text.reserve(index.size() * 16);
  for (const RecordLocation& r : index) {
    absl::StrAppend(&text, r.offset, " ", r.length + kRecordOverhead, "\n");
  }
  return WriteFileAtomically(index_path, text, "index file", /*durable=*/false);
}

absl::StatusOr<std::vector<RecordLocation>> ParseIndex(absl::string_view contents,
                                                       absl::string_view index_path,
                                                       uint64_t record_file_size) {
  std::vector<RecordLocation> index;
  uint64_t expected = 0;
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint64_t offset, framed;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &offset) ||
        !absl::SimpleAtoi(parts[1], &framed)) {
      return absl::DataLossError(absl::StrCat(index_path, ":", line_no, ": expected \"<offset> ",
                                              "<size>\", got \"", line, "\""));
    }
    if (offset != expected || framed < kRecordOverhead) {
      return absl::DataLossError(
          absl::StrCat(index_path, ":", line_no, ": record at ", offset, " of size ", framed,
                       " does not follow the previous record (expected offset ", expected,
                       ", size >= 16); rebuild the index with inspect_records --index"));
    }
    if (framed - kRecordOverhead > kMaxRecordLength) {
      return absl::DataLossError(absl::StrCat(index_path, ":", line_no, ": record at ", offset,
                                              " of size ", framed, " is over the limit of ",
                                              kMaxRecordLength, " payload bytes"));
    }
    if (framed > record_file_size - offset) {
      return absl::DataLossError(absl::StrCat(index_path, ":", line_no, ": record at ", offset,
                                              " of size ", framed, " runs past the end of the ",
                                              record_file_size, "-byte record file"));
    }
    index.push_back({offset, framed - kRecordOverhead});
    expected = offset + framed;
  }
  if (expected != record_file_size) {
    return absl::DataLossError(absl::StrCat(index_path, ": the index covers ", expected,
                                            " bytes but the record file has ", record_file_size,
                                            "; rebuild it with inspect_records --index"));
  }
  return index;
}

absl::StatusOr<std::vector<RecordLocation>> ReadIndexFile(const std::string& index_path,
                                                          uint64_t record_file_size) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, absl::StrCat("opening index file ", index_path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return ErrnoToStatus(errno, absl::StrCat("reading index file ", index_path));
  return ParseIndex(contents.str(), index_path, record_file_size);
}

absl::StatusOr<std::vector<RecordLocation>> BuildIndex(const std::string& record_path,
                                                       bool verify_payload) {
  std::vector<RecordLocation> index;
  if (verify_payload) {
    HVX_ASSIGN_OR_RETURN(auto reader, RecordReader::Open(record_path, {}));
    while (true) {
      uint64_t offset = reader->offset();
      absl::string_view record;
      absl::Status s = reader->ReadRecord(&record);
      if (absl::IsOutOfRange(s)) break;
      HVX_RETURN_IF_ERROR(s);
      index.push_back({offset, record.size()});
    }
    return index;
  }
  HVX_ASSIGN_OR_RETURN(const ReadOnlyFile file, OpenReadOnly(record_path, "record file"));
  const int fd = file.fd;
  uint64_t offset = 0;
  const uint64_t size = file.size;
  absl::Status status;
  while (offset < size) {
    char header[kRecordHeaderSize];
    if (size - offset < kRecordHeaderSize ||
        ::pread(fd, header, kRecordHeaderSize, static_cast<off_t>(offset)) !=
            static_cast<ssize_t>(kRecordHeaderSize)) {
      status = absl::DataLossError(
          absl::StrCat(record_path, ":", offset, ": truncated record: the header needs ",
                       kRecordHeaderSize, " bytes, the file has ", size - offset));
      break;
    }
    uint64_t length;
    status = ParseRecordHeader(header, /*verify_crc=*/true, record_path, offset, &length);
    if (!status.ok()) break;
    const uint64_t left = size - offset - kRecordHeaderSize;
    if (left < kRecordFooterSize || length > left - kRecordFooterSize) {
      status = absl::DataLossError(absl::StrCat(
          record_path, ":", offset, ": truncated record: length field ", length, " needs ", length,
          "+", kRecordFooterSize, " bytes, the file has ", left, " left"));
      break;
    }
    index.push_back({offset, length});
    offset += length + kRecordOverhead;
  }
  ::close(fd);
  HVX_RETURN_IF_ERROR(status);
  return index;
}

absl::StatusOr<std::vector<RecordLocation>> LoadOrBuildIndex(const std::string& record_path) {
  struct stat st;
  if (::stat(record_path.c_str(), &st) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("stat record file ", record_path));
  }
  const std::string index_path = IndexPathFor(record_path);
  if (::access(index_path.c_str(), R_OK) == 0) {
    return ReadIndexFile(index_path, static_cast<uint64_t>(st.st_size));
  }
  return BuildIndex(record_path, /*verify_payload=*/false);
}

}  // namespace data
}  // namespace hvx
