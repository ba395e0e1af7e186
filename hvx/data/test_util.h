// Small record datasets and synthetic photographs for tests and benchmarks.
//
//   std::vector<std::string> files = WriteToyShards(TempDir("toy"), 3, 100);  // ids 0..99
//   // record i: image/raw = 4 bytes {i, i+1, i+2, i+3} (mod 256), 2x2x1; label i % 10
#ifndef HVX_DATA_TEST_UTIL_H_
#define HVX_DATA_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hvx/data/jpeg.h"

namespace hvx {
namespace data {

// $TEST_TMPDIR/<name>, created.
std::string TempDir(const std::string& name);

// Writes `num_samples` toy Examples over `num_files` shards "toy-0000K-of-0000N" (with index
// files), sample ids in file order; returns the paths.
std::vector<std::string> WriteToyShards(const std::string& dir, int num_files, int num_samples);

// A synthetic photograph for benchmarks and tests: per channel, value noise summed over octaves
// with amplitude proportional to the wavelength (the 1/f spectrum of natural images), a few
// hard-edged discs and bars, and mild sensor noise. At 500x375 and quality 90 it encodes to about
// 100-120 KB, like an ImageNet photo; smooth synthetic images encode (and decode) far cheaper.
RgbImage SyntheticPhoto(int width, int height, uint64_t seed);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_TEST_UTIL_H_
