#include "hvx/data/record.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "hvx/data/crc32c.h"
#include "hvx/data/index.h"

namespace hvx {
namespace data {

class RecordWriterTestPeer {
 public:
  // Writes of 4 GiB and more reach zlib in pieces; a small piece lets a test write several.
  static void SetDeflatePiece(RecordWriter* writer, size_t bytes) {
    writer->deflate_piece_ = bytes;
  }
};

namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Unhex(absl::string_view hex) {
  std::string out;
  int hi = -1;
  for (char c : hex) {
    int v;
    if (c >= '0' && c <= '9')
      v = c - '0';
    else if (c >= 'a' && c <= 'f')
      v = c - 'a' + 10;
    else
      continue;
    if (hi < 0)
      hi = v;
    else
      out.push_back(static_cast<char>(hi * 16 + v)), hi = -1;
  }
  return out;
}

// Writes payloads with RecordWriter and returns the file's bytes.
std::string WriteRecords(const std::string& path, const std::vector<std::string>& payloads,
                         RecordWriterOptions options = {}) {
  auto writer = RecordWriter::Open(path, options);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const auto& p : payloads) EXPECT_TRUE((*writer)->Write(p).ok());
  EXPECT_TRUE((*writer)->Close().ok());
  return ReadBytes(path);
}

// Reads every record; returns the final non-OutOfRange status (OK when the file ended cleanly).
absl::Status ReadAll(const std::string& path, std::vector<std::string>* out,
                     RecordReaderOptions options = {}) {
  auto reader = RecordReader::Open(path, options);
  if (!reader.ok()) return reader.status();
  while (true) {
    std::string r;
    absl::Status s = (*reader)->ReadRecord(&r);
    if (absl::IsOutOfRange(s)) return absl::OkStatus();
    if (!s.ok()) return s;
    out->push_back(r);
  }
}

TEST(RecordTest, GoldenVectors) {
  std::string framed;
  AppendFramedRecord("", &framed);
  EXPECT_EQ(framed, Unhex("00 00 00 00 00 00 00 00 29 03 98 07 d8 ea 82 a2"));
  framed.clear();
  AppendFramedRecord("hello", &framed);
  EXPECT_EQ(framed, Unhex("05 00 00 00 00 00 00 00 ea b2 04 3e 68 65 6c 6c 6f bb 1f 1c 19"));

  const std::string path = TempPath("golden");
  EXPECT_EQ(WriteRecords(path, {"", "hello"}),
            Unhex("00 00 00 00 00 00 00 00 29 03 98 07 d8 ea 82 a2"
                  "05 00 00 00 00 00 00 00 ea b2 04 3e 68 65 6c 6c 6f bb 1f 1c 19"));
}

// A file assembled byte by byte from the format description, independent of the writer.
TEST(RecordTest, ReadsFixtureBuiltFromTheSpec) {
  std::string bytes;
  const std::string payloads[] = {"a", std::string(300, 'x'), "tf.train.Example?"};
  for (const std::string& p : payloads) {
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((uint64_t{p.size()} >> (8 * i)) & 0xff);
    uint32_t lcrc = Crc32cPortableExtend(0, len, 8);
    lcrc = ((lcrc >> 15) | (lcrc << 17)) + 0xa282ead8u;
    uint32_t dcrc = Crc32cPortableExtend(0, p.data(), p.size());
    dcrc = ((dcrc >> 15) | (dcrc << 17)) + 0xa282ead8u;
    bytes.append(len, 8);
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((lcrc >> (8 * i)) & 0xff));
    bytes += p;
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((dcrc >> (8 * i)) & 0xff));
  }
  const std::string path = TempPath("fixture");
  WriteBytes(path, bytes);
  std::vector<std::string> got;
  ASSERT_TRUE(ReadAll(path, &got).ok());
  EXPECT_EQ(got, std::vector<std::string>(std::begin(payloads), std::end(payloads)));
  EXPECT_EQ(WriteRecords(TempPath("fixture2"), got), bytes);
}

