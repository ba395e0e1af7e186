#include "hvx/data/random.h"

namespace hvx {
namespace data {
namespace {

uint64_t Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = Finalize(a + 0x9e3779b97f4a7c15ull);
  h = Finalize(h ^ (b + 0x632be59bd9b4e019ull));
  return Finalize(h ^ (c + 0x8cb92ba72f3d8dd7ull));
}

uint64_t SampleRng::Next() {
  state_ += 0x9e3779b97f4a7c15ull;
  return Finalize(state_);
}

uint64_t SampleRng::Below(uint64_t n) {
  // Lemire's multiply-shift with rejection of the biased low range.
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double SampleRng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

}  // namespace data
}  // namespace hvx
