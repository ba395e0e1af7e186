#include "hvx/data/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/data/example.h"
#include "hvx/data/idx.h"
#include "hvx/data/jpeg.h"
#include "hvx/data/random.h"
#include "hvx/data/record.h"

namespace hvx {
namespace data {
namespace {

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir, bool want_dirs) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, absl::StrCat("listing ", dir));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (::stat(absl::StrCat(dir, "/", name).c_str(), &st) != 0) continue;
    if (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, absl::StrCat("reading ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Item {
  std::string path;
  std::string name;
  int64_t label;
  std::string synset;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> WriteImageFolderShards(const std::string& root,
                                                                const std::string& out_dir,
                                                                const std::string& prefix,
                                                                int num_shards, uint64_t seed) {
  HVX_ASSIGN_OR_RETURN(std::vector<std::string> classes, ListDir(root, /*want_dirs=*/true));
  if (classes.empty()) {
    return absl::NotFoundError(
        absl::StrCat(root, " has no class subdirectories (expected root/<class>/*.jpg)"));
  }
  std::vector<Item> items;
  for (size_t c = 0; c < classes.size(); ++c) {
    const std::string dir = absl::StrCat(root, "/", classes[c]);
    HVX_ASSIGN_OR_RETURN(std::vector<std::string> files, ListDir(dir, /*want_dirs=*/false));
    for (const std::string& f : files) {
      std::string lower = absl::AsciiStrToLower(f);
      if (!absl::EndsWith(lower, ".jpg") && !absl::EndsWith(lower, ".jpeg")) continue;
      items.push_back({absl::StrCat(dir, "/", f), f, static_cast<int64_t>(c + 1), classes[c]});
    }
  }
  if (items.empty()) return absl::NotFoundError(absl::StrCat("no .jpg/.jpeg files under ", root));
  if (num_shards < 1 || num_shards > static_cast<int>(items.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", items.size(), " images into ", num_shards, " shards"));
  }
  SampleRng rng(MixSeed(seed, 0x1f01de7));
  for (size_t i = items.size() - 1; i > 0; --i) std::swap(items[i], items[rng.Below(i + 1)]);
  const int64_t n = static_cast<int64_t>(items.size());
  return WriteShards(out_dir, prefix, num_shards, n, [&](int64_t i) -> absl::StatusOr<std::string> {
    const Item& item = items[static_cast<size_t>(i)];
    HVX_ASSIGN_OR_RETURN(std::string jpeg, ReadFile(item.path));
    absl::StatusOr<JpegInfo> info = ReadJpegHeader(jpeg);
    if (!info.ok()) return Annotate(info.status(), item.path);
    Example e;
    SetBytes(&e, "image/encoded", jpeg);
    SetInt64(&e, "image/height", info->height);
    SetInt64(&e, "image/width", info->width);
    SetInt64(&e, "image/channels", 3);
    SetBytes(&e, "image/colorspace", "RGB");
    SetBytes(&e, "image/format", "JPEG");
    SetBytes(&e, "image/filename", item.name);
    SetInt64(&e, "image/class/label", item.label);
    SetBytes(&e, "image/class/synset", item.synset);
    SetBytes(&e, "image/class/text", item.synset);
    std::string serialized;
    SerializeExample(e, &serialized);
    return serialized;
  });
}

absl::Status WriteSyntheticImageFolder(const std::string& root, int num_classes, int per_class,
                                       int width, int height, uint64_t seed) {
  for (int c = 0; c < num_classes; ++c) {
    const std::string dir = absl::StrCat(root, "/class", c);
    HVX_RETURN_IF_ERROR(MakeDirs(dir));
    const int base[3] = {(c * 97) % 256, (c * 61 + 80) % 256, (c * 151 + 160) % 256};
    for (int i = 0; i < per_class; ++i) {
      SampleRng rng(MixSeed(seed, static_cast<uint64_t>(c), static_cast<uint64_t>(i)));
      RgbImage img;
      img.width = width;
      img.height = height;
      img.pixels.resize(static_cast<size_t>(width) * height * 3);
      for (size_t p = 0; p < img.pixels.size(); ++p) {
        const int noise = static_cast<int>(rng.Below(96)) - 48;
        img.pixels[p] = static_cast<uint8_t>(std::min(255, std::max(0, base[p % 3] + noise)));
      }
      HVX_ASSIGN_OR_RETURN(std::string jpeg, EncodeJpeg(img, 90));
      const std::string path = absl::StrCat(dir, "/img", i, ".jpg");
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(jpeg.data(), static_cast<std::streamsize>(jpeg.size()));
      if (!out) return ErrnoToStatus(errno, absl::StrCat("writing ", path));
    }
  }
  return absl::OkStatus();
}

}  // namespace data
}  // namespace hvx
