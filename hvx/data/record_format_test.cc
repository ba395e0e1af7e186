#include "hvx/data/record_format.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/data/crc32c.h"

namespace hvx {
namespace data {
namespace {

TEST(RecordFormatTest, MaskMatchesTfrecordGoldenValues) {
  // Length CRC and data CRC of the empty record (values from the TFRecord spec notes).
  std::string eight_zeros(8, '\0');
  EXPECT_EQ(MaskCrc(Crc32c(eight_zeros.data(), 8)), 0x07980329u);
  EXPECT_EQ(MaskCrc(0), 0xA282EAD8u);
  for (uint32_t v : {0u, 1u, 0xE3069283u, 0xffffffffu, 0x12345678u}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(v)), v);
    EXPECT_NE(MaskCrc(v), v);
  }
}

TEST(RecordFormatTest, FixedWidthFieldsAreLittleEndian) {
  char buf[8];
  EncodeFixed64(buf, 0x0102030405060708ull);
  EXPECT_EQ(std::string(buf, 8), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(DecodeFixed64(buf), 0x0102030405060708ull);
  EncodeFixed32(buf, 0xa1b2c3d4u);
  EXPECT_EQ(std::string(buf, 4), "\xd4\xc3\xb2\xa1");
  EXPECT_EQ(DecodeFixed32(buf), 0xa1b2c3d4u);
}

TEST(RecordFormatTest, HeaderParsesAndNamesALengthCrcMismatch) {
  std::string framed;
  AppendFramedRecord("hello", &framed);
  ASSERT_EQ(framed.size(), 5 + kRecordOverhead);
  uint64_t length = 0;
  ASSERT_TRUE(ParseRecordHeader(framed.data(), true, "f", 21, &length).ok());
  EXPECT_EQ(length, 5u);
  EXPECT_TRUE(LengthCrcMatches(framed.data()));
  EXPECT_TRUE(DataCrcMatches(framed.data() + kRecordHeaderSize, length));

  framed[0] = 6;  // the length field changes, its CRC does not
  EXPECT_FALSE(LengthCrcMatches(framed.data()));
  absl::Status s = ParseRecordHeader(framed.data(), true, "f", 21, &length);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      s.message(),
      absl::StrCat(
          "f:21: corrupted record: length CRC mismatch (stored 0x",
          absl::Hex(UnmaskCrc(DecodeFixed32(framed.data() + kRecordLengthSize)), absl::kZeroPad8),
          ", computed 0x", absl::Hex(Crc32c(framed.data(), kRecordLengthSize), absl::kZeroPad8),
          ")"));
  // At offset 0 the message asks whether the file is TFRecord at all.
  s = ParseRecordHeader(framed.data(), true, "f", 0, &length);
  EXPECT_TRUE(absl::StartsWith(s.message(), "f:0: corrupted record: length CRC mismatch")) << s;
  EXPECT_TRUE(absl::EndsWith(s.message(), ") (is this a TFRecord file?)")) << s;
  // Without verification the length is taken as stored.
  ASSERT_TRUE(ParseRecordHeader(framed.data(), false, "f", 0, &length).ok());
  EXPECT_EQ(length, 6u);
}

TEST(RecordFormatTest, DataCrcMismatchNamesRecordLengthAndBothCrcs) {
  std::string framed;
  AppendFramedRecord("hello", &framed);
  const char* payload = framed.data() + kRecordHeaderSize;
  EXPECT_TRUE(CheckDataCrc(payload, 5, "f", 0).ok());
  framed[kRecordHeaderSize + 1] ^= 0x10;
  const uint32_t stored = UnmaskCrc(DecodeFixed32(payload + 5));
  const uint32_t computed = Crc32c(payload, 5);
  ASSERT_NE(stored, computed);
  absl::Status s = CheckDataCrc(payload, 5, "dir/shard", 42);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), absl::StrCat("dir/shard:42: corrupted record: data CRC mismatch over 5 "
                                      "payload bytes (stored 0x",
                                      absl::Hex(stored, absl::kZeroPad8), ", computed 0x",
                                      absl::Hex(computed, absl::kZeroPad8), ")"));
  EXPECT_FALSE(DataCrcMatches(payload, 5));
}

}  // namespace
}  // namespace data
}  // namespace hvx
