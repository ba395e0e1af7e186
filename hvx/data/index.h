// Index files: the offset and size of every record of an uncompressed record file, so that a
// reader can start at any record and a dataset can be partitioned at record granularity.
//
//   HVX_ASSIGN_OR_RETURN(std::vector<RecordLocation> index, LoadOrBuildIndex(path));
//   file->ReadAt(index[k], /*verify_crc=*/true, &payload);   // record k
//
// Format (the one NVIDIA DALI's tfrecord2idx writes, so either tool's files work with the other):
// a text file beside the record file, named IndexPathFor(path) = path + ".idx", one line per
// record, "<offset of the record start> <framed size = payload length + 16>\n", ASCII decimal.
#ifndef HVX_DATA_INDEX_H_
#define HVX_DATA_INDEX_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/data/record_file.h"

namespace hvx {
namespace data {

constexpr absl::string_view kIndexSuffix = ".idx";

// `record_path` + ".idx".
std::string IndexPathFor(const std::string& record_path);
bool IsIndexPath(absl::string_view path);

// Writes the index atomically (temporary file, then rename).
absl::Status WriteIndexFile(const std::string& index_path,
                            const std::vector<RecordLocation>& index);

// An index file's contents (`index_path` names it in errors), checked as ReadIndexFile does.
absl::StatusOr<std::vector<RecordLocation>> ParseIndex(absl::string_view contents,
                                                       absl::string_view index_path,
                                                       uint64_t record_file_size);

// Reads an index and checks it against the record file's size: records must be contiguous from
// offset 0 and end exactly at `record_file_size`. Errors name the index file and line.
absl::StatusOr<std::vector<RecordLocation>> ReadIndexFile(const std::string& index_path,
                                                          uint64_t record_file_size);

// Walks the record headers of an uncompressed file (checking the length CRCs; with
// verify_payload also reading every payload and checking its CRC). DataLoss names file and offset.
absl::StatusOr<std::vector<RecordLocation>> BuildIndex(const std::string& record_path,
                                                       bool verify_payload);

// The index from IndexPathFor(record_path) when it exists, else BuildIndex(record_path, false).
absl::StatusOr<std::vector<RecordLocation>> LoadOrBuildIndex(const std::string& record_path);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_INDEX_H_