TEST(RecordTest, RoundTripManySizesAcrossBufferBoundaries) {
  std::vector<std::string> payloads;
  for (int i = 0; i < 200; ++i)
    payloads.push_back(std::string(static_cast<size_t>(i * 97 % 5000), static_cast<char>(i)));
  payloads.push_back(std::string(1 << 20, 'L'));  // larger than the 256 KiB buffers
  const std::string path = TempPath("roundtrip");
  RecordWriterOptions wo;
  wo.buffer_size = 4096;
  WriteRecords(path, payloads, wo);
  RecordReaderOptions ro;
  ro.buffer_size = 4096;
  std::vector<std::string> got;
  ASSERT_TRUE(ReadAll(path, &got, ro).ok());
  EXPECT_EQ(got, payloads);
}

TEST(RecordTest, CorruptingAnyByteIsDataLossNamingFileAndOffset) {
  const std::string path = TempPath("corrupt");
  const std::string good = WriteRecords(path, {"first", "second record"});
  const size_t second = 16 + 5;
  struct Case {
    size_t byte;
    const char* what;
  } cases[] = {
      {second + 0, "length CRC mismatch"},                                        // length field
      {second + 7, "length CRC mismatch"},  {second + 8, "length CRC mismatch"},  // length CRC
      {second + 11, "length CRC mismatch"}, {second + 12, "data CRC mismatch"},   // payload
      {second + 24, "data CRC mismatch"},   {second + 25, "data CRC mismatch"},   // data CRC
      {second + 28, "data CRC mismatch"},
  };
  for (const Case& c : cases) {
    std::string bad = good;
    bad[c.byte] ^= 0x10;
    WriteBytes(path, bad);
    std::vector<std::string> got;
    absl::Status s = ReadAll(path, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.byte;
    EXPECT_NE(s.message().find(absl::StrCat(path, ":", second, ": corrupted record: ", c.what)),
              std::string::npos)
        << s;
    EXPECT_EQ(got, std::vector<std::string>{"first"});
  }
  // The first record's header at offset 0 adds the "is this a TFRecord file" hint.
  std::string bad = good;
  bad[0] ^= 1;
  WriteBytes(path, bad);
  std::vector<std::string> got;
  absl::Status s = ReadAll(path, &got);
  EXPECT_NE(s.message().find("is this a TFRecord file?"), std::string::npos) << s;
}

// A damaged payload reads the same whether the file is read front to back or at an offset.
TEST(RecordTest, DataCrcMismatchIsTheSameErrorSequentiallyAndAtAnOffset) {
  const std::string path = TempPath("data_crc");
  std::string bytes = WriteRecords(path, {"first", "second record"});
  bytes[21 + kRecordHeaderSize + 3] ^= 0x10;
  WriteBytes(path, bytes);
  std::vector<std::string> got;
  absl::Status sequential = ReadAll(path, &got);
  EXPECT_EQ(sequential.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(
      sequential.message(),
      absl::StrCat(path,
                   ":21: corrupted record: data CRC mismatch over 13 payload bytes (stored ")))
      << sequential;
  for (RecordFileAccess access : {RecordFileAccess::kPread, RecordFileAccess::kMemory}) {
    auto file = RecordFile::Open(path, access);
    ASSERT_TRUE(file.ok()) << file.status();
    std::string payload;
    EXPECT_EQ((*file)->ReadAt({21, 13}, /*verify_crc=*/true, &payload), sequential);
  }
}

TEST(RecordTest, EveryTruncationIsDataLossExceptAtRecordBoundaries) {
  const std::string path = TempPath("trunc");
  const std::string good = WriteRecords(path, {"first", "second record"});
  for (size_t n = 0; n < good.size(); ++n) {
    WriteBytes(path, good.substr(0, n));
    std::vector<std::string> got;
    absl::Status s = ReadAll(path, &got);
    if (n == 0 || n == 21) {
      EXPECT_TRUE(s.ok()) << n << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << n;
      EXPECT_NE(s.message().find("truncated record"), std::string::npos) << s;
      EXPECT_NE(s.message().find(absl::StrCat(path, ":", n < 21 ? 0 : 21, ":")), std::string::npos)
          << s;
    }
  }
}

// A length with a valid CRC but far beyond the file: reported, never allocated.
TEST(RecordTest, HostileLengthIsRejectedWithoutAllocating) {
  for (uint64_t length : {uint64_t{1} << 62, ~uint64_t{0}, ~uint64_t{0} - 15, uint64_t{1000}}) {
    std::string header(8, '\0');
    for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
    uint32_t crc = MaskCrc(Crc32c(header.data(), 8));
    for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
    const std::string path = TempPath("hostile");
    WriteBytes(path, header + "tiny payload");
    std::vector<std::string> got;
    absl::Status s = ReadAll(path, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find(absl::StrCat("length field ", length)), std::string::npos) << s;
    auto index = BuildIndex(path, false);
    EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
    // Compressed: the stream size is unknown, so the reader grows only as data arrives.
    const std::string gz = TempPath("hostile.gz");
    gzFile f = gzopen(gz.c_str(), "wb");
    std::string bytes = header + "tiny payload";
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    RecordReaderOptions ro;
    ro.compression = Compression::kGzip;
    got.clear();
    s = ReadAll(gz, &got, ro);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
}

// A sparse file whose one record claims 1 TiB, all of it inside the file, with a valid length CRC:
// before, the trainer's reader allocated what the record claimed (std::bad_alloc ended the rank;
// a claim under the memory size filled it). Every way in refuses it before allocating.
TEST(RecordTest, ARecordClaimingMoreThanTheLimitIsRefusedEvenWhereTheFileHoldsIt) {
  const uint64_t length = uint64_t{1} << 40;
  std::string header(8, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  const uint32_t crc = MaskCrc(Crc32c(header.data(), 8));
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  const std::string path = TempPath("sparse");
  WriteBytes(path, header);
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(kRecordOverhead + length)), 0);
  const std::string want = absl::StrCat(path, ":0: record size too large: length field ", length,
                                        " is over the limit of 1073741824 bytes");
  auto index = BuildIndex(path, false);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(index.status().message(), want)) << index.status();
  std::vector<std::string> got;
  const absl::Status s = ReadAll(path, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), want)) << s;
  // An index file that says so is refused too.
  auto parsed = ParseIndex(absl::StrCat("0 ", kRecordOverhead + length, "\n"), "x.index",
                           kRecordOverhead + length);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "is over the limit of 1073741824"))
      << parsed.status();
  unlink(path.c_str());
}

