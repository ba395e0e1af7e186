// Pipeline determinism (same ids and bytes for the same seed and epoch, whatever the threads) and
// resume equivalence, plus dataset discovery and error propagation.
#include "hvx/data/pipeline.h"

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/data/dataset.h"
#include "hvx/data/decoder.h"
#include "hvx/data/example.h"
#include "hvx/data/index.h"
#include "hvx/data/test_util.h"

namespace hvx {
namespace data {
namespace {

struct Seen {
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;
  std::string bytes;
  int64_t num_padded = 0;
  bool operator==(const Seen& o) const {
    return ids == o.ids && labels == o.labels && bytes == o.bytes && num_padded == o.num_padded;
  }
};

std::shared_ptr<const Decoder> ToyDecoder() {
  RawImageDecoderOptions o;
  o.height = 2;
  o.width = 2;
  return std::make_shared<RawImageDecoder>(o);
}

PipelineOptions Options(int rank, int size, int64_t epoch) {
  PipelineOptions o;
  o.plan.rank = rank;
  o.plan.size = size;
  o.plan.epoch = epoch;
  o.plan.seed = 1234;
  o.batch_size = 8;
  o.decoder = ToyDecoder();
  return o;
}

std::vector<Seen> RunEpoch(std::shared_ptr<const Dataset> dataset, const PipelineOptions& o) {
  auto p = Pipeline::Create(dataset, o);
  EXPECT_TRUE(p.ok()) << p.status();
  std::vector<Seen> out;
  while (true) {
    auto batch = (*p)->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    Seen s;
    s.ids = (*batch)->sample_ids();
    s.labels = (*batch)->labels();
    s.bytes.assign(static_cast<const char*>((*batch)->data()), (*batch)->num_bytes());
    s.num_padded = (*batch)->num_padded();
    EXPECT_EQ((*batch)->index(), static_cast<int64_t>(out.size()));
    EXPECT_EQ((*batch)->shape(), TensorShape({static_cast<int64_t>(s.ids.size()), 1, 2, 2}));
    out.push_back(std::move(s));
  }
  EXPECT_EQ(static_cast<int64_t>(out.size()), (*p)->num_batches());
  return out;
}

// Flips a payload bit of record `record` of `file`; returns where the record is.
RecordLocation CorruptPayload(const std::string& file, size_t record) {
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  auto index = LoadOrBuildIndex(file);
  EXPECT_TRUE(index.ok()) << index.status();
  const RecordLocation bad = (*index)[record];
  bytes[bad.offset + 12 + 3] ^= 0x40;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << bytes;
  return bad;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir("pipeline");
    files_ = WriteToyShards(dir_, 3, 100);
    auto d = Dataset::Open({dir_ + "/toy-*-of-*"}, {});
    ASSERT_TRUE(d.ok()) << d.status();
    dataset_ = std::move(*d);
  }
  std::string dir_;
  std::vector<std::string> files_;
  std::shared_ptr<const Dataset> dataset_;
};

TEST_F(PipelineTest, ExpandsPatternsAndIgnoresIndexFiles) {
  auto files = ExpandFilePatterns({dir_ + "/toy-*"});
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(*files, files_);
  auto none = ExpandFilePatterns({dir_ + "/toy-*", dir_ + "/train-*"});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(none.status().message()),
            absl::StrCat("file pattern '", dir_, "/train-*' matches no record files"));
  auto nodir = ExpandFilePatterns({"/nonexistent/dir/x-*"});
  EXPECT_EQ(std::string(nodir.status().message()),
            "file pattern '/nonexistent/dir/x-*' matches no record "
            "files (directory /nonexistent/dir/ does not exist)");
  EXPECT_EQ(dataset_->num_samples(), 100);
  EXPECT_EQ(dataset_->files().size(), 3u);
  std::string payload;
  ASSERT_TRUE(dataset_->Read(57, true, &payload).ok());
  Example e;
  ASSERT_TRUE(e.ParseFromString(payload));
  EXPECT_EQ(e.features().feature().at("image/class/label").int64_list().value(0), 7);
}

TEST_F(PipelineTest, SameIdsAndBytesWhateverTheThreads) {
  PipelineOptions a = Options(1, 3, 5);
  a.reader_threads = 1;
  a.decode_threads = 1;
  a.prefetch_batches = 1;
  a.samples_per_task = 1;
  PipelineOptions b = Options(1, 3, 5);
  b.reader_threads = 3;
  b.decode_threads = 4;
  b.prefetch_batches = 3;
  b.samples_per_task = 5;
  DatasetOptions mmap;
  mmap.use_mmap = true;
  auto mapped_dataset = Dataset::Open({dir_ + "/toy-*-of-*"}, mmap);
  ASSERT_TRUE(mapped_dataset.ok());
  EXPECT_FALSE(dataset_->mapped());
  EXPECT_TRUE((*mapped_dataset)->mapped());
  DatasetOptions memory;
  memory.load_into_memory = true;
  auto loaded_dataset = Dataset::Open({dir_ + "/toy-*-of-*"}, memory);
  ASSERT_TRUE(loaded_dataset.ok());
  EXPECT_TRUE((*loaded_dataset)->mapped());
  std::vector<Seen> ra = RunEpoch(dataset_, a),
                    rb = RunEpoch(std::shared_ptr<const Dataset>(std::move(*mapped_dataset)), b),
                    rc = RunEpoch(std::shared_ptr<const Dataset>(std::move(*loaded_dataset)), a);
  ASSERT_EQ(ra.size(), 5u);  // ceil(100 / 3) = 34 samples: 4 batches of 8 and one of 2
  EXPECT_EQ(ra, rb);
  EXPECT_EQ(ra, rc);
  EXPECT_EQ(ra.back().ids.size(), 2u);
  // Decoded bytes are the samples' pixels and labels.
  for (const Seen& s : ra) {
    for (size_t i = 0; i < s.ids.size(); ++i) {
      EXPECT_EQ(static_cast<uint8_t>(s.bytes[4 * i]), s.ids[i] & 0xff);
      EXPECT_EQ(static_cast<uint8_t>(s.bytes[4 * i + 3]), (s.ids[i] + 3) & 0xff);
      EXPECT_EQ(s.labels[i], s.ids[i] % 10);
    }
  }
  // Another epoch is another order.
  std::vector<Seen> next_epoch = RunEpoch(dataset_, Options(1, 3, 6));
  EXPECT_NE(next_epoch[0].ids, ra[0].ids);
}

TEST_F(PipelineTest, RanksGetEqualBatchCountsAndCoverTheDataset) {
  for (RemainderPolicy policy : {RemainderPolicy::kPad, RemainderPolicy::kDrop}) {
    std::set<int64_t> all;
    int64_t padded = 0;
    size_t batches = 0;
    for (int r = 0; r < 3; ++r) {
      PipelineOptions o = Options(r, 3, 2);
      o.plan.remainder = policy;
      std::vector<Seen> run = RunEpoch(dataset_, o);
      if (r == 0) batches = run.size();
      EXPECT_EQ(run.size(), batches);
      for (const Seen& s : run) {
        all.insert(s.ids.begin(), s.ids.end());
        padded += s.num_padded;
      }
    }
    if (policy == RemainderPolicy::kPad) {
      EXPECT_EQ(all.size(), 100u);
      EXPECT_EQ(padded, 2);
    } else {
      EXPECT_EQ(all.size(), 99u);
      EXPECT_EQ(padded, 0);
    }
  }
}

TEST_F(PipelineTest, ResumeGivesTheRemainingBatchesExactly) {
  for (int size : {1, 2, 3}) {
    for (int rank = 0; rank < size; ++rank) {
      std::vector<Seen> full = RunEpoch(dataset_, Options(rank, size, 4));
      for (size_t done = 1; done < full.size(); done += 2) {
        PipelineOptions o = Options(rank, size, 4);
        o.plan.consumed = static_cast<int64_t>(done) * o.batch_size * size;
        std::vector<Seen> rest = RunEpoch(dataset_, o);
        ASSERT_EQ(rest.size(), full.size() - done);
        for (size_t i = 0; i < rest.size(); ++i) {
          EXPECT_EQ(rest[i], full[done + i])
              << "size " << size << " rank " << rank << " done " << done;
        }
      }
    }
  }
}

TEST_F(PipelineTest, BatchesOutliveThePipeline) {
  std::vector<std::unique_ptr<Batch>> kept;
  std::vector<Seen> expected = RunEpoch(dataset_, Options(0, 2, 1));
  {
    auto p = Pipeline::Create(dataset_, Options(0, 2, 1));
    ASSERT_TRUE(p.ok());
    for (int i = 0; i < 3; ++i) {
      auto b = (*p)->Next();
      ASSERT_TRUE(b.ok());
      kept.push_back(std::move(*b));
    }
  }  // pipeline destroyed; its buffer pool lives on with the batches
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i]->sample_ids(), expected[i].ids);
    EXPECT_EQ(std::string(static_cast<const char*>(kept[i]->data()), kept[i]->num_bytes()),
              expected[i].bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(kept[i]->data()) % 64, 0u);
  }
}

