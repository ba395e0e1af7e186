#include "hvx/train/data_identity.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"

namespace hvx {
namespace train {
namespace {

// A file's size in bytes, -1 when it cannot be read.
int64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

}  // namespace

uint64_t Fingerprint(absl::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string FilesFingerprint(const data::Dataset& d) {
  std::string text;
  for (const std::string& path : d.files()) absl::StrAppend(&text, path, " ", FileSize(path), "\n");
  return absl::StrCat(d.files().size(), " files, fingerprint ",
                      absl::Hex(Fingerprint(text), absl::kZeroPad16));
}

std::string DataOrder(const TrainConfig& config, const data::Dataset& d) {
  std::string sizes;
  for (const std::string& path : d.files()) absl::StrAppend(&sizes, FileSize(path), "\n");
  return absl::StrCat("shuffle_seed ", config.data().shuffle_seed(), ", remainder ",
                      RemainderPolicy_Name(config.data().remainder()), ", ", d.num_samples(),
                      " samples in ", d.files().size(), " files, sizes ",
                      absl::Hex(Fingerprint(sizes), absl::kZeroPad16));
}

}  // namespace train
}  // namespace hvx
