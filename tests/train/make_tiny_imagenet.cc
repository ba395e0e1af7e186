// Writes a tiny dataset in the standard ImageNet TFRecord layout from synthetic JPEGs, for the
// trainer's end-to-end test of data/imagenet.pbtxt:
//   make_tiny_imagenet OUT_DIR CLASSES TRAIN_PER_CLASS VAL_PER_CLASS
// gives OUT_DIR/train-0000{0,1}-of-00002 and OUT_DIR/validation-00000-of-00001 (index files
// beside them), labels 1..CLASSES as in the standard conversion. The JPEG trees go to
// OUT_DIR/raw/{train,validation}.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hvx/data/image_folder.h"

namespace {

absl::Status Make(const std::string& out, int classes, int train_per_class, int val_per_class) {
  const std::string train_root = out + "/raw/train", val_root = out + "/raw/validation";
  // Not square and not 224: both crops (random-resized and centre) have work to do.
  absl::Status s =
      hvx::data::WriteSyntheticImageFolder(train_root, classes, train_per_class, 96, 72, 1);
  if (s.ok()) s = hvx::data::WriteSyntheticImageFolder(val_root, classes, val_per_class, 96, 72, 2);
  if (s.ok()) s = hvx::data::WriteImageFolderShards(train_root, out, "train", 2).status();
  if (s.ok()) s = hvx::data::WriteImageFolderShards(val_root, out, "validation", 1).status();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int classes = 0, train = 0, val = 0;
  if (argc != 5 || !absl::SimpleAtoi(argv[2], &classes) || !absl::SimpleAtoi(argv[3], &train) ||
      !absl::SimpleAtoi(argv[4], &val) || classes < 1 || train < 1 || val < 1) {
    std::fprintf(stderr,
                 "usage: make_tiny_imagenet OUT_DIR CLASSES TRAIN_PER_CLASS VAL_PER_CLASS\n");
    return 2;
  }
  const absl::Status status = Make(argv[1], classes, train, val);
  if (!status.ok()) {
    std::fprintf(stderr, "make_tiny_imagenet: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
