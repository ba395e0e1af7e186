#include "hvx/data/crc32c.h"

#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
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

// Unaligned loads cost nothing extra on x86-64, so there is no alignment prologue: an 8-byte
// record header is a single instruction.
__attribute__((target("sse4.2"))) inline uint32_t HardwareOneLane(uint32_t crc, const uint8_t* p,
                                                                  size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    c = _mm_crc32_u64(c, Load64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  if (n >= 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    c32 = _mm_crc32_u32(c32, v);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    c32 = _mm_crc32_u16(c32, v);
    p += 2;
    n -= 2;
  }
  if (n > 0) c32 = _mm_crc32_u8(c32, *p);
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

// ---- Carry-less multiplication folding (AVX-512 + VPCLMULQDQ) ----
//
// Raw CRC registers are linear: crc(A || B) = shift_|B|(crc(A)) ^ crc(B). A 16-byte block
// A = lo || hi (8 bytes each) followed by D bytes contributes the same as the 16-byte block
// clmul(lo, K(D + 8)) ^ clmul(hi, K(D)) placed D bytes later, where K(n) is the reflected residue
// x^(8n - 1) mod P (the "- 1" because a carry-less product of reflected operands comes out one
// bit short). K(n) is the raw CRC of the byte 0x01 followed by n - 5 zero bytes, shifted into the
// upper half of the 64-bit operand.
//
// Folding 256 bytes per step over four 512-bit accumulators keeps sixteen independent multiply
// chains busy. Then the four fold into one, which takes 64 bytes per step, until 16 to 79 bytes
// are left. The finish is built for short records, where it is most of the time: the last
// accumulator's four 16-byte lanes are folded in one multiply straight onto the last 16 bytes of
// the buffer, while the crc32 instruction runs over the bytes between them (from a zero
// register, independent of the multiplies, so the two overlap); the last 16 bytes, with the
// folded lanes added, end that crc32 chain. No Barrett reduction, no serial tail after the folds.
uint64_t FoldConstant(size_t n) {
  std::string msg(n - 4, '\0');
  msg[0] = 1;
  return static_cast<uint64_t>(
             PortableRaw(0, reinterpret_cast<const uint8_t*>(msg.data()), msg.size()))
         << 32;
}

// {K(d + 8), K(d)}: folds a 16-byte block forward by d bytes.
struct FoldPair {
  uint64_t lo, hi;
  FoldPair() : lo(0), hi(0) {}
  explicit FoldPair(size_t d) : lo(FoldConstant(d + 8)), hi(FoldConstant(d)) {}
};

constexpr size_t kFinishMin = 16;  // bytes left after the 64-byte steps: [16, 80)
constexpr size_t kFinishMax = kFinishMin + 64;

struct FoldConstants {
  FoldPair by64{64}, by128{128}, by192{192}, by256{256};
  // finish[t]: the pairs that fold lanes 0..3 of a 64-byte accumulator followed by t bytes onto
  // the last 16 of those bytes (distances t + 48, t + 32, t + 16, t), one 512-bit load.
  alignas(64) FoldPair finish[kFinishMax][4];
  FoldConstants() {
    for (size_t t = kFinishMin; t < kFinishMax; ++t) {
      for (size_t lane = 0; lane < 4; ++lane) finish[t][lane] = FoldPair(t + 48 - 16 * lane);
    }
  }
};

const FoldConstants& Folds() {
  static const FoldConstants* f = new FoldConstants();
  return *f;
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2"))) inline __m512i Fold512(__m512i x,
                                                                                   __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
                          _mm512_clmulepi64_epi128(x, k, 0x11));
}

// Fold512(x, k) ^ y in one logic instruction.
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2"))) inline __m512i Fold512Xor(__m512i x,
                                                                                      __m512i k,
                                                                                      __m512i y) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), y, 0x96);
}

__attribute__((target("avx512f"))) inline __m512i Broadcast(const FoldPair& f) {
  const auto lo = static_cast<long long>(f.lo), hi = static_cast<long long>(f.hi);
  return _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
}