TEST_F(PipelineTest, DropLastBatch) {
  PipelineOptions o = Options(0, 3, 0);
  o.drop_last_batch = true;
  std::vector<Seen> run = RunEpoch(dataset_, o);
  EXPECT_EQ(run.size(), 4u);
  for (const Seen& s : run) EXPECT_EQ(s.ids.size(), 8u);
}

// A limited evaluation: the epoch ends after max_batches, and nothing past them is read, however
// deep the prefetch (a corrupt record there goes unnoticed).
TEST_F(PipelineTest, MaxBatchesEndsTheEpochAndReadsNothingPastIt) {
  PipelineOptions o = Options(0, 2, 0);
  o.plan.shuffle =
      false;  // rank 0 reads samples 0, 2, 4, ...; its first 2 batches end at sample 30
  o.prefetch_batches = 8;
  const std::vector<Seen> full = RunEpoch(dataset_, o);
  ASSERT_EQ(full.size(), 7u);
  CorruptPayload(files_[1], 7);  // sample 40: rank 0's third batch

  o.max_batches = 2;
  auto p = Pipeline::Create(dataset_, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->num_batches(), 2);
  for (size_t i = 0; i < 2; ++i) {
    auto batch = (*p)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ((*batch)->sample_ids(), full[i].ids);
  }
  EXPECT_EQ((*p)->Next().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*p)->stats().samples, 16);

  o.max_batches = 0;
  p = Pipeline::Create(dataset_, o);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::Status status;
  while (status.ok()) status = (*p)->Next().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("rank 0 reading sample 40"), std::string::npos) << status;

  o.max_batches = -1;
  EXPECT_EQ(Pipeline::Create(dataset_, o).status().message(),
            "pipeline: max_batches (-1) must not be negative");
}

