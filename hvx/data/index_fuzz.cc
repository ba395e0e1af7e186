// Fuzz target: a record file's index (index.h, "<offset> <framed size>" per line), as found beside
// a dataset. The first 8 bytes are the record file's size. An index that is accepted covers the
// file exactly, record after record, each at least a record's framing long.
#include <cstring>
#include <string>
#include <vector>

#include "hvx/data/index.h"
#include "hvx/data/record_format.h"
#include "hvx/testing/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hvx::data;
  if (size < 8) return 0;
  uint64_t file_size = 0;
  std::memcpy(&file_size, data, 8);
  const absl::StatusOr<std::vector<RecordLocation>> index =
      ParseIndex(hvx::fuzz::AsText(data + 8, size - 8), "fuzz.idx", file_size);
  if (!index.ok()) return 0;
  uint64_t at = 0;
  for (const RecordLocation& r : *index) {
    HVX_FUZZ_CHECK(r.offset == at, "an accepted index leaves a gap or overlaps");
    HVX_FUZZ_CHECK(r.length <= file_size - at - kRecordOverhead, "a record runs past the file");
    at += r.length + kRecordOverhead;
  }
  HVX_FUZZ_CHECK(at == file_size, "an accepted index does not cover the file");
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  const auto with_size = [](uint64_t n, const std::string& text) {
    std::string s(8, '\0');
    std::memcpy(&s[0], &n, 8);
    return s + text;
  };
  return {with_size(0, ""), with_size(116, "0 16\n16 100\n"), with_size(48, "0\t32\n\n32 16\n"),
          with_size(20, "0 20\n")};
}
