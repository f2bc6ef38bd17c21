#include "common/checkpoint/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace shardps {
namespace checkpoint {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Reflected Castagnoli polynomial.

// kTables[k][b]: CRC of byte b followed by k zero bytes (slicing-by-8).
struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) {
        t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
      }
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

#if defined(__x86_64__)
// The SSE4.2 crc32 instruction: one dependent chain of 8-byte steps (about
// 8 bytes per 3 cycles), enough for checkpoint files.
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t c, const unsigned char* p,
                                                          size_t size) {
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(c, *p++);
    --size;
  }
  uint64_t c64 = c;
  while (size >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    size -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (size > 0) {
    c = _mm_crc32_u8(c, *p++);
    --size;
  }
  return c;
}
#endif

}  // namespace

bool Crc32cHardware() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (Crc32cHardware()) {
    return ~ExtendHardware(~crc, static_cast<const unsigned char*>(data), size);
  }
#endif
  return Crc32cExtendPortable(crc, data, size);
}

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size) {
  const Tables& tb = GetTables();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = (c >> 8) ^ tb.t[0][(c ^ *p++) & 0xFF];
    --size;
  }
  while (size >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    // Little-endian loads: Debian targets here are little-endian (the
    // checkpoint format is little-endian throughout).
    lo ^= c;
    c = tb.t[7][lo & 0xFF] ^ tb.t[6][(lo >> 8) & 0xFF] ^ tb.t[5][(lo >> 16) & 0xFF] ^
        tb.t[4][lo >> 24] ^ tb.t[3][hi & 0xFF] ^ tb.t[2][(hi >> 8) & 0xFF] ^
        tb.t[1][(hi >> 16) & 0xFF] ^ tb.t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size > 0) {
    c = (c >> 8) ^ tb.t[0][(c ^ *p++) & 0xFF];
    --size;
  }
  return ~c;
}

}  // namespace checkpoint
}  // namespace shardps
