// The TFRecord framing, which RecordWriter writes and RecordReader, RecordFile and BuildIndex read:
// the layout of a record, its fixed-width fields, the masked CRCs, and the checks whose errors
// every reader reports alike.
//
//   std::string file;
//   AppendFramedRecord("hello", &file);  // 12 header bytes, "hello", 4 footer bytes
//
// A file is records back to back, with no file header or footer; a valid file ends exactly at a
// record boundary. One record:
//
//   offset      size    field
//   0           8       length of the payload, uint64 little-endian
//   8           4       MaskCrc(Crc32c(the 8 length bytes)), uint32 little-endian
//   12          length  payload
//   12+length   4       MaskCrc(Crc32c(payload)), uint32 little-endian
//
// Compression (GZIP or ZLIB) wraps the whole framed stream; offsets then refer to the
// uncompressed stream, and compressed files cannot be read at random offsets.
//
// Corruption is a DataLoss status whose message reads "<path>:<offset>: <what is wrong>", where
// <offset> is the start of the damaged record.
#ifndef HVX_DATA_RECORD_FORMAT_H_
#define HVX_DATA_RECORD_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/data/crc32c.h"

namespace hvx {
namespace data {

constexpr size_t kRecordLengthSize = 8;
constexpr size_t kRecordHeaderSize = kRecordLengthSize + 4;  // length, its masked CRC
constexpr size_t kRecordFooterSize = 4;                      // the payload's masked CRC
constexpr size_t kRecordOverhead = kRecordHeaderSize + kRecordFooterSize;
// The largest payload hvx writes or reads (1 GiB). The length field is the file's own word: a
// sparse file claims terabytes for free, and every reader allocated what a record claimed before
// its CRC could say otherwise (the host out of memory, or std::bad_alloc ending the rank).
// protobuf parses no Example of 2 GiB or more anyway.
constexpr uint64_t kMaxRecordLength = uint64_t{1} << 30;

enum class Compression { kNone, kZlib, kGzip };

// "" or "NONE", "ZLIB", "GZIP" (any case), as TensorFlow's compression_type spells them.
absl::StatusOr<Compression> ParseCompression(absl::string_view name);
absl::string_view CompressionName(Compression compression);
// The windowBits zlib's deflateInit2 and inflateInit2 take for `compression` (not kNone).
int ZlibWindowBits(Compression compression);

// Little-endian fixed-width fields.
inline void EncodeFixed64(char* dst, uint64_t value) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
inline void EncodeFixed32(char* dst, uint32_t value) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
inline uint64_t DecodeFixed64(const char* p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
#else
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
#endif
}
inline uint32_t DecodeFixed32(const char* p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
#endif
}

// TFRecord stores CRCs masked, because computing a CRC over data that embeds CRCs is weak:
// masked = rotate_right(crc, 15) + 0xa282ead8.
constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;

inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }

inline uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rot = masked - kCrcMaskDelta;
  return (rot >> 17) | (rot << 15);
}

// Appends the framing of one record holding `payload` to `out`.
void AppendFramedRecord(absl::string_view payload, std::string* out);

// Whether the length CRC of the record header at `header` (kRecordHeaderSize bytes) matches.
inline bool LengthCrcMatches(const char* header) {
  return UnmaskCrc(DecodeFixed32(header + kRecordLengthSize)) == Crc32cOfFixed64(header);
}

// Whether the data CRC stored right after the `length` bytes at `payload` matches them.
inline bool DataCrcMatches(const char* payload, uint64_t length) {
  return UnmaskCrc(DecodeFixed32(payload + length)) == Crc32c(payload, length);
}

// Parses and checks the record header at `header`: on success *length is the payload size.
// DataLoss "<path>:<offset>: corrupted record: length CRC mismatch (stored 0x..., computed 0x...)"
// (and NotTfrecordHint(offset)) when verify_crc and the length CRC does not match, and
// "<path>:<offset>: record size too large: length field <n> is over the limit of 1073741824
// bytes" past kMaxRecordLength. `path` and `offset` only name the record.
absl::Status ParseRecordHeader(const char* header, bool verify_crc, const std::string& path,
                               uint64_t offset, uint64_t* length);

// Checks the data CRC stored right after the `length` bytes at `payload`. DataLoss
// "<path>:<offset>: corrupted record: data CRC mismatch over <length> payload bytes (stored
// 0x..., computed 0x...)" when it does not match. `path` and `offset` only name the record.
absl::Status CheckDataCrc(const char* payload, uint64_t length, const std::string& path,
                          uint64_t offset);

// " (is this a TFRecord file?)" for a framing error at offset 0, where a file that is not
// TFRecord at all fails; "" elsewhere.
const char* NotTfrecordHint(uint64_t offset);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_RECORD_FORMAT_H_
