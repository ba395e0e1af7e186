// IDX files (the MNIST / Fashion-MNIST format) and their conversion to record shards.
//
//   HVX_ASSIGN_OR_RETURN(std::vector<std::string> shards, WriteIdxShards(
//       images_gz, labels_gz, "/data/fmnist", "train", 4));   // train-00000-of-00004 ... + .idx
//
// IDX: big-endian; bytes 0-1 zero, byte 2 the element type (0x08 = uint8), byte 3 the number of
// dimensions d, then d uint32 sizes, then the data row-major. Files may be gzip-compressed (as
// Debian's dataset-fashion-mnist ships them) or plain; both are read directly.
//
// Each record is an Example with
//   image/raw       bytes  height*width uint8 pixels, row-major (0 = background)
//   image/height, image/width, image/channels (= 1)   int64
//   image/class/label                                  int64, as stored (Fashion-MNIST: 0..9)
// which RawImageDecoder reads. Shard k of n holds samples [floor(N*k/n), floor(N*(k+1)/n)) in IDX
// order, so a Dataset over the shards numbers samples exactly as the IDX file does.
#ifndef HVX_DATA_IDX_H_
#define HVX_DATA_IDX_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hvx {
namespace data {

struct IdxArray {
  uint8_t type = 0;           // 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D f32, 0x0E f64
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::string data;           // raw big-endian elements
};

// Reads a whole IDX file (gzip or plain). Errors name the file and the bad field.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// "<prefix>-<k, 5 digits>-of-<n, 5 digits>", the TensorFlow shard naming.
std::string ShardFileName(const std::string& prefix, int shard, int num_shards);

// Writes samples 0..n-1 in order into `num_shards` record files (with index files) named by
// ShardFileName under `out_dir` (created if missing), shard s holding samples [n*s/num_shards,
// n*(s+1)/num_shards); `record(i)` returns sample i's serialized record. Returns the paths.
// InvalidArgument when num_shards is not in [1, n]; the first error of `record` or of a write.
absl::StatusOr<std::vector<std::string>> WriteShards(
    const std::string& out_dir, const std::string& prefix, int num_shards, int64_t n,
    const std::function<absl::StatusOr<std::string>(int64_t i)>& record);

// Converts an image IDX file (uint8, N x H x W) and a label IDX file (uint8, N) into `num_shards`
// record files plus their index files in out_dir (created if missing). Returns the shard paths.
absl::StatusOr<std::vector<std::string>> WriteIdxShards(const std::string& images_path,
                                                        const std::string& labels_path,
                                                        const std::string& out_dir,
                                                        const std::string& prefix, int num_shards);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_IDX_H_
