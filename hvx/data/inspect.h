// What inspect_records does, as library calls: count and verify records, dump one record's
// features, build index files.
//
//   InspectOptions o;  o.files = {"/data/train-00000-of-00004"};
//   absl::Status s = InspectRecords(o, std::cout);   // DataLoss when any file is corrupt
//
// Output, one line per file: "<path>: <records> records, <bytes> bytes[, index written]";
// corruption: "<path>:<offset>: <reason>"; then "total: <records> records in <files> files".
#ifndef HVX_DATA_INSPECT_H_
#define HVX_DATA_INSPECT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "hvx/data/record.h"

namespace hvx {
namespace data {

struct InspectOptions {
  std::vector<std::string> files;
  Compression compression = Compression::kNone;
  bool verify_crc = true;
  // >= 0: print the features of record `dump_record` of each file (as an Example, or its size
  // when the payload is not one).
  int64_t dump_record = -1;
  // Write IndexPathFor(file) for each file (uncompressed files only; after verification).
  bool write_index = false;
};

// Index files among `files` (a shell glob like train-* matches them) are listed and passed over.
// Goes through every file even after a corrupt one; returns DataLoss ("N of M files are
// corrupt") if any was, after printing each problem as "<path>:<offset>: <reason>".
absl::Status InspectRecords(const InspectOptions& options, std::ostream& out);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_INSPECT_H_
