// Small record datasets for tests.
//
//   std::vector<std::string> files = WriteToyShards(TempDir("toy"), 3, 100);  // ids 0..99
//   // record i: image/raw = 4 bytes {i, i+1, i+2, i+3} (mod 256), 2x2x1; label i % 10
#ifndef HVX_DATA_TEST_UTIL_H_
#define HVX_DATA_TEST_UTIL_H_

#include <string>
#include <vector>

namespace hvx {
namespace data {

// $TEST_TMPDIR/<name>, created.
std::string TempDir(const std::string& name);

// Writes `num_samples` toy Examples over `num_files` shards "toy-0000K-of-0000N" (with index
// files), sample ids in file order; returns the paths.
std::vector<std::string> WriteToyShards(const std::string& dir, int num_files, int num_samples);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_TEST_UTIL_H_