TEST(RecordTest, ReadsGzipAndZlibFromZlibItself) {
  const std::string plain_path = TempPath("plain");
  const std::vector<std::string> payloads = {"alpha", std::string(100000, 'b'), "", "gamma"};
  const std::string plain = WriteRecords(plain_path, payloads);
  // GZIP written by zlib's gz* API (what Python's gzip and TF's GZIP writer produce).
  const std::string gz = TempPath("records.gz");
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, plain.data(), static_cast<unsigned>(plain.size()));
  gzclose(f);
  RecordReaderOptions ro;
  ro.compression = Compression::kGzip;
  ro.buffer_size = 4096;
  std::vector<std::string> got;
  ASSERT_TRUE(ReadAll(gz, &got, ro).ok());
  EXPECT_EQ(got, payloads);
  // ZLIB via compress2 (zlib header + Adler-32).
  std::string z(compressBound(plain.size()), '\0');
  uLongf zlen = z.size();
  ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(&z[0]), &zlen,
                      reinterpret_cast<const Bytef*>(plain.data()), plain.size(), 6),
            Z_OK);
  z.resize(zlen);
  const std::string zpath = TempPath("records.zlib");
  WriteBytes(zpath, z);
  ro.compression = Compression::kZlib;
  got.clear();
  ASSERT_TRUE(ReadAll(zpath, &got, ro).ok());
  EXPECT_EQ(got, payloads);
  // Our own compressed writers, read back by our reader and by zlib.
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    RecordWriterOptions wo;
    wo.compression = c;
    const std::string path = TempPath(absl::StrCat("ours.", CompressionName(c)));
    WriteRecords(path, payloads, wo);
    ro.compression = c;
    got.clear();
    ASSERT_TRUE(ReadAll(path, &got, ro).ok());
    EXPECT_EQ(got, payloads);
  }
  gzFile g = gzopen(TempPath("ours.GZIP").c_str(), "rb");
  std::string inflated(plain.size() + 10, '\0');
  int n = gzread(g, &inflated[0], static_cast<unsigned>(inflated.size()));
  gzclose(g);
  EXPECT_EQ(inflated.substr(0, n), plain);
  // A truncated compressed file is DataLoss too.
  std::string gzbytes = ReadBytes(gz);
  WriteBytes(gz, gzbytes.substr(0, gzbytes.size() / 2));
  ro.compression = Compression::kGzip;
  got.clear();
  EXPECT_EQ(ReadAll(gz, &got, ro).code(), absl::StatusCode::kDataLoss);
}

