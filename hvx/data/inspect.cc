#include "hvx/data/inspect.h"

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"
#include "hvx/data/example.h"
#include "hvx/data/index.h"

namespace hvx {
namespace data {
namespace {

// Reads one file; prints its summary and dump. Returns the corruption status, if any.
absl::Status InspectFile(const std::string& path, const InspectOptions& options, std::ostream& out,
                         int64_t* records_out) {
  RecordReaderOptions ro;
  ro.compression = options.compression;
  ro.verify_crc = options.verify_crc;
  HVX_ASSIGN_OR_RETURN(auto reader, RecordReader::Open(path, ro));
  std::vector<RecordLocation> index;
  int64_t records = 0;
  uint64_t bytes = 0;
  while (true) {
    const uint64_t offset = reader->offset();
    absl::string_view record;
    absl::Status s = reader->ReadRecord(&record);
    if (absl::IsOutOfRange(s)) break;
    if (!s.ok()) {
      out << s.message() << "\n";
      *records_out += records;
      return s;
    }
    if (records == options.dump_record) {
      Example example;
      out << path << ": record " << records << " at offset " << offset << " (" << record.size()
          << " bytes):\n";
      if (ParseExample(record, &example).ok()) {
        out << DescribeExample(example);
      } else {
        out << "  (not an Example)\n";
      }
    }
    if (options.write_index) index.push_back({offset, record.size()});
    ++records;
    bytes += record.size();
  }
  if (options.dump_record >= records) {
    out << path << ": has no record " << options.dump_record << " (" << records << " records)\n";
  }
  std::string extra;
  if (options.write_index) {
    HVX_RETURN_IF_ERROR(WriteIndexFile(IndexPathFor(path), index));
    extra = absl::StrCat(", index written to ", IndexPathFor(path));
  }
  out << path << ": " << records << " records, " << bytes << " payload bytes"
      << (options.verify_crc ? ", CRCs ok" : "") << extra << "\n";
  *records_out += records;
  return absl::OkStatus();
}

}  // namespace

absl::Status InspectRecords(const InspectOptions& options, std::ostream& out) {
  if (options.files.empty()) return absl::InvalidArgumentError("no record files given");
  if (options.write_index && options.compression != Compression::kNone) {
    return absl::InvalidArgumentError("index files exist only for uncompressed record files");
  }
  int64_t total = 0;
  int bad = 0;
  absl::Status first;
  std::vector<std::string> files;
  for (const std::string& path : options.files) {
    // A shell glob such as "train-*" also matches the index files beside the shards.
    if (IsIndexPath(path)) {
      out << path << ": index file, not inspected\n";
    } else {
      files.push_back(path);
    }
  }
  for (const std::string& path : files) {
    absl::Status s = InspectFile(path, options, out, &total);
    if (!s.ok()) {
      if (!absl::IsDataLoss(s)) out << s.message() << "\n";
      ++bad;
      if (first.ok()) first = s;
    }
  }
  out << "total: " << total << " records in " << files.size() << " files\n";
  if (bad == 0) return absl::OkStatus();
  return absl::Status(first.code(),
                      absl::StrCat(bad, " of ", files.size(),
                                   " files could not be read: first: ", first.message()));
}

}  // namespace data
}  // namespace hvx
