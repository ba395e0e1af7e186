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
  using Copy = void (*)(void*, const void*, size_t);
  for (Copy copy : {static_cast<Copy>(&CopyBytes), static_cast<Copy>(&StreamBytes)}) {
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

// The two-destination StreamBytes writes the same range into both, whether or not the two share
// their offset within a 16-byte line, and nothing beyond it in either.
TEST(CopyTest, StreamBytesIntoTwoDestinationsCopiesTheRangeIntoEach) {
  std::vector<uint8_t> src(3 * 4032 + 200);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{129}, size_t{3 * 4032}}) {
    for (size_t offset = 0; offset < 16; ++offset) {
      for (size_t also_offset : {offset, (offset + 4) % 16}) {
        std::vector<uint8_t> dst(n + 64, 0xEE), also(n + 64, 0xDD);
        StreamBytes(dst.data() + offset, also.data() + also_offset, src.data() + 5, n);
        ASSERT_EQ(std::memcmp(dst.data() + offset, src.data() + 5, n), 0) << n << " " << offset;
        ASSERT_EQ(std::memcmp(also.data() + also_offset, src.data() + 5, n), 0)
            << n << " " << also_offset;
        for (size_t i = 0; i < dst.size(); ++i) {
          if (i < offset || i >= offset + n) ASSERT_EQ(dst[i], 0xEE) << n << " " << i;
          if (i < also_offset || i >= also_offset + n) ASSERT_EQ(also[i], 0xDD) << n << " " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hvx
