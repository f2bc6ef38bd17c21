#include "common/codec.h"

#include <algorithm>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"

namespace shardps {

size_t FirstNonFinite(const float* v, size_t n) {
  constexpr size_t kBlock = 64;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = start + kBlock < n ? start + kBlock : n;
    uint32_t bad = 0;
    for (size_t i = start; i < end; ++i) {
      bad |= (FloatBits(v[i]) & 0x7f800000u) == 0x7f800000u;
    }
    if (bad != 0) {
      for (size_t i = start; i < end; ++i) {
        if ((FloatBits(v[i]) & 0x7f800000u) == 0x7f800000u) return i;
      }
    }
  }
  return n;
}

uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint32_t h;
  if (x >= 0x47800000u) {  // >= 65536, Inf or NaN.
    if (x > 0x7f800000u) {
      h = 0x7e00u | ((x >> 13) & 0x3ffu);  // NaN, quiet, top payload bits.
    } else {
      h = 0x7c00u;  // Inf, or finite overflow.
    }
  } else if (x < 0x38800000u) {  // Below 2^-14: a half subnormal or zero.
    // Adding 0.5 aligns the value's bits so that the FPU's own
    // round-to-nearest-even does the rounding to a multiple of 2^-24.
    const float magic = BitsFloat(126u << 23);  // 0.5
    h = FloatBits(BitsFloat(x) + magic) - FloatBits(magic);
  } else {
    // Rebias the exponent, then round the 13 dropped mantissa bits to nearest
    // even; a carry into the exponent (up to Inf) is the right result.
    const uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;  // (15 - 127) << 23, plus 0xfff.
    h = x >> 13;
  }
  return static_cast<uint16_t>(h | sign);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // Inf, or NaN (quieted, as F16C's conversion does).
    return BitsFloat(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0));
  }
  if (exp == 0) {  // Zero or subnormal: mant * 2^-24, exact in fp32.
    const float v = static_cast<float>(mant) * BitsFloat(103u << 23);
    return BitsFloat(sign | FloatBits(v));
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

namespace {

// The scalar loops: the fallbacks, and the tails of the vector loops.
void EncodeBf16Scalar(const float* values, size_t n, char* dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = FloatToBf16(values[i]);
    std::memcpy(dst + 2 * i, &b, 2);
  }
}
void EncodeHalfScalar(const float* values, size_t n, char* dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(values[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}
void DecodeHalfScalar(const char* src, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

#if defined(__x86_64__)
// FloatToBf16 on 8 lanes: the same integer steps, NaN test in signed lanes
// (the magnitude is below 2^31).
__attribute__((target("avx2"))) inline __m256i Bf16Lanes(__m256i x) {
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                                         _mm256_and_si256(hi, _mm256_set1_epi32(1))),
                        16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

// 16 values a round, the rest one by one. GCC 12 vectorizes the scalar loop
// at -O3 but narrows 32 -> 16 bits slowly: on rows of 64 values this takes
// 0.43x the time of the value-by-value loop, on rows of 16 0.76x
// (bench/codec_bench).
__attribute__((target("avx2"))) void EncodeBf16Avx2(const float* values, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = Bf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + i)));
    const __m256i b =
        Bf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + i + 8)));
    // packus packs within 128-bit halves (a0-3 b0-3 a4-7 b4-7): reorder.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), packed);
  }
  if (i < n) EncodeBf16Scalar(values + i, n - i, dst + 2 * i);
}

// Read once at load, not on every call (a row is often 16 values). A call
// made before these are initialized sees false and takes the scalar loop.
const bool kHasAvx2 = [] {
  __builtin_cpu_init();  // Required before __builtin_cpu_supports at load.
  return __builtin_cpu_supports("avx2") != 0;
}();
// F16C (CPUID.1:ECX): asked directly, clang 14 has no "f16c" for
// __builtin_cpu_supports. With AVX2 the OS keeps the YMM state.
const bool kHasF16c = [] {
  unsigned a, b, c, d;
  return kHasAvx2 && __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}();

