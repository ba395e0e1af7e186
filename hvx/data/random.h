// The deterministic random numbers of the data pipeline: epoch permutations and augmentation.
//
//   SampleRng rng(MixSeed(seed, epoch, sample_id));
//   double u = rng.Uniform();   // [0, 1)
//
// The generator is defined here (SplitMix64) rather than taken from the standard library, whose
// distributions differ between implementations, so that a (seed, epoch, sample) gives the same
// numbers on every platform and in every version.
#ifndef HVX_DATA_RANDOM_H_
#define HVX_DATA_RANDOM_H_

#include <cstdint>

namespace hvx {
namespace data {

// Combines values into one well-mixed 64-bit seed.
uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0);

class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, n), unbiased; n > 0.
  uint64_t Below(uint64_t n);
  // Uniform in [0, 1) with 53 bits.
  double Uniform();
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }

 private:
  uint64_t state_;
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_RANDOM_H_