// zlib takes at most 4 GiB - 1 bytes per deflate() call, so the writer hands larger writes over
// in pieces (a 4 GiB record used to be cut to its size modulo 4 GiB). With 1000-byte pieces,
// records and buffer drains of many pieces must come back exactly, through our reader and zlib's.
TEST(RecordTest, CompressedWritesLargerThanOneDeflatePieceRoundTrip) {
  std::string noise;  // incompressible, so every piece produces output
  uint64_t x = 88172645463325252u;
  for (int i = 0; i < 25013; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    noise.push_back(static_cast<char>(x & 0xff));
  }
  // Small records fill the 4 KiB buffer (drained as one write of > 4 pieces); the large ones go
  // to the file directly (one write of 10 and 25 pieces).
  std::vector<std::string> payloads;
  for (int i = 0; i < 40; ++i) payloads.push_back(noise.substr(i * 7, 300 + i));
  payloads.push_back(noise.substr(0, 10007));
  payloads.push_back(noise);
  payloads.push_back("tail");
  std::string plain;
  for (const std::string& p : payloads) AppendFramedRecord(p, &plain);
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(CompressionName(c));
    const std::string path = TempPath(absl::StrCat("pieces.", CompressionName(c)));
    RecordWriterOptions wo;
    wo.compression = c;
    wo.buffer_size = 4096;
    auto writer = RecordWriter::Open(path, wo);
    ASSERT_TRUE(writer.ok()) << writer.status();
    RecordWriterTestPeer::SetDeflatePiece(writer->get(), 1000);
    for (const std::string& p : payloads) ASSERT_TRUE((*writer)->Write(p).ok());
    ASSERT_TRUE((*writer)->Close().ok());
    RecordReaderOptions ro;
    ro.compression = c;
    std::vector<std::string> got;
    absl::Status read = ReadAll(path, &got, ro);
    EXPECT_TRUE(read.ok()) << read;
    EXPECT_EQ(got.size(), payloads.size());
    EXPECT_TRUE(got == payloads) << "payloads differ";
    // zlib itself inflates the file to exactly the framed records.
    const std::string compressed = ReadBytes(path);
    z_stream z{};
    ASSERT_EQ(inflateInit2(&z, c == Compression::kGzip ? 15 + 16 : 15), Z_OK);
    std::string inflated(plain.size() + 100, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
    z.avail_in = static_cast<uInt>(compressed.size());
    z.next_out = reinterpret_cast<Bytef*>(&inflated[0]);
    z.avail_out = static_cast<uInt>(inflated.size());
    EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
    inflated.resize(inflated.size() - z.avail_out);
    inflateEnd(&z);
    EXPECT_TRUE(inflated == plain)
        << "inflated " << inflated.size() << " bytes, wrote " << plain.size();
  }
}

