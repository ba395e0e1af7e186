#include "hvx/data/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace hvx {
namespace data {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

// Slicing-by-8 tables: table[k][b] is the CRC register after byte b followed by k zero bytes.
struct PortableTables {
  uint32_t t[8][256];
  PortableTables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t crc = b;
      for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (kPoly & (0u - (crc & 1u)));
      t[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    }
  }
};

const PortableTables& Portable() {
  static const PortableTables* tables = new PortableTables();
  return *tables;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Operates on the raw register (pre/post inversion is done by the caller).
uint32_t PortableRaw(uint32_t crc, const uint8_t* p, size_t n) {
  const auto& t = Portable().t;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
    --n;
  }
  while (n >= 8) {
    uint64_t v = Load64(p) ^ crc;
    crc = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
          t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^
          t[0][(v >> 56) & 0xff];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
    --n;
  }
  return crc;
}

#if defined(__x86_64__)

__attribute__((target("sse4.2"))) uint32_t HardwareOneLane(uint32_t crc, const uint8_t* p,
                                                            size_t n) {
  uint64_t c = crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 8) {
    c = _mm_crc32_u64(c, Load64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32;
}

// Shifting a CRC register over `bytes` zero bytes is linear over GF(2); the table holds the image
// of every byte value in each of the four byte positions of the register.
struct ShiftTable {
  uint32_t t[4][256];
  explicit ShiftTable(size_t bytes) {
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) basis[bit] = ShiftSlow(1u << bit, bytes);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if (b & (1u << bit)) v ^= basis[8 * k + bit];
        }
        t[k][b] = v;
      }
    }
  }
  static uint32_t ShiftSlow(uint32_t crc, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) crc = (crc >> 8) ^ Portable().t[0][crc & 0xff];
    return crc;
  }
  uint32_t Shift(uint32_t crc) const {
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
  }
};

// Two block sizes: long lanes for large buffers, short ones so that records of a few hundred
// bytes also run three streams.
constexpr size_t kLongLane = 4096;
constexpr size_t kShortLane = 256;

const ShiftTable& LongShift() {
  static const ShiftTable* table = new ShiftTable(kLongLane);
  return *table;
}
const ShiftTable& ShortShift() {
  static const ShiftTable* table = new ShiftTable(kShortLane);
  return *table;
}

template <size_t kLane>
__attribute__((target("sse4.2"))) inline uint32_t ThreeLanes(uint32_t crc, const uint8_t* p,
                                                              const ShiftTable& shift) {
  uint64_t c0 = crc, c1 = 0, c2 = 0;
  const uint8_t* p1 = p + kLane;
  const uint8_t* p2 = p + 2 * kLane;
  for (size_t i = 0; i < kLane; i += 8) {
    c0 = _mm_crc32_u64(c0, Load64(p + i));
    c1 = _mm_crc32_u64(c1, Load64(p1 + i));
    c2 = _mm_crc32_u64(c2, Load64(p2 + i));
  }
  uint32_t r = shift.Shift(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
  return shift.Shift(r) ^ static_cast<uint32_t>(c2);
}

__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t crc, const uint8_t* p, size_t n) {
  if (n >= 3 * kShortLane) {
    const ShiftTable& long_shift = LongShift();
    while (n >= 3 * kLongLane) {
      crc = ThreeLanes<kLongLane>(crc, p, long_shift);
      p += 3 * kLongLane;
      n -= 3 * kLongLane;
    }
    const ShiftTable& short_shift = ShortShift();
    while (n >= 3 * kShortLane) {
      crc = ThreeLanes<kShortLane>(crc, p, short_shift);
      p += 3 * kShortLane;
      n -= 3 * kShortLane;
    }
  }
  return HardwareOneLane(crc, p, n);
}

bool DetectHardware() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("sse4.2")) return false;
  LongShift();  // build the tables before any timing-sensitive use
  ShortShift();
  return true;
}

#else

uint32_t HardwareRaw(uint32_t crc, const uint8_t* p, size_t n) { return PortableRaw(crc, p, n); }
bool DetectHardware() { return false; }

#endif

using RawFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

RawFn Choose() {
  static const RawFn fn = DetectHardware() ? &HardwareRaw : &PortableRaw;
  return fn;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  return ~Choose()(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32cPortableExtend(uint32_t crc, const void* data, size_t n) {
  return ~PortableRaw(~crc, static_cast<const uint8_t*>(data), n);
}

bool Crc32cIsHardwareAccelerated() {
  static const bool hardware = DetectHardware();
  return hardware;
}

}  // namespace data
}  // namespace hvx
