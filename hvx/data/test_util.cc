#include "hvx/data/test_util.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/data/example.h"
#include "hvx/data/record.h"
#include "hvx/data/shard_plan.h"

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

RgbImage SyntheticPhoto(int width, int height, uint64_t seed) {
  RgbImage img;
  img.width = width;
  img.height = height;
  std::vector<float> value(static_cast<size_t>(width) * height * 3, 0.0f);
  SampleRng rng(MixSeed(seed, 0x9e3779b9, 7));
  // Octaves of bilinear value noise, wavelength 256, 128, ..., 2 pixels, of nearly equal
  // amplitude: power falling as 1/f (pink), the fine texture photos have.
  for (int wavelength = 256; wavelength >= 2; wavelength /= 2) {
    const int gw = width / wavelength + 2, gh = height / wavelength + 2;
    const float amplitude = 90.0f * std::pow(wavelength / 256.0f, 0.1f);
    for (int c = 0; c < 3; ++c) {
      std::vector<float> grid(static_cast<size_t>(gw) * gh);
      for (float& g : grid) g = static_cast<float>(rng.Uniform(-1.0, 1.0));
      for (int y = 0; y < height; ++y) {
        const float gy = static_cast<float>(y) / wavelength;
        const int y0 = static_cast<int>(gy);
        const float ty = gy - y0;
        for (int x = 0; x < width; ++x) {
          const float gx = static_cast<float>(x) / wavelength;
          const int x0 = static_cast<int>(gx);
          const float tx = gx - x0;
          const float* g0 = &grid[static_cast<size_t>(y0) * gw + x0];
          const float* g1 = g0 + gw;
          const float top = g0[0] + tx * (g0[1] - g0[0]);
          const float bottom = g1[0] + tx * (g1[1] - g1[0]);
          value[(static_cast<size_t>(y) * width + x) * 3 + c] +=
              amplitude * (top + ty * (bottom - top)) * (c == 1 ? 1.0f : 0.8f);
        }
      }
    }
  }
  // Hard edges: discs and bars of flat colour, as objects in a scene.
  for (int shape = 0; shape < 12; ++shape) {
    const int cx = static_cast<int>(rng.Below(width)), cy = static_cast<int>(rng.Below(height));
    const int r = 10 + static_cast<int>(rng.Below(std::max(1, std::min(width, height) / 5)));
    const bool disc = rng.Uniform() < 0.5;
    float color[3];
    for (float& v : color) v = static_cast<float>(rng.Uniform(-110, 110));
    for (int y = std::max(0, cy - r); y < std::min(height, cy + r); ++y) {
      for (int x = std::max(0, cx - r); x < std::min(width, cx + r); ++x) {
        if (disc && (x - cx) * (x - cx) + (y - cy) * (y - cy) > r * r) continue;
        if (!disc && std::abs(y - cy) > r / 4) continue;
        float* p = &value[(static_cast<size_t>(y) * width + x) * 3];
        for (int c = 0; c < 3; ++c) p[c] = 0.4f * p[c] + color[c];
      }
    }
  }
  img.pixels.resize(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const float v = 128.0f + value[i] + static_cast<float>(rng.Uniform(-8, 8));
    img.pixels[i] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v)));
  }
  return img;
}

}  // namespace data
}  // namespace hvx
