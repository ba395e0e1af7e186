// IDX -> shards on the real Fashion-MNIST files (Debian dataset-fashion-mnist), image folder ->
// ImageNet layout, and inspection with its corruption report.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/data/dataset.h"
#include "hvx/data/example.h"
#include "hvx/data/idx.h"
#include "hvx/data/image_folder.h"
#include "hvx/data/index.h"
#include "hvx/data/inspect.h"
#include "hvx/data/jpeg.h"
#include "hvx/data/pipeline.h"
#include "hvx/data/test_util.h"

namespace hvx {
namespace data {
namespace {

const char kFmnist[] = "/usr/share/datasets/fashion-mnist/";

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(IdxTest, FashionMnistTrainToShards) {
  const std::string images = absl::StrCat(kFmnist, "train-images-idx3-ubyte.gz");
  const std::string labels = absl::StrCat(kFmnist, "train-labels-idx1-ubyte.gz");
  auto idx = ReadIdxFile(images);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->dims, (std::vector<int64_t>{60000, 28, 28}));
  double sum = 0;
  for (char c : idx->data) sum += static_cast<uint8_t>(c);
  EXPECT_NEAR(sum / idx->data.size() / 255.0, 0.2860, 0.0005);  // published pixel mean

  const std::string dir = TempDir("fmnist");
  auto shards = WriteIdxShards(images, labels, dir, "train", 4);
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_EQ(shards->size(), 4u);
  EXPECT_EQ((*shards)[3], dir + "/train-00003-of-00004");
  auto dataset = Dataset::Open({dir + "/train-*-of-00004"}, {});
  ASSERT_TRUE(dataset.ok());
  ASSERT_EQ((*dataset)->num_samples(), 60000);
  std::vector<int> per_class(10, 0);
  std::string payload;
  for (int64_t id = 0; id < 60000; ++id) {
    ASSERT_TRUE((*dataset)->Read(id, true, &payload).ok());
    Example e;
    ASSERT_TRUE(ParseExample(payload, &e).ok());
    auto label = GetInt64(e, "image/class/label");
    ASSERT_TRUE(label.ok());
    ++per_class[static_cast<size_t>(*label)];
    if (id % 9973 == 0) {
      EXPECT_EQ(*GetBytes(e, "image/raw"), idx->data.substr(static_cast<size_t>(id) * 784, 784));
    }
  }
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));