TEST(RecordTest, SkipPolicyReportsExactlyWhatWasSkipped) {
  const std::string path = TempPath("skip");
  std::string bytes = WriteRecords(path, {"one", "two", "three"});
  bytes[19 + 19 + 12] ^= 1;  // payload of the third record ("one"=19 bytes, "two"=19 bytes)
  WriteBytes(path, bytes);
  RecordReaderOptions ro;
  ro.on_corruption = CorruptionPolicy::kSkipRestOfFile;
  auto reader = RecordReader::Open(path, ro);
  ASSERT_TRUE(reader.ok());
  std::string r;
  ASSERT_TRUE((*reader)->ReadRecord(&r).ok());
  ASSERT_TRUE((*reader)->ReadRecord(&r).ok());
  EXPECT_TRUE(absl::IsOutOfRange((*reader)->ReadRecord(&r)));
  ASSERT_EQ((*reader)->skipped().size(), 1u);
  const CorruptionReport& report = (*reader)->skipped()[0];
  EXPECT_EQ(report.path, path);
  EXPECT_EQ(report.offset, 38u);
  EXPECT_EQ(report.bytes_skipped, static_cast<int64_t>(bytes.size() - 38));
  EXPECT_NE(report.reason.find("data CRC mismatch"), std::string::npos);
}

TEST(RecordTest, IndexWrittenByWriterMatchesBuiltIndexAndSeeks) {
  const std::string path = TempPath("indexed");
  std::vector<std::string> payloads;
  for (int i = 0; i < 50; ++i)
    payloads.push_back(std::string(static_cast<size_t>(i * 13), 'a' + i % 26));
  RecordWriterOptions wo;
  wo.write_index = true;
  WriteRecords(path, payloads, wo);
  const std::string idx = ReadBytes(IndexPathFor(path));
  EXPECT_EQ(idx.substr(0, idx.find('\n', idx.find('\n') + 1) + 1), "0 16\n16 29\n");
  auto loaded = LoadOrBuildIndex(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto built = BuildIndex(path, true);
  ASSERT_TRUE(built.ok());
  ASSERT_EQ(loaded->size(), 50u);
  auto file = RecordFile::Open(path, RecordFileAccess::kMmap);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->mapped());
  auto unmapped = RecordFile::Open(path, RecordFileAccess::kPread);
  ASSERT_TRUE(unmapped.ok());
  EXPECT_FALSE((*unmapped)->mapped());
  auto reader = RecordReader::Open(path, {});
  for (int i = 49; i >= 0; i -= 7) {
    EXPECT_EQ((*loaded)[i].offset, (*built)[i].offset);
    EXPECT_EQ((*loaded)[i].length, payloads[i].size());
    std::string got;
    ASSERT_TRUE((*file)->ReadAt((*loaded)[i], true, &got).ok());
    EXPECT_EQ(got, payloads[i]);
    ASSERT_TRUE((*unmapped)->ReadAt((*loaded)[i], true, &got).ok());
    EXPECT_EQ(got, payloads[i]);
    std::string scratch;
    absl::string_view view;
    ASSERT_TRUE((*unmapped)->ViewAt((*loaded)[i], true, &scratch, &view).ok());
    EXPECT_EQ(view, payloads[i]);
    std::vector<char> framed(RecordFile::FramedSize((*loaded)[i]));
    ASSERT_TRUE((*unmapped)->ViewInto((*loaded)[i], true, framed.data(), &view).ok());
    EXPECT_EQ(view, payloads[i]);
    EXPECT_EQ(view.data(), framed.data() + kRecordHeaderSize);
    ASSERT_TRUE((*reader)->Seek((*loaded)[i].offset).ok());
    ASSERT_TRUE((*reader)->ReadRecord(&got).ok());
    EXPECT_EQ(got, payloads[i]);
  }
  // A stale index (file grew) is refused with the index path in the message.
  std::string bytes = ReadBytes(path);
  AppendFramedRecord("extra", &bytes);
  WriteBytes(path, bytes);
  auto stale = LoadOrBuildIndex(path);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(stale.status().message().find(IndexPathFor(path)), std::string::npos);
  // ReadAt with a wrong length names the mismatch.
  std::string got;
  absl::Status s = (*file)->ReadAt({0, 5}, true, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(":0: length field says 0 bytes, the index says 5"), std::string::npos)
      << s;
}

