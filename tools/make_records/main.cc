// make_records: converts a dataset into TFRecord shards with index files.
//
//   make_records --idx_images=train-images-idx3-ubyte.gz --idx_labels=train-labels-idx1-ubyte.gz
//       --out_dir=/data/fmnist --prefix=train --shards=4
//   make_records --image_folder=/raw/train --out_dir=/data/imagenet --prefix=train --shards=1024
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "hvx/data/idx.h"
#include "hvx/data/image_folder.h"

ABSL_FLAG(std::string, idx_images, "", "IDX image file (uint8 N x H x W), gzip or plain");
ABSL_FLAG(std::string, idx_labels, "", "IDX label file (uint8 N), gzip or plain");
ABSL_FLAG(std::string, image_folder, "", "root of an image tree root/<class>/*.jpg");
ABSL_FLAG(std::string, out_dir, "", "directory for the shards (created if missing)");
ABSL_FLAG(std::string, prefix, "train", "shard name prefix: <prefix>-00000-of-0000N");
ABSL_FLAG(int, shards, 1, "number of shards");
ABSL_FLAG(uint64_t, seed, 12345, "image folder: seed of the one-time shuffle of the file list");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "make_records (--idx_images=F --idx_labels=F | --image_folder=DIR) --out_dir=DIR "
      "[--prefix=train] [--shards=N]");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  const bool idx =
      !absl::GetFlag(FLAGS_idx_images).empty() || !absl::GetFlag(FLAGS_idx_labels).empty();
  const bool folder = !absl::GetFlag(FLAGS_image_folder).empty();
  if (rest.size() > 1 || idx == folder || absl::GetFlag(FLAGS_out_dir).empty()) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  absl::StatusOr<std::vector<std::string>> shards =
      idx ? hvx::data::WriteIdxShards(absl::GetFlag(FLAGS_idx_images),
                                      absl::GetFlag(FLAGS_idx_labels), absl::GetFlag(FLAGS_out_dir),
                                      absl::GetFlag(FLAGS_prefix), absl::GetFlag(FLAGS_shards))
          : hvx::data::WriteImageFolderShards(
                absl::GetFlag(FLAGS_image_folder), absl::GetFlag(FLAGS_out_dir),
                absl::GetFlag(FLAGS_prefix), absl::GetFlag(FLAGS_shards),
                absl::GetFlag(FLAGS_seed));
  if (!shards.ok()) {
    std::cerr << "make_records: " << shards.status().message() << "\n";
    return 1;
  }
  for (const std::string& path : *shards) std::cout << path << "\n";
  return 0;
}
