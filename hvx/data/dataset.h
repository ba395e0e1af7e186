// A set of record files seen as one sequence of samples with global ids.
//
//   HVX_ASSIGN_OR_RETURN(auto dataset, Dataset::Open({"/data/train-*-of-*"}, {}));
//   std::string payload;  HVX_RETURN_IF_ERROR(dataset->Read(12345, true, &payload));
//
// Files are the sorted matches of each pattern, in pattern order (index files, "*.idx", are never
// data). Sample ids number the records of the first file 0..n0-1, then the second file's, and so
// on, so a sample id is stable for a given list of files and is what ShardPlan permutes. Record
// offsets come from each file's index (IndexPathFor), built by walking the headers when absent.
#ifndef HVX_DATA_DATASET_H_
#define HVX_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/data/record.h"

namespace hvx {
namespace data {

// The files matching each glob pattern (sorted per pattern, duplicates removed, index files left
// out). NotFound naming the pattern when one matches no record file.
absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(
    const std::vector<std::string>& patterns);

struct DatasetOptions {
  // Read every record of every file at open time and check both CRCs.
  bool verify_on_open = false;
  // With verify_on_open: leave out files with any corruption instead of failing, and list them in
  // skipped_files(). Every rank opening the same files skips the same ones.
  bool skip_corrupt_files = false;
  // Memory-map the files (records are then read without a system call or a copy) instead of one
  // pread() per record. Opt-in: a mapped file truncated during the run kills the process with
  // SIGBUS, where pread() gives a DataLoss error naming file and offset (see RecordFile).
  bool use_mmap = false;
  // Read every file into memory at open (the dataset's size in RAM): no system call per record,
  // and safe against later truncation. For datasets that fit, e.g. Fashion-MNIST (52 MB).
  // Takes precedence over use_mmap.
  bool load_into_memory = false;
};

class Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::vector<std::string>& patterns,
                                                       const DatasetOptions& options);
  // The same for an explicit list of files.
  static absl::StatusOr<std::unique_ptr<Dataset>> OpenFiles(const std::vector<std::string>& files,
                                                            const DatasetOptions& options);

  int64_t num_samples() const { return static_cast<int64_t>(locations_.size()); }
  const std::vector<std::string>& files() const { return paths_; }
  const std::vector<CorruptionReport>& skipped_files() const { return skipped_; }

  // Reads sample `id` into *payload. Thread-safe. DataLoss "<path>:<offset>: ..." on corruption.
  absl::Status Read(int64_t id, bool verify_crc, std::string* payload) const;
  // Without a copy when the file is mapped (*payload then stays valid while the Dataset lives);
  // otherwise the bytes land in *scratch. Thread-safe.
  absl::Status View(int64_t id, bool verify_crc, std::string* scratch,
                    absl::string_view* payload) const;
  // As View, reading into `buffer` of FramedSize(id) bytes (unused when mapped). Thread-safe.
  absl::Status ViewInto(int64_t id, bool verify_crc, char* buffer,
                        absl::string_view* payload) const;
  size_t FramedSize(int64_t id) const { return RecordFile::FramedSize(LocationOf(id)); }
  bool mapped() const { return mapped_; }
  // "<path>:<offset> (sample <id>)", for error messages.
  std::string DescribeSample(int64_t id) const;
  // Which file and where.
  const std::string& FileOf(int64_t id) const;
  RecordLocation LocationOf(int64_t id) const { return locations_[static_cast<size_t>(id)]; }

 private:
  Dataset() = default;
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<RecordFile>> files_;
  std::vector<RecordLocation> locations_;  // per sample id
  std::vector<uint32_t> file_of_;          // per sample id
  std::vector<CorruptionReport> skipped_;
  bool mapped_ = false;  // every file is memory-mapped
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_DATASET_H_
