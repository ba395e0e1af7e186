#include "hvx/common/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace hvx {

void CopyBytes(void* dst, const void* src, size_t n) {
  // glibc's threshold for `rep movsb` with AVX2 is 4096 bytes; below it a vector loop runs.
  constexpr size_t kPiece = 4032;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  while (n > kPiece) {
    std::memcpy(d, s, kPiece);
    d += kPiece;
    s += kPiece;
    n -= kPiece;
  }
  std::memcpy(d, s, n);
}

void StreamBytes(void* dst, const void* src, size_t n) { StreamBytes(dst, nullptr, src, n); }

void StreamBytes(void* dst, void* also, const void* src, size_t n) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  char* e = static_cast<char*>(also);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  if (e != nullptr && ((reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(e)) & 15)) {
    // The two destinations cannot share one aligned loop.
    StreamBytes(d, nullptr, s, n);
    StreamBytes(e, nullptr, s, n);
    return;
  }
  std::memcpy(d, s, head);
  if (e != nullptr) std::memcpy(e, s, head);
  d += head;
  s += head;
  if (e != nullptr) e += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i f = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), f);
    if (e != nullptr) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(e + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(e + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(e + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(e + i + 48), f);
    }
  }
  std::memcpy(d + i, s + i, n - i);
  if (e != nullptr) std::memcpy(e + i, s + i, n - i);
  _mm_sfence();
#else
  CopyBytes(dst, src, n);
  if (also != nullptr) CopyBytes(also, src, n);
#endif
}

}  // namespace hvx
