// inspect_records: record counts, CRC verification, a record's features, index files.
//
//   inspect_records /data/train-*                 # counts; exit 1 and "file:offset: reason" if
//   corrupt inspect_records --dump=5 /data/train-00000-of-00004 inspect_records --index
//   /data/train-*         # (re)build the .idx files
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "hvx/data/inspect.h"
#include "hvx/data/record.h"

ABSL_FLAG(int64_t, dump, -1, "print the features of record K of each file");
ABSL_FLAG(bool, index, false, "write <file>.idx for each file (uncompressed only)");
ABSL_FLAG(bool, verify, true, "check both CRCs of every record");
ABSL_FLAG(std::string, compression, "", "\"\", ZLIB or GZIP");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "inspect_records [--dump=K] [--index] [--noverify] [--compression=GZIP|ZLIB] FILE...");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  hvx::data::InspectOptions o;
  o.files.assign(rest.begin() + 1, rest.end());
  if (o.files.empty()) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  auto compression = hvx::data::ParseCompression(absl::GetFlag(FLAGS_compression));
  if (!compression.ok()) {
    std::cerr << "inspect_records: " << compression.status().message() << "\n";
    return 2;
  }
  o.compression = *compression;
  o.verify_crc = absl::GetFlag(FLAGS_verify);
  o.dump_record = absl::GetFlag(FLAGS_dump);
  o.write_index = absl::GetFlag(FLAGS_index);
  absl::Status s = hvx::data::InspectRecords(o, std::cout);
  if (!s.ok()) {
    std::cerr << "inspect_records: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