TEST_F(PipelineTest, FloatOutputIsNormalised) {
  RawImageDecoderOptions d;
  d.height = 2;
  d.width = 2;
  d.dtype = DataType::kFloat32;
  d.mean = {0.5f};
  d.stddev = {0.25f};
  PipelineOptions o = Options(0, 1, 0);
  o.decoder = std::make_shared<RawImageDecoder>(d);
  auto p = Pipeline::Create(dataset_, o);
  ASSERT_TRUE(p.ok());
  auto batch = (*p)->Next();
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)->dtype(), DataType::kFloat32);
  EXPECT_EQ((*batch)->num_bytes(), 8u * 4 * 4);
  const float* px = static_cast<const float*>((*batch)->data());
  const int64_t id = (*batch)->sample_ids()[0];
  EXPECT_FLOAT_EQ(px[0], ((id & 0xff) / 255.0f - 0.5f) / 0.25f);
}

TEST_F(PipelineTest, CorruptRecordReachesTheConsumerWithFileAndOffset) {
  const RecordLocation bad = CorruptPayload(files_[1], 5);
  PipelineOptions o = Options(0, 1, 0);
  o.decode_threads = 3;
  auto p = Pipeline::Create(dataset_, o);
  ASSERT_TRUE(p.ok());
  absl::Status status;
  while (true) {
    auto batch = (*p)->Next();
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(
                absl::StrCat(files_[1], ":", bad.offset, ": corrupted record: data CRC")),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("rank 0 reading sample 38"), std::string::npos) << status;

  // skip_corrupt_files leaves the file out and says so.
  DatasetOptions skip;
  skip.verify_on_open = true;
  skip.skip_corrupt_files = true;
  auto d = Dataset::Open({dir_ + "/toy-*"}, skip);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->num_samples(), 67);
  ASSERT_EQ((*d)->skipped_files().size(), 1u);
  EXPECT_EQ((*d)->skipped_files()[0].path, files_[1]);
  EXPECT_NE((*d)->skipped_files()[0].reason.find("data CRC mismatch"), std::string::npos);
  // Without the option, verification fails the open.
  skip.skip_corrupt_files = false;
  EXPECT_EQ(Dataset::Open({dir_ + "/toy-*"}, skip).status().code(), absl::StatusCode::kDataLoss);
}

