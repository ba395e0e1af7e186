#include "hvx/data/crc32c.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace data {
namespace {

TEST(Crc32cTest, StandardCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string inc(32, 0), dec(32, 0);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i), dec[i] = static_cast<char>(31 - i);
  EXPECT_EQ(Crc32c(inc.data(), inc.size()), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(dec.data(), dec.size()), 0x113FDB5Cu);
  std::string eight_zeros(8, '\0');
  EXPECT_EQ(Crc32c(eight_zeros.data(), 8), 0x8C28B28Au);
  EXPECT_EQ(Crc32cOfFixed64(eight_zeros.data()), 0x8C28B28Au);
}

TEST(Crc32cTest, OfFixed64MatchesTheGeneralPath) {
  char buf[16];
  for (uint64_t seed = 1; seed < 1000; ++seed) {
    const uint64_t v = seed * 0x9E3779B97F4A7C15ull;
    std::memcpy(buf + seed % 8, &v, 8);
    ASSERT_EQ(Crc32cOfFixed64(buf + seed % 8), Crc32cPortableExtend(0, buf + seed % 8, 8)) << seed;
  }
}

TEST(Crc32cTest, PortableMatchesCheckValue) {
  EXPECT_EQ(Crc32cPortableExtend(0, "123456789", 9), 0xE3069283u);
}

TEST(Crc32cTest, HardwareAndPortableAgreeOnEverySizeAndAlignment) {
  std::mt19937 rng(7);
  std::vector<char> buf(3 * 4096 * 2 + 64);
  for (char& c : buf) c = static_cast<char>(rng());
  std::vector<size_t> sizes;
  for (size_t n = 0; n < 2200; ++n) sizes.push_back(n);
  for (size_t n : {3 * 256 - 1, 3 * 256, 3 * 4096 - 1, 3 * 4096, 3 * 4096 + 3 * 256 + 5,
                   2 * 3 * 4096 + 17, 4096, 4096 + 255, 4096 + 256, 8191, 20000}) {
    sizes.push_back(n);
  }
  for (size_t n : sizes) {
    for (size_t align = 0; align < 8; align += (n < 64 ? 1 : 3)) {
      const char* p = buf.data() + align;
      ASSERT_EQ(Crc32c(p, n), Crc32cPortableExtend(0, p, n)) << "n=" << n << " align=" << align;
      ASSERT_EQ(Crc32cThreeLaneExtend(0, p, n), Crc32cPortableExtend(0, p, n)) << "n=" << n;
      ASSERT_EQ(Crc32cExtend(0x12345678u, p, n), Crc32cPortableExtend(0x12345678u, p, n)) << n;
    }
  }
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::string s = "The quick brown fox jumps over the lazy dog, then naps for a while.";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t a = Crc32c(s.data(), cut);
    EXPECT_EQ(Crc32cExtend(a, s.data() + cut, s.size() - cut), Crc32c(s.data(), s.size()));
  }
}

TEST(Crc32cTest, LargeBuffersAgreeWithPortable) {
  std::mt19937 rng(9);
  std::vector<char> buf((1 << 20) + 333);
  for (char& c : buf) c = static_cast<char>(rng());
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), Crc32cPortableExtend(0, buf.data(), buf.size()));
  EXPECT_EQ(Crc32c(buf.data() + 1, buf.size() - 1),
            Crc32cPortableExtend(0, buf.data() + 1, buf.size() - 1));
}

TEST(Crc32cTest, ReportsWhetherHardwareIsUsed) {
  EXPECT_NE(std::string(Crc32cImplementation()), "");
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(Crc32cIsHardwareAccelerated(), static_cast<bool>(__builtin_cpu_supports("sse4.2")));
#else
  EXPECT_FALSE(Crc32cIsHardwareAccelerated());
#endif
}

}  // namespace
}  // namespace data
}  // namespace hvx