// What a user sees when a shard is cut short while a job has it open: by default an error naming
// the file and the record; with kMmap the process dies of SIGBUS, which is why it is opt-in.
TEST(RecordTest, FileTruncatedWhileOpen) {
  const std::string path = TempPath("shrinking");
  std::vector<std::string> payloads;
  for (int i = 0; i < 64; ++i)
    payloads.push_back(std::string(5000, static_cast<char>('a' + i % 26)));
  RecordWriterOptions wo;
  wo.write_index = true;
  WriteRecords(path, payloads, wo);
  auto index = LoadOrBuildIndex(path);
  ASSERT_TRUE(index.ok());
  auto file = RecordFile::Open(path, RecordFileAccess::kPread);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->access(), RecordFileAccess::kPread);
  auto loaded = RecordFile::Open(path, RecordFileAccess::kMemory);
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE((*loaded)->mapped());
  std::string got;
  ASSERT_TRUE((*file)->ReadAt((*index)[40], true, &got).ok());
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>((*index)[32].offset + 100)), 0);
  EXPECT_TRUE((*file)->ReadAt((*index)[31], true, &got).ok());
  EXPECT_EQ(got, payloads[31]);
  for (int k : {32, 40, 63}) {
    absl::Status s = (*file)->ReadAt((*index)[k], true, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(absl::StrCat(path, ":", (*index)[k].offset, ": truncated record")),
              std::string::npos)
        << s;
  }
  // A file loaded into memory before the cut keeps every record.
  for (size_t k = 0; k < index->size(); ++k) {
    absl::string_view view;
    ASSERT_TRUE((*loaded)->ViewInto((*index)[k], true, nullptr, &view).ok()) << k;
    EXPECT_EQ(view, payloads[k]);
  }
  // The sequential reader reports the cut record the same way.
  std::vector<std::string> all;
  absl::Status s = ReadAll(path, &all);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(absl::StrCat(path, ":", (*index)[32].offset, ": truncated record")),
            std::string::npos)
      << s;
  EXPECT_EQ(all.size(), 32u);

  WriteRecords(path, payloads, wo);
  EXPECT_DEATH(
      {
        auto mapped = RecordFile::Open(path, RecordFileAccess::kMmap);
        if (!mapped.ok() || !(*mapped)->mapped()) std::abort();
        if (::truncate(path.c_str(), 0) != 0) std::abort();
        absl::string_view view;
        std::string unused;
        // Reading a page the file no longer has: SIGBUS, not a status.
        (void)(*mapped)->ViewAt((*index)[63], /*verify_crc=*/true, &unused, &view);
        std::exit(0);
      },
      "");
}

// Corruption far into a file, after many buffer refills: same offsets and reasons, and the skip
// policy reports from the damaged record to the end.
TEST(RecordTest, CorruptionAfterManyRefillsNamesTheRecord) {
  const std::string path = TempPath("long");
  std::vector<std::string> payloads;
  for (int i = 0; i < 400; ++i) payloads.push_back(std::string(850 + i % 7, static_cast<char>(i)));
  std::string bytes = WriteRecords(path, payloads);
  uint64_t offset = 0;
  for (int i = 0; i < 301; ++i) offset += payloads[i].size() + kRecordOverhead;
  for (size_t field : {size_t{3}, size_t{9}, size_t{12 + 400}, 12 + payloads[301].size() + 1}) {
    std::string bad = bytes;
    bad[offset + field] ^= 0x08;
    WriteBytes(path, bad);
    for (size_t buffer : {size_t{4096}, size_t{256} << 10}) {
      RecordReaderOptions ro;
      ro.buffer_size = buffer;
      std::vector<std::string> got;
      absl::Status s = ReadAll(path, &got, ro);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << field;
      EXPECT_NE(s.message().find(absl::StrCat(path, ":", offset, ": ")), std::string::npos) << s;
      EXPECT_NE(s.message().find(field < 12 ? "length CRC mismatch" : "data CRC mismatch"),
                std::string::npos)
          << s;
      ASSERT_EQ(got.size(), 301u);
      EXPECT_EQ(got.back(), payloads[300]);
      ro.on_corruption = CorruptionPolicy::kSkipRestOfFile;
      auto reader = RecordReader::Open(path, ro);
      ASSERT_TRUE(reader.ok());
      std::string r;
      int n = 0;
      while ((s = (*reader)->ReadRecord(&r)).ok()) ++n;
      EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
      EXPECT_EQ(n, 301);
      ASSERT_EQ((*reader)->skipped().size(), 1u);
      EXPECT_EQ((*reader)->skipped()[0].offset, offset);
      EXPECT_EQ((*reader)->skipped()[0].bytes_skipped, static_cast<int64_t>(bytes.size() - offset));
      // Nothing more after the skip, however often the caller asks.
      EXPECT_TRUE(absl::IsOutOfRange((*reader)->ReadRecord(&r)));
    }
  }
}