// FloatToHalf and HalfToFloat, 8 values an instruction. The hardware rounds
// as FloatToHalf does for every one of the 2^32 floats, and widens as
// HalfToFloat does for every half (checked once, exhaustively, when this
// was written; codec_test holds both to it on a sample and on all halves).
__attribute__((target("avx,f16c"))) void EncodeHalfF16c(const float* values, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(values + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
  if (i < n) EncodeHalfScalar(values + i, n - i, dst + 2 * i);
}
__attribute__((target("avx,f16c"))) void DecodeHalfF16c(const char* src, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  if (i < n) DecodeHalfScalar(src + i * 2, n - i, out + i);
}
#endif

// The vector loop where the CPU has it, else the scalar one.
void EncodeBf16(const float* values, size_t n, char* dst) {
#if defined(__x86_64__)
  if (kHasAvx2) return EncodeBf16Avx2(values, n, dst);
#endif
  EncodeBf16Scalar(values, n, dst);
}
void EncodeHalf(const float* values, size_t n, char* dst) {
#if defined(__x86_64__)
  if (kHasF16c) return EncodeHalfF16c(values, n, dst);
#endif
  EncodeHalfScalar(values, n, dst);
}
void DecodeHalf(const char* src, size_t n, float* out) {
#if defined(__x86_64__)
  if (kHasF16c) return DecodeHalfF16c(src, n, out);
#endif
  DecodeHalfScalar(src, n, out);
}

}  // namespace

void EncodeValuesTo(const float* values, size_t n, Encoding encoding, char* dst) {
  if (n == 0) return;  // values and dst may be null for an empty array.
  switch (encoding) {
    case Encoding::kFp32:
      std::memcpy(dst, values, n * sizeof(float));
      return;
    case Encoding::kFp16:
      EncodeHalf(values, n, dst);
      return;
    case Encoding::kBf16:
      EncodeBf16(values, n, dst);
      return;
  }
}

void EncodeValues(const float* values, size_t n, Encoding encoding, std::string* out) {
  if (n == 0) return;
  const size_t start = out->size();
  out->resize(start + n * BytesPerValue(encoding));
  EncodeValuesTo(values, n, encoding, out->data() + start);
}

absl::Status DecodeValues(absl::string_view bytes, Encoding encoding, size_t n, float* out) {
  const size_t width = BytesPerValue(encoding);
  if (bytes.size() != n * width) {
    return absl::InvalidArgumentError(absl::StrCat("value bytes: expected ", n, " values of ",
                                                   width, " bytes (", n * width, " bytes), got ",
                                                   bytes.size()));
  }
  if (n == 0) return absl::OkStatus();
  const char* src = bytes.data();
  switch (encoding) {
    case Encoding::kFp32:
      std::memcpy(out, src, n * sizeof(float));
      break;
    case Encoding::kFp16:
      DecodeHalf(src, n, out);
      break;
    case Encoding::kBf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = Bf16ToFloat(b);
      }
      break;
  }
  return absl::OkStatus();
}

void AppendNonZeros(const float* v, size_t n, uint32_t base, Encoding encoding,
                    std::vector<uint32_t>* gaps, uint32_t* last, std::string* values) {
  const size_t width = BytesPerValue(encoding);
  for (size_t i = 0; i < n; ++i) {
    if (v[i] == 0.0f) continue;  // Also -0.0.
    const uint32_t index = base + static_cast<uint32_t>(i);
    gaps->push_back(gaps->empty() ? index : index - *last);
    *last = index;
    const size_t at = values->size();
    values->resize(at + width);
    EncodeValuesTo(v + i, 1, encoding, &(*values)[at]);
  }
}

absl::Status ExpandNonZeros(const uint32_t* gaps, size_t count, absl::string_view values,
                            Encoding encoding, size_t n, float* out) {
  const size_t width = BytesPerValue(encoding);
  if (values.size() != count * width) {
    return absl::InvalidArgumentError(absl::StrCat("sparse values: ", count, " indices need ",
                                                   count * width, " bytes of ", width,
                                                   "-byte values, got ", values.size()));
  }
  std::fill(out, out + n, 0.0f);
  uint64_t index = 0;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0 && gaps[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse index gap ", i, " is 0: indices must increase"));
    }
    index = (i == 0 ? 0 : index) + gaps[i];
    if (index >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse index ", index, " (entry ", i, ") is outside the ", n, " values"));
    }
    // The size was checked above: one value always decodes.
    (void)DecodeValues(values.substr(i * width, width), encoding, 1, out + index);
  }
  return absl::OkStatus();
}

}  // namespace shardps
