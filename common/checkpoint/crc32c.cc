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
// Bytes of each of the three streams ExtendHardware interleaves.
constexpr size_t kStreamBytes = 4096;

// The CRC register (not inverted) after kStreamBytes zero bytes, as four
// byte-indexed tables: the update is linear over GF(2), so a register is
// the XOR of its bytes' images.
struct ShiftTables {
  uint32_t t[4][256];
  ShiftTables() {
    const Tables& tb = GetTables();
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t c = 1u << bit;
      for (size_t i = 0; i < kStreamBytes; ++i) c = (c >> 8) ^ tb.t[0][c & 0xFF];
      basis[bit] = c;
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) v ^= basis[8 * k + j];
        }
        t[k][b] = v;
      }
    }
  }
  uint32_t Shift(uint32_t c) const {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

const ShiftTables& GetShiftTables() {
  static const ShiftTables* const tables = new ShiftTables();
  return *tables;
}

// The SSE4.2 crc32 instruction. One chain of 8-byte steps waits 3 cycles a
// step; runs of 3 x kStreamBytes go as three independent chains over
// consecutive thirds, joined by linearity: the register after A then B is
// the register after A shifted over B's length, XOR B's register from
// zero.
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t c, const unsigned char* p,
                                                          size_t size) {
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(c, *p++);
    --size;
  }
  uint64_t c64 = c;
  if (size >= 3 * kStreamBytes) {
    const ShiftTables& shift = GetShiftTables();
    while (size >= 3 * kStreamBytes) {
      uint64_t c1 = 0, c2 = 0;
      for (size_t i = 0; i < kStreamBytes; i += 8) {
        uint64_t v0, v1, v2;
        std::memcpy(&v0, p + i, 8);
        std::memcpy(&v1, p + kStreamBytes + i, 8);
        std::memcpy(&v2, p + 2 * kStreamBytes + i, 8);
        c64 = _mm_crc32_u64(c64, v0);
        c1 = _mm_crc32_u64(c1, v1);
        c2 = _mm_crc32_u64(c2, v2);
      }
      uint32_t joined = shift.Shift(static_cast<uint32_t>(c64)) ^ static_cast<uint32_t>(c1);
      joined = shift.Shift(joined) ^ static_cast<uint32_t>(c2);
      c64 = joined;
      p += 3 * kStreamBytes;
      size -= 3 * kStreamBytes;
    }
  }
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