// Readers opened one after another on a thread reuse one read buffer. What a previous reader left
// in it must never show through: a shorter, cut copy of the same file is still a truncation at the
// right offset; buffers grown for huge records, readers alive at once and readers destroyed on
// another thread all read correctly (and free cleanly under ASan).
TEST(RecordTest, ReadersOneAfterAnotherNeverSeeAnEarlierReadersBytes) {
  const std::string full = TempPath("reuse_full");
  const std::string cut = TempPath("reuse_cut");
  const std::string huge = TempPath("reuse_huge");
  std::vector<std::string> payloads;
  for (int i = 0; i < 300; ++i) payloads.push_back(std::string(850 + i % 5, static_cast<char>(i)));
  const std::string bytes = WriteRecords(full, payloads);
  uint64_t offset = 0;
  for (int i = 0; i < 200; ++i) offset += payloads[i].size() + kRecordOverhead;
  WriteBytes(cut, bytes.substr(0, offset + 400));
  const std::vector<std::string> big = {std::string(5 << 20, 'h'), "after"};
  WriteRecords(huge, big);

  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> got;
    ASSERT_TRUE(ReadAll(full, &got).ok());
    EXPECT_EQ(got, payloads);
    got.clear();
    absl::Status s = ReadAll(cut, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(absl::StrCat(cut, ":", offset, ": truncated record")),
              std::string::npos)
        << s;
    EXPECT_EQ(got.size(), 200u);
    got.clear();
    ASSERT_TRUE(ReadAll(huge, &got).ok());
    EXPECT_EQ(got, big);
  }

  // Two readers at once, the first destroyed on another thread.
  auto first = RecordReader::Open(full, {});
  auto second = RecordReader::Open(full, {});
  ASSERT_TRUE(first.ok() && second.ok());
  absl::string_view a, b;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE((*first)->ReadRecord(&a).ok());
    ASSERT_TRUE((*second)->ReadRecord(&b).ok());
    ASSERT_EQ(a, payloads[i]);
    ASSERT_EQ(b, payloads[i]);
  }
  std::thread([reader = std::move(*first)]() mutable { reader.reset(); }).join();
  std::vector<std::string> got;
  ASSERT_TRUE(ReadAll(full, &got).ok());
  EXPECT_EQ(got, payloads);
  ASSERT_TRUE((*second)->ReadRecord(&b).ok());
  EXPECT_EQ(b, payloads[100]);
}

TEST(RecordTest, FlushMakesRecordsVisibleWhileWriting) {
  const std::string path = TempPath("events");
  auto writer = RecordWriter::Open(path, {});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write("event 1").ok());
  ASSERT_TRUE((*writer)->Write("event 2").ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  std::vector<std::string> got;
  ASSERT_TRUE(ReadAll(path, &got).ok());
  EXPECT_EQ(got, (std::vector<std::string>{"event 1", "event 2"}));
  ASSERT_TRUE((*writer)->Write("event 3").ok());
  ASSERT_TRUE((*writer)->Sync().ok());
  got.clear();
  ASSERT_TRUE(ReadAll(path, &got).ok());
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ((*writer)->num_records(), 3);
  ASSERT_TRUE((*writer)->Close().ok());
}

TEST(RecordTest, ParseCompression) {
  EXPECT_EQ(*ParseCompression(""), Compression::kNone);
  EXPECT_EQ(*ParseCompression("gzip"), Compression::kGzip);
  EXPECT_EQ(*ParseCompression("ZLIB"), Compression::kZlib);
  EXPECT_EQ(ParseCompression("snappy").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace hvx
