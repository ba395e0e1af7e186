// Conversion of an image-folder tree (root/<class>/*.jpg) to shards in the standard ImageNet
// TFRecord layout, and a synthetic tree for tests and benchmarks.
//
// clang-format off
//   HVX_ASSIGN_OR_RETURN(auto shards,
//                        WriteImageFolderShards("/raw/train", "/data/in", "train", 8));
//   // train-00000-of-00008 ... with index files; decode with ImageNetDecoder.
// clang-format on
//
// Classes are the subdirectories of root in sorted order; class i gets label i + 1 (0 is the
// "background" of the ImageNet convention, so ImageNetDecoder's default label_offset -1 gives
// 0-based labels). Files ending in .jpg or .jpeg (any case) are taken; anything else in a class
// directory is ignored. The file list is shuffled once with `seed` so that every shard mixes all
// classes, then split into contiguous, nearly equal shards. Features per record:
//   image/encoded (the file's bytes), image/height, image/width, image/channels (3),
//   image/colorspace "RGB", image/format "JPEG", image/filename (basename),
//   image/class/label (1-based), image/class/synset (directory name), image/class/text (same).
#ifndef HVX_DATA_IMAGE_FOLDER_H_
#define HVX_DATA_IMAGE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hvx {
namespace data {

// InvalidArgument naming the file when one is not a readable JPEG.
absl::StatusOr<std::vector<std::string>> WriteImageFolderShards(const std::string& root,
                                                                const std::string& out_dir,
                                                                const std::string& prefix,
                                                                int num_shards,
                                                                uint64_t seed = 12345);

// Writes root/class<k>/img<i>.jpg: num_classes x per_class random-texture JPEGs of width x height
// (quality 90), deterministic in `seed`; each class has its own base colour so that a model can
// learn them apart.
absl::Status WriteSyntheticImageFolder(const std::string& root, int num_classes, int per_class,
                                       int width, int height, uint64_t seed);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_IMAGE_FOLDER_H_
