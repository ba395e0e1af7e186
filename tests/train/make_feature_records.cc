// Rewrites a Fashion-MNIST-shaped IDX pair as Example shards whose input is stored every way
// format EXAMPLE reads, for tests/train/example_format_test.py:
//   make_feature_records IMAGES_IDX LABELS_IDX OUT_DIR PREFIX SHARDS
// Each record has
//   pixels_f    float_list of 784: pixel / 255
//   pixels_i    int64_list of 784: the pixels
//   pixels_rgb  bytes: 28 x 28 x 3 uint8, the grey pixel in every channel (channels last)
//   pixels_f32  bytes: 784 little-endian float32, pixel / 255
//   label       int64
// in IDX order, with index files, as OUT_DIR/PREFIX-0000k-of-0000n.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hvx/data/example.h"
#include "hvx/data/idx.h"

namespace {

absl::Status Make(const std::string& images_path, const std::string& labels_path,
                  const std::string& out, const std::string& prefix, int shards) {
  auto images = hvx::data::ReadIdxFile(images_path);
  if (!images.ok()) return images.status();
  auto labels = hvx::data::ReadIdxFile(labels_path);
  if (!labels.ok()) return labels.status();
  const int64_t n = images->dims[0], pixels = images->dims[1] * images->dims[2];
  return hvx::data::WriteShards(
             out, prefix, shards, n,
             [&](int64_t i) -> absl::StatusOr<std::string> {
               const auto* p = reinterpret_cast<const uint8_t*>(images->data.data()) + i * pixels;
               std::vector<float> f(pixels);
               std::vector<int64_t> ints(pixels);
               std::string rgb(pixels * 3, '\0'), f32(pixels * 4, '\0');
               for (int64_t k = 0; k < pixels; ++k) {
                 f[k] = p[k] / 255.0f;
                 ints[k] = p[k];
                 for (int c = 0; c < 3; ++c) rgb[k * 3 + c] = static_cast<char>(p[k]);
                 std::memcpy(&f32[k * 4], &f[k], 4);
               }
               hvx::data::Example e;
               hvx::data::SetFloatList(&e, "pixels_f", f);
               hvx::data::SetInt64List(&e, "pixels_i", ints);
               hvx::data::SetBytes(&e, "pixels_rgb", rgb);
               hvx::data::SetBytes(&e, "pixels_f32", f32);
               hvx::data::SetInt64(&e, "label", static_cast<uint8_t>(labels->data[i]));
               return hvx::data::SerializeExample(e);
             })
      .status();
}

}  // namespace

int main(int argc, char** argv) {
  int shards = 0;
  if (argc != 6 || !absl::SimpleAtoi(argv[5], &shards)) {
    std::fprintf(stderr,
                 "usage: make_feature_records IMAGES_IDX LABELS_IDX OUT_DIR PREFIX SHARDS\n");
    return 2;
  }
  absl::Status s = Make(argv[1], argv[2], argv[3], argv[4], shards);
  if (!s.ok()) {
    std::fprintf(stderr, "make_feature_records: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
