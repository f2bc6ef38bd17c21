// Value codecs: fp32 arrays to and from the wire encodings.
//
// On the wire, values are little-endian arrays of fp32, fp16 (IEEE binary16)
// or bf16 (the top half of an fp32). Narrowing rounds to nearest, ties to
// even; overflow gives +-Inf; Inf stays Inf and NaN stays NaN (quieted, sign
// and top payload bits kept). Widening is exact, but for an fp16 signalling
// NaN, which comes back quiet (as x86's F16C conversion does).
//
// Where the CPU has them, arrays are converted with AVX2 (bf16) and F16C
// (fp16) instructions, with exactly the results of the scalar functions.
//
// Thread-safety: all functions are pure. Only little-endian hosts are
// supported (a static_assert says so).
#ifndef SHARDPS_COMMON_CODEC_H_
#define SHARDPS_COMMON_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardps {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "shardps's wire codecs assume a little-endian host");

enum class Encoding { kFp32 = 0, kFp16 = 1, kBf16 = 2 };

// Bytes per value in `encoding`.
inline size_t BytesPerValue(Encoding encoding) { return encoding == Encoding::kFp32 ? 4 : 2; }

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The index of the first value of v[0, n) that is NaN or infinite, or n.
// Scans in blocks with a branch-free test (the exponent bits all set); it is
// out of line so that the scan is built vectorized with the codec (-O3), and
// the common all-finite case runs at memory speed.
size_t FirstNonFinite(const float* v, size_t n);

inline bool AllFinite(const float* v, size_t n) { return FirstNonFinite(v, n) == n; }

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

// Branch-free, so that a loop over it vectorizes (codec.cc).
inline uint16_t FloatToBf16(float f) {
  const uint32_t x = FloatBits(f);
  // Round to nearest, ties to even (a carry into the exponent is right).
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x0040u;  // Sign and payload kept.
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline float Bf16ToFloat(uint16_t b) { return BitsFloat(uint32_t{b} << 16); }

// Appends `n` values to `out` in `encoding`.
void EncodeValues(const float* values, size_t n, Encoding encoding, std::string* out);
// Writes `n` values in `encoding` to dst (room for n * BytesPerValue bytes).
void EncodeValuesTo(const float* values, size_t n, Encoding encoding, char* dst);

// Decodes exactly `n` values from `bytes` into `out` (room for n floats).
// INVALID_ARGUMENT if bytes.size() is not n * BytesPerValue(encoding).
absl::Status DecodeValues(absl::string_view bytes, Encoding encoding, size_t n, float* out);

// The sparse form of a value array (ps.proto SparseGradients): the indices
// of its non-zero elements as gaps (the first index, then each index minus
// the one before) and those elements' values in `encoding`.
//
// Appends the non-zero elements of v[0, n) to `gaps` and `values`, their
// indices offset by `base`; `last` is the index of the previous element
// appended (ignored while gaps is empty) and is updated. Zeros of either
// sign are left out.
void AppendNonZeros(const float* v, size_t n, uint32_t base, Encoding encoding,
                    std::vector<uint32_t>* gaps, uint32_t* last, std::string* values);

// Expands a sparse form into out[0, n): every element not listed is 0.
// INVALID_ARGUMENT, naming the fault, if the gaps are not increasing (a gap
// of 0 after the first), an index is >= n, or `values` does not hold
// exactly `count` values in `encoding`.
absl::Status ExpandNonZeros(const uint32_t* gaps, size_t count, absl::string_view values,
                            Encoding encoding, size_t n, float* out);

}  // namespace shardps

#endif  // SHARDPS_COMMON_CODEC_H_
