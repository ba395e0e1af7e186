#include "hvx/common/copy.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace {

// Every length around the pieces and the 64-byte stream loop, at every destination offset within
// a 16-byte line, copies exactly the bytes asked for and nothing beyond them.
TEST(CopyTest, CopyBytesAndStreamBytesCopyExactlyTheRange) {
  std::vector<uint8_t> src(3 * 4032 + 200);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (auto copy : {&CopyBytes, &StreamBytes}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{63}, size_t{64}, size_t{65},
                     size_t{4031}, size_t{4032}, size_t{4033}, size_t{3 * 4032 + 17}}) {
      for (size_t offset = 0; offset < 16; ++offset) {
        std::vector<uint8_t> dst(n + 64, 0xEE);
        copy(dst.data() + offset, src.data() + 3, n);
        ASSERT_EQ(std::memcmp(dst.data() + offset, src.data() + 3, n), 0) << n << " " << offset;
        for (size_t i = 0; i < dst.size(); ++i) {
          if (i < offset || i >= offset + n)
            ASSERT_EQ(dst[i], 0xEE) << n << " " << offset << " " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hvx
