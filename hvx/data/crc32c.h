// CRC-32C (Castagnoli), as used by TFRecord framing, iSCSI and LevelDB.
//
//   uint32_t crc = hvx::data::Crc32c(payload.data(), payload.size());
//   crc = hvx::data::Crc32cExtend(crc, more.data(), more.size());  // of payload, then more
//
// The implementation is chosen once at run time: with AVX-512 and VPCLMULQDQ, buffers of 272 bytes
// or more are folded with 512-bit carry-less multiplications (four accumulators, 256 bytes per
// step); with SSE4.2 the `crc32` instruction runs on three independent streams merged with
// precomputed "shift over N zero bytes" tables (the instruction has a latency of 3 cycles but a
// throughput of 1 per cycle); elsewhere a portable slicing-by-8 table implementation is used. All
// give identical results.
#ifndef HVX_DATA_CRC32C_H_
#define HVX_DATA_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace hvx {
namespace data {

// The CRC-32C of `data[0, n)` continuing from `crc` (the CRC of the bytes before; 0 for none).
// Crc32cExtend(Crc32c(a), b) == Crc32c(a followed by b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// Crc32c(p, 8): the CRC of a record's length field, without the dispatch of the general path.
uint32_t Crc32cOfFixed64(const void* p);

// The portable table implementation, whatever the CPU supports. For tests and benchmarks.
uint32_t Crc32cPortableExtend(uint32_t crc, const void* data, size_t n);

// The SSE4.2 three-lane path alone (portable where SSE4.2 is missing). For tests and benchmarks.
uint32_t Crc32cThreeLaneExtend(uint32_t crc, const void* data, size_t n);

// Whether Crc32cExtend uses CPU instructions (SSE4.2, possibly with VPCLMULQDQ) on this machine.
bool Crc32cIsHardwareAccelerated();
// A name for the implementation Crc32cExtend uses here, e.g. "sse4.2 three-lane".
const char* Crc32cImplementation();

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_CRC32C_H_