// A shard rewritten or cut short while a run reads it (the default pread() path): the consumer
// gets DataLoss naming the file and the record, and the process lives on.
TEST_F(PipelineTest, ShardTruncatedDuringTheRunIsAnErrorNotACrash) {
  auto index = LoadOrBuildIndex(files_[2]);
  ASSERT_TRUE(index.ok());
  const RecordLocation cut = (*index)[index->size() / 2];
  PipelineOptions o = Options(0, 1, 0);
  o.decode_threads = 2;
  o.prefetch_batches = 1;
  auto p = Pipeline::Create(dataset_, o);
  ASSERT_TRUE(p.ok());
  auto first = (*p)->Next();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(::truncate(files_[2].c_str(), static_cast<off_t>(cut.offset + 3)), 0);
  absl::Status status;
  int64_t batches = 1;
  while (true) {
    auto batch = (*p)->Next();
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
    ++batches;
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(absl::StrCat(files_[2], ":")), std::string::npos) << status;
  EXPECT_NE(status.message().find("truncated record"), std::string::npos) << status;
  EXPECT_LT(batches, (*p)->num_batches());
  // The records before the cut still read.
  std::string payload;
  EXPECT_TRUE(
      dataset_->Read(dataset_->num_samples() - static_cast<int64_t>(index->size()), true, &payload)
          .ok());
}

TEST_F(PipelineTest, DecodeErrorNamesTheSample) {
  RawImageDecoderOptions d;  // expects 28x28: the toy records hold 2x2
  PipelineOptions o = Options(0, 1, 0);
  o.decoder = std::make_shared<RawImageDecoder>(d);
  o.plan.shuffle = false;
  auto p = Pipeline::Create(dataset_, o);
  ASSERT_TRUE(p.ok());
  auto batch = (*p)->Next();
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(batch.status().message().find(files_[0] + ":"), std::string::npos) << batch.status();
  EXPECT_NE(batch.status().message().find("feature 'image/raw' has 4 bytes, expected 1x28x28"),
            std::string::npos)
      << batch.status();
}

TEST_F(PipelineTest, StopsCleanlyMidEpochAndReportsCounters) {
  for (int i = 0; i < 20; ++i) {
    PipelineOptions o = Options(0, 1, i);
    o.batch_size = 2;
    o.reader_threads = 2;
    o.decode_threads = 2;
    auto p = Pipeline::Create(dataset_, o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->Next().ok());
    PipelineStats s = (*p)->stats();
    EXPECT_GE(s.samples, 2);
    EXPECT_EQ(s.batches, 1);
    EXPECT_GT(s.bytes_read, 0);
    EXPECT_GE(s.consumer_wait_s, 0.0);
  }  // destroyed with batches in flight
  PipelineOptions bad = Options(0, 1, 0);
  bad.batch_size = 0;
  EXPECT_EQ(Pipeline::Create(dataset_, bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Options(3, 2, 0);
  EXPECT_EQ(Pipeline::Create(dataset_, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace hvx