  // Two ranks, float normalised with the dataset's mean and std.
  RawImageDecoderOptions d;
  d.dtype = DataType::kFloat32;
  d.mean = {0.2860f};
  d.stddev = {0.3530f};
  PipelineOptions o;
  o.plan.rank = 1;
  o.plan.size = 2;
  o.batch_size = 64;
  o.decoder = std::make_shared<RawImageDecoder>(d);
  auto pipeline = Pipeline::Create(std::shared_ptr<const Dataset>(std::move(*dataset)), o);
  ASSERT_TRUE(pipeline.ok());
  EXPECT_EQ((*pipeline)->num_batches(), (30000 + 63) / 64);
  auto batch = (*pipeline)->Next();
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)->shape(), TensorShape({64, 1, 28, 28}));

  // Bad inputs name the file.
  auto swapped = WriteIdxShards(labels, images, dir, "bad", 1);
  EXPECT_EQ(swapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(swapped.status().message().find(labels), std::string::npos);
  auto missing = ReadIdxFile(dir + "/nope.gz");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// 2^28 x 2^28 x 2^8 one-byte elements: the product wraps to 0, which this header-only file
// "holds". Before, the header was taken, and slicing its images threw std::out_of_range.
TEST(IdxTest, DimensionsWhoseProductWrapsAreRefused) {
  const std::string path = TempDir("wrap") + "/images-idx3-ubyte";
  std::ofstream(path, std::ios::binary)
      << std::string("\x00\x00\x08\x03\x10\x00\x00\x00\x10\x00\x00\x00\x00\x00\x01\x00", 16);
  auto idx = ReadIdxFile(path);
  EXPECT_EQ(idx.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(idx.status().message(),
            absl::StrCat(path, ": IDX dimensions 268435456 x 268435456 x 256 overflow"));
}

TEST(InspectTest, CountsVerifiesDumpsAndIndexes) {
  const std::string dir = TempDir("inspect");
  auto shards = WriteIdxShards(absl::StrCat(kFmnist, "t10k-images-idx3-ubyte.gz"),
                               absl::StrCat(kFmnist, "t10k-labels-idx1-ubyte.gz"), dir, "test", 2);
  ASSERT_TRUE(shards.ok()) << shards.status();
  const std::string written_index = Slurp(IndexPathFor((*shards)[0]));
  InspectOptions o;
  o.files = *shards;
  o.dump_record = 0;
  o.write_index = true;
  std::ostringstream out;
  ASSERT_TRUE(InspectRecords(o, out).ok()) << out.str();
  EXPECT_NE(out.str().find("total: 10000 records in 2 files"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find((*shards)[1] + ": 5000 records"), std::string::npos) << out.str();
  // The first t10k image is an ankle boot (class 9).
  EXPECT_NE(out.str().find("image/class/label: int64_list[1] = 9\n"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("image/height: int64_list[1] = 28\n"), std::string::npos);
  EXPECT_EQ(Slurp(IndexPathFor((*shards)[0])), written_index);

  // Flip one payload byte of record 100 of shard 1.
  auto index = LoadOrBuildIndex((*shards)[1]);
  ASSERT_TRUE(index.ok());
  std::string bytes = Slurp((*shards)[1]);
  const uint64_t off = (*index)[100].offset;
  bytes[off + 40] ^= 1;
  std::ofstream((*shards)[1], std::ios::binary | std::ios::trunc) << bytes;
  std::ostringstream out2;
  o.dump_record = -1;
  o.write_index = false;
  absl::Status s = InspectRecords(o, out2);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(out2.str().find(absl::StrCat((*shards)[1], ":", off, ": corrupted record: data CRC")),
            std::string::npos)
      << out2.str();
  EXPECT_NE(std::string(s.message()).find("1 of 2 files"), std::string::npos) << s;
}

TEST(ImageFolderTest, SyntheticTreeToImageNetLayout) {
  const std::string root = TempDir("folder");
  ASSERT_TRUE(WriteSyntheticImageFolder(root, 3, 4, 64, 48, 1).ok());
  const std::string out = TempDir("folder_records");
  auto shards = WriteImageFolderShards(root, out, "train", 2);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ((*shards)[0], out + "/train-00000-of-00002");
  auto dataset = Dataset::Open({out + "/train-*"}, {});
  ASSERT_TRUE(dataset.ok());
  ASSERT_EQ((*dataset)->num_samples(), 12);
  std::vector<int> per_label(4, 0);
  bool mixed = false;
  int64_t first_label = -1;
  for (int64_t id = 0; id < 12; ++id) {
    std::string payload;
    ASSERT_TRUE((*dataset)->Read(id, true, &payload).ok());
    Example e;
    ASSERT_TRUE(ParseExample(payload, &e).ok());
    const int64_t label = *GetInt64(e, "image/class/label");
    ASSERT_GE(label, 1);
    ASSERT_LE(label, 3);
    ++per_label[static_cast<size_t>(label)];
    if (id < 6) {
      if (first_label < 0) first_label = label;
      if (label != first_label) mixed = true;
    }
    EXPECT_EQ(*GetBytes(e, "image/class/synset"), absl::StrCat("class", label - 1));
    EXPECT_EQ(*GetInt64(e, "image/height"), 48);
    EXPECT_EQ(*GetInt64(e, "image/width"), 64);
    EXPECT_EQ(*GetBytes(e, "image/format"), "JPEG");
    EXPECT_EQ(*GetBytes(e, "image/colorspace"), "RGB");
    EXPECT_EQ(*GetInt64(e, "image/channels"), 3);
    EXPECT_EQ(ReadJpegHeader(*GetBytes(e, "image/encoded"))->width, 64);
  }
  EXPECT_EQ(per_label, (std::vector<int>{0, 4, 4, 4}));
  EXPECT_TRUE(mixed) << "the first shard should mix classes";

  PipelineOptions o;
  o.batch_size = 4;
  o.decoder = std::make_shared<ImageNetDecoder>(ImageNetDecoderOptions::Train());
  auto pipeline = Pipeline::Create(std::shared_ptr<const Dataset>(std::move(*dataset)), o);
  ASSERT_TRUE(pipeline.ok());
  auto batch = (*pipeline)->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ((*batch)->shape(), TensorShape({4, 3, 224, 224}));
  for (int64_t label : (*batch)->labels()) {
    EXPECT_GE(label, 0);
    EXPECT_LE(label, 2);
  }

  // A file that is not a JPEG is named in the error.
  std::ofstream(root + "/class1/broken.jpg") << "not a jpeg";
  auto bad = WriteImageFolderShards(root, out, "bad", 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(root + "/class1/broken.jpg"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace data
}  // namespace hvx
