// A fuzz target: one translation unit that defines LLVMFuzzerTestOneInput (the libFuzzer
// interface) and HvxFuzzSeeds (the inputs it starts from, made by the code that writes the
// format, so they stay valid when it changes). fuzz.bzl's hvx_fuzz_test builds it twice: as a test
// that replays the seeds and a fixed set of mutations of them (fuzz_main.cc), and, under
// --config=fuzz, as a libFuzzer binary NAME_fuzzer (tools/fuzz runs those, starting from the
// seeds the test writes with --write_seeds).
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     auto parsed = ParseThing(AsText(data, size));
//     if (parsed.ok()) HVX_FUZZ_CHECK(Encode(*parsed) == ..., "round trip");
//     return 0;
//   }
//   std::vector<std::string> HvxFuzzSeeds() { return {Encode(Example())}; }
#ifndef HVX_TESTING_FUZZ_H_
#define HVX_TESTING_FUZZ_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
std::vector<std::string> HvxFuzzSeeds();

namespace hvx {
namespace fuzz {

inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits the input at the first `sep`: the parts a target feeds to different parsers.
inline std::vector<absl::string_view> SplitInput(absl::string_view input, char sep, size_t max) {
  std::vector<absl::string_view> parts;
  while (parts.size() + 1 < max) {
    const size_t at = input.find(sep);
    if (at == absl::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + 1);
  }
  parts.push_back(input);
  return parts;
}

}  // namespace fuzz
}  // namespace hvx

// An invariant of the code under test: its violation is a finding, reported like a crash.
#define HVX_FUZZ_CHECK(cond, what)                                                       \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "fuzz: %s:%d: %s (%s)\n", __FILE__, __LINE__, (what), #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

#endif  // HVX_TESTING_FUZZ_H_
