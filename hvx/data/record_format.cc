#include "hvx/data/record_format.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hvx {
namespace data {
namespace {

std::string Hex(uint32_t v) { return absl::StrFormat("0x%08x", v); }

}  // namespace

absl::StatusOr<Compression> ParseCompression(absl::string_view name) {
  std::string upper = absl::AsciiStrToUpper(name);
  if (upper.empty() || upper == "NONE") return Compression::kNone;
  if (upper == "ZLIB") return Compression::kZlib;
  if (upper == "GZIP") return Compression::kGzip;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compression '", name, "'; expected \"\", NONE, ZLIB or GZIP"));
}

absl::string_view CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "NONE";
    case Compression::kZlib:
      return "ZLIB";
    case Compression::kGzip:
      return "GZIP";
  }
  return "?";
}

// 15 (a 32 KiB window), plus 16 to select the gzip wrapper instead of zlib's.
int ZlibWindowBits(Compression compression) {
  return compression == Compression::kGzip ? 15 + 16 : 15;
}

void AppendFramedRecord(absl::string_view payload, std::string* out) {
  char header[kRecordHeaderSize];
  EncodeFixed64(header, payload.size());
  EncodeFixed32(header + kRecordLengthSize, MaskCrc(Crc32c(header, kRecordLengthSize)));
  char footer[kRecordFooterSize];
  EncodeFixed32(footer, MaskCrc(Crc32c(payload.data(), payload.size())));
  out->append(header, sizeof(header));
  out->append(payload.data(), payload.size());
  out->append(footer, sizeof(footer));
}

absl::Status ParseRecordHeader(const char* header, bool verify_crc, const std::string& path,
                               uint64_t offset, uint64_t* length) {
  if (verify_crc && !LengthCrcMatches(header)) {
    return absl::DataLossError(
        absl::StrCat(path, ":", offset, ": corrupted record: length CRC mismatch (stored ",
                     Hex(UnmaskCrc(DecodeFixed32(header + kRecordLengthSize))), ", computed ",
                     Hex(Crc32c(header, kRecordLengthSize)), ")", NotTfrecordHint(offset)));
  }
  *length = DecodeFixed64(header);
  if (*length > kMaxRecordLength) {
    return absl::DataLossError(absl::StrCat(
        path, ":", offset, ": record size too large: length field ", *length,
        " is over the limit of ", kMaxRecordLength, " bytes", NotTfrecordHint(offset)));
  }
  return absl::OkStatus();
}

absl::Status CheckDataCrc(const char* payload, uint64_t length, const std::string& path,
                          uint64_t offset) {
  if (DataCrcMatches(payload, length)) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(path, ":", offset, ": corrupted record: data CRC mismatch over ", length,
                   " payload bytes (stored ", Hex(UnmaskCrc(DecodeFixed32(payload + length))),
                   ", computed ", Hex(Crc32c(payload, length)), ")"));
}

const char* NotTfrecordHint(uint64_t offset) {
  return offset == 0 ? " (is this a TFRecord file?)" : "";
}

}  // namespace data
}  // namespace hvx
