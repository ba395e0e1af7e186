#include "hvx/train/checkpoint_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/common/files.h"

namespace hvx {
namespace train {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

std::string ReadAll(const std::string& path) {
  auto f = OpenReadOnly(path, "test");
  EXPECT_TRUE(f.ok()) << f.status();
  std::string bytes(f->size, '\0');
  EXPECT_EQ(pread(f->fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  close(f->fd);
  return bytes;
}

void FlipByte(const std::string& path, uint64_t offset) {
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, offset), 1);
  c ^= 0x5a;
  ASSERT_EQ(pwrite(fd, &c, 1, offset), 1);
  close(fd);
}

// Two "ranks" write a float tensor of 10 elements in halves, and each a whole tensor of its own.
struct TwoShards {
  std::string dir;
  std::vector<float> weight = std::vector<float>(10);
  std::vector<int64_t> step = {7};
  std::vector<double> bias = {0.5, -1.5, 2.5};
  CheckpointIndex index;
};

TwoShards WriteTwoShards(const std::string& name) {
  TwoShards s;
  s.dir = TestDir(name);
  std::iota(s.weight.begin(), s.weight.end(), 1.0f);
  std::vector<WrittenShard> shards;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<PieceToWrite> pieces;
    pieces.push_back({"model/fc.weight", "F32", {2, 5}, rank * 5, 5, s.weight.data() + rank * 5});
    if (rank == 0) pieces.push_back({"optimizer/fc.weight/step", "I64", {}, 0, 1, s.step.data()});
    if (rank == 1) pieces.push_back({"model/fc.bias", "F64", {3}, 0, 3, s.bias.data()});
    auto shard = WriteShardFile(s.dir, ShardFileName("t0", rank, 2), pieces, {{"rank", "x"}});
    EXPECT_TRUE(shard.ok()) << shard.status();
    shards.push_back(*shard);
  }
  auto index = BuildIndex(12, 2, shards, Json{{"position", {1, 2, 3}}});
  EXPECT_TRUE(index.ok()) << index.status();
  s.index = *index;
  return s;
}

TEST(CheckpointFormatTest, AShardFileIsSafetensorsWithWholeTensorsAndKeyedSlices) {
  TwoShards s = WriteTwoShards("safetensors");
  const std::string path = s.dir + "/" + ShardFileName("t0", 1, 2);
  const std::string bytes = ReadAll(path);
  auto header = ParseSafetensorsHeader(bytes, bytes.size(), path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->data_begin % 8, 0u);
  ASSERT_EQ(header->entries.size(), 2u);
  EXPECT_EQ(header->entries[0].key, "model/fc.weight[5:10]");
  EXPECT_EQ(header->entries[0].shape, std::vector<int64_t>{5});
  EXPECT_EQ(header->entries[1].key, "model/fc.bias");
  EXPECT_EQ(header->entries[1].dtype, "F64");
  EXPECT_EQ(header->entries[1].shape, std::vector<int64_t>{3});
  EXPECT_EQ(header->metadata.at("rank"), "x");
  float sixth = 0;
  memcpy(&sixth, bytes.data() + header->data_begin, 4);
  EXPECT_EQ(sixth, 6.0f);
}

TEST(CheckpointFormatTest, TheIndexRoundTripsAndReadsAnyRangeAcrossPieces) {
  TwoShards s = WriteTwoShards("roundtrip");
  ASSERT_TRUE(WriteIndex(s.dir, s.index).ok());
  auto index = ReadIndex(s.dir);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->step, 12);
  EXPECT_EQ(index->world_size, 2);
  EXPECT_EQ(index->metadata["position"], Json({1, 2, 3}));
  ASSERT_EQ(index->tensors.count("model/fc.weight"), 1u);
  EXPECT_EQ(index->tensors.at("model/fc.weight").pieces.size(), 2u);
  IndexReader reader(s.dir, *index);
  std::vector<float> middle(4);
  ASSERT_TRUE(reader.Read("model/fc.weight", 3, 4, middle.data()).ok());
  EXPECT_EQ(middle, (std::vector<float>{4, 5, 6, 7}));
  std::vector<double> bias(3);
  ASSERT_TRUE(reader.Read("model/fc.bias", 0, 3, bias.data()).ok());
  EXPECT_EQ(bias, s.bias);
  int64_t step = 0;
  ASSERT_TRUE(reader.Read("optimizer/fc.weight/step", 0, 1, &step).ok());
  EXPECT_EQ(step, 7);
  // Four reads of tensors that share their files' only block: each file read once.
  EXPECT_EQ(reader.bytes_read(),
            static_cast<int64_t>(index->files[0].bytes + index->files[1].bytes));
  EXPECT_TRUE(absl::IsNotFound(reader.Read("model/other", 0, 1, &step)));
  EXPECT_TRUE(absl::IsOutOfRange(reader.Read("model/fc.bias", 2, 2, bias.data())));
}

TEST(CheckpointFormatTest, ADamagedByteIsNamedByFileAndBlockOnlyWhereItIsRead) {
  TwoShards s = WriteTwoShards("damaged");
  const std::string path = s.dir + "/" + ShardFileName("t0", 1, 2);
  FlipByte(path, ReadAll(path).size() - 1);  // the bias's last byte
  IndexReader reader(s.dir, s.index);
  std::vector<double> bias(3);
  const absl::Status st = reader.Read("model/fc.bias", 0, 3, bias.data());
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find(path), std::string::npos) << st;
  EXPECT_NE(st.message().find("block 0"), std::string::npos) << st;
  std::vector<float> first(5);
  EXPECT_TRUE(reader.Read("model/fc.weight", 0, 5, first.data()).ok());  // the other file
}

