#include "hvx/data/test_util.h"

#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/data/example.h"
#include "hvx/data/record.h"

namespace hvx {
namespace data {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base ? base : "/tmp", "/", name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::vector<std::string> WriteToyShards(const std::string& dir, int num_files, int num_samples) {
  std::vector<std::string> paths;
  int id = 0;
  for (int f = 0; f < num_files; ++f) {
    std::string path = absl::StrFormat("%s/toy-%05d-of-%05d", dir, f, num_files);
    RecordWriterOptions options;
    options.write_index = true;
    auto writer = RecordWriter::Open(path, options);
    if (!writer.ok()) std::abort();
    const int end = static_cast<int>(static_cast<int64_t>(num_samples) * (f + 1) / num_files);
    for (; id < end; ++id) {
      Example e;
      std::string pixels;
      for (int k = 0; k < 4; ++k) pixels.push_back(static_cast<char>((id + k) & 0xff));
      SetBytes(&e, "image/raw", pixels);
      SetInt64(&e, "image/height", 2);
      SetInt64(&e, "image/width", 2);
      SetInt64(&e, "image/channels", 1);
      SetInt64(&e, "image/class/label", id % 10);
      if (!(*writer)->Write(SerializeExample(e)).ok()) std::abort();
    }
    if (!(*writer)->Close().ok()) std::abort();
    paths.push_back(path);
  }
  return paths;
}

}  // namespace data
}  // namespace hvx