// Below this the crc32 instruction alone is as fast.
constexpr size_t kFoldMin = 256 + kFinishMin;

__attribute__((target("avx512f,avx2,vpclmulqdq,pclmul,sse4.2"))) uint32_t FoldingRaw(
    uint32_t crc, const uint8_t* p, size_t n) {
  if (n < kFoldMin) return HardwareRaw(crc, p, n);
  const FoldConstants& f = Folds();
  __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(crc))));
  p += 256;
  n -= 256;
  const __m512i k256 = Broadcast(f.by256);
  while (n >= 256 + kFinishMin) {
    x0 = Fold512Xor(x0, k256, _mm512_loadu_si512(p));
    x1 = Fold512Xor(x1, k256, _mm512_loadu_si512(p + 64));
    x2 = Fold512Xor(x2, k256, _mm512_loadu_si512(p + 128));
    x3 = Fold512Xor(x3, k256, _mm512_loadu_si512(p + 192));
    p += 256;
    n -= 256;
  }
  // Four accumulators into x3, which then takes 64 bytes per step.
  x3 = _mm512_ternarylogic_epi64(Fold512(x0, Broadcast(f.by192)), Fold512(x1, Broadcast(f.by128)),
                                 x3, 0x96);
  x3 = Fold512Xor(x2, Broadcast(f.by64), x3);
  const __m512i k64 = Broadcast(f.by64);
  while (n >= kFinishMax) {
    x3 = Fold512Xor(x3, k64, _mm512_loadu_si512(p));
    p += 64;
    n -= 64;
  }
  // n in [16, 80): the bytes before the last 16 go through crc32 from zero while x3's lanes fold
  // onto the last 16.
  const uint32_t between = HardwareOneLane(0, p, n - 16);
  const __m512i folded =
      Fold512(x3, _mm512_load_si512(reinterpret_cast<const __m512i*>(f.finish[n])));
  const __m256i half =
      _mm256_xor_si256(_mm512_castsi512_si256(folded), _mm512_extracti64x4_epi64(folded, 1));
  const __m128i lanes =
      _mm_xor_si128(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
  const __m128i last =
      _mm_xor_si128(lanes, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + n - 16)));
  uint64_t c = _mm_crc32_u64(between, static_cast<uint64_t>(_mm_cvtsi128_si64(last)));
  c = _mm_crc32_u64(c, static_cast<uint64_t>(_mm_extract_epi64(last, 1)));
  return static_cast<uint32_t>(c);
}

bool HasFolding() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
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
uint32_t FoldingRaw(uint32_t crc, const uint8_t* p, size_t n) { return PortableRaw(crc, p, n); }
bool DetectHardware() { return false; }
bool HasFolding() { return false; }

#endif

using RawFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

RawFn Choose() {
  static const RawFn fn = [] {
    if (!DetectHardware()) return &PortableRaw;
    if (HasFolding()) {
      Folds();
      return &FoldingRaw;
    }
    return &HardwareRaw;
  }();
  return fn;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  return ~Choose()(~crc, static_cast<const uint8_t*>(data), n);
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t HardwareOfFixed64(const void* p) {
  return ~static_cast<uint32_t>(_mm_crc32_u64(0xffffffffu, Load64(static_cast<const uint8_t*>(p))));
}
#endif

uint32_t Crc32cOfFixed64(const void* p) {
#if defined(__x86_64__)
  if (Crc32cIsHardwareAccelerated()) return HardwareOfFixed64(p);
#endif
  return Crc32cPortableExtend(0, p, 8);
}

uint32_t Crc32cThreeLaneExtend(uint32_t crc, const void* data, size_t n) {
  if (!Crc32cIsHardwareAccelerated()) return Crc32cPortableExtend(crc, data, n);
  return ~HardwareRaw(~crc, static_cast<const uint8_t*>(data), n);
}

const char* Crc32cImplementation() {
  if (!Crc32cIsHardwareAccelerated()) return "portable slicing-by-8";
  return Choose() == &FoldingRaw ? "avx512 vpclmulqdq folding + sse4.2" : "sse4.2 three-lane";
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