TEST(CheckpointFormatTest, AMissingOrShortFileIsDataLoss) {
  TwoShards s = WriteTwoShards("missing");
  const std::string path0 = s.dir + "/" + ShardFileName("t0", 0, 2);
  const std::string path1 = s.dir + "/" + ShardFileName("t0", 1, 2);
  ASSERT_EQ(unlink(path0.c_str()), 0);
  ASSERT_EQ(truncate(path1.c_str(), 20), 0);
  IndexReader reader(s.dir, s.index);
  std::vector<float> w(10);
  absl::Status st = reader.Read("model/fc.weight", 0, 10, w.data());
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st;
  std::vector<double> bias(3);
  st = reader.Read("model/fc.bias", 0, 3, bias.data());
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("ends at byte 20"), std::string::npos) << st;
}

TEST(CheckpointFormatTest, ARangeOfALargePieceReadsOnlyItsBlocks) {
  const std::string dir = TestDir("blocks");
  std::vector<float> big(1 << 20);  // 4 MiB: 4 blocks and the header's bytes
  std::iota(big.begin(), big.end(), 0.0f);
  auto shard = WriteShardFile(dir, ShardFileName("t1", 0, 1),
                              {{"big", "F32", {1 << 20}, 0, 1 << 20, big.data()}}, {});
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->block_crc32c.size(),
            (shard->bytes + kChecksumBlockBytes - 1) / kChecksumBlockBytes);
  auto index = BuildIndex(1, 1, {*shard}, Json::object());
  ASSERT_TRUE(index.ok());
  IndexReader reader(dir, *index);
  std::vector<float> part(1000);
  ASSERT_TRUE(reader.Read("big", 300000, 1000, part.data()).ok());
  EXPECT_EQ(part[0], 300000.0f);
  EXPECT_EQ(part[999], 300999.0f);
  EXPECT_LE(reader.bytes_read(), 2 * kChecksumBlockBytes);
}

TEST(CheckpointFormatTest, PiecesThatLeaveOutOrRepeatElementsAreNeverIndexed) {
  const std::string dir = TestDir("coverage");
  std::vector<float> w(10, 1.0f);
  auto a = WriteShardFile(dir, "a", {{"w", "F32", {10}, 0, 6, w.data()}}, {});
  auto b = WriteShardFile(dir, "b", {{"w", "F32", {10}, 5, 5, w.data()}}, {});
  auto c = WriteShardFile(dir, "c", {{"w", "F32", {10}, 7, 3, w.data()}}, {});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const auto twice = BuildIndex(1, 2, {*a, *b}, Json::object());
  EXPECT_TRUE(absl::IsInternal(twice.status())) << twice.status();
  EXPECT_NE(twice.status().message().find("twice"), std::string::npos);
  const auto gap = BuildIndex(1, 2, {*a, *c}, Json::object());
  EXPECT_TRUE(absl::IsInternal(gap.status())) << gap.status();
  EXPECT_NE(gap.status().message().find("by no rank"), std::string::npos);
}

TEST(CheckpointFormatTest, AnIndexOfANewerVersionIsRefusedAsSuchAndGarbageAsDamage) {
  const auto newer =
      DecodeIndex(R"({"format": "hvx-checkpoint", "version": 9, "block_bytes": 1048576})", "i");
  EXPECT_TRUE(absl::IsFailedPrecondition(newer.status())) << newer.status();
  EXPECT_TRUE(absl::IsDataLoss(DecodeIndex("{\"format\": 1}", "i").status()));
  // Numbers past what the reader can hold are damage, not values that wrap around.
  const std::string huge_step = R"({"format": "hvx-checkpoint", "version": 1, "block_bytes": 65536,
      "step": 18446744073709551615, "world_size": 1, "files": [], "tensors": {}})";
  EXPECT_TRUE(absl::IsDataLoss(DecodeIndex(huge_step, "i").status()));
  const std::string huge_file = R"({"format": "hvx-checkpoint", "version": 1, "block_bytes": 65536,
      "step": 1, "world_size": 1, "tensors": {},
      "files": [{"name": "f", "bytes": 18446744073709551615, "crc32c": 0, "block_crc32c": []}]})";
  EXPECT_TRUE(absl::IsDataLoss(DecodeIndex(huge_file, "i").status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeIndex("not json", "i").status()));
}

TEST(CheckpointFormatTest, HeadersThatLieAboutTheirDataAreRefused) {
  const std::string good = EncodeSafetensorsHeader({{"x", "F32", {2}, 0, 8}}, {});
  EXPECT_TRUE(ParseSafetensorsHeader(good, good.size() + 8, "f").ok());
  EXPECT_TRUE(absl::IsDataLoss(ParseSafetensorsHeader(good, good.size() + 4, "f").status()));
  const std::string wrong_size = EncodeSafetensorsHeader({{"x", "F32", {3}, 0, 8}}, {});
  EXPECT_TRUE(
      absl::IsDataLoss(ParseSafetensorsHeader(wrong_size, wrong_size.size() + 8, "f").status()));
  const std::string unknown = EncodeSafetensorsHeader({{"x", "Q7", {2}, 0, 8}}, {});
  EXPECT_TRUE(absl::IsDataLoss(ParseSafetensorsHeader(unknown, unknown.size() + 8, "f").status()));
  std::string huge = good;
  huge[7] = 0x7f;
  EXPECT_TRUE(absl::IsDataLoss(ParseSafetensorsHeader(huge, huge.size(), "f").status()));
}

}  // namespace
}  // namespace train
}  // namespace hvx
