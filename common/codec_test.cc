#include "common/codec.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

float Pow2(int e) { return std::ldexp(1.0f, e); }

// Reference encodings worked out by hand from IEEE 754 binary16.
TEST(HalfTest, ReferenceValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);       // 0.0999755859375
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);   // largest finite
  EXPECT_EQ(FloatToHalf(Pow2(-14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(Pow2(-24)), 0x0001);  // smallest subnormal
}

TEST(HalfTest, RoundsToNearestEven) {
  // Halfway between 1 and 1 + 2^-10: ties to the even mantissa (1).
  EXPECT_EQ(FloatToHalf(1.0f + Pow2(-11)), 0x3c00);
  // Halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * Pow2(-11)), 0x3c02);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToHalf(1.0f + Pow2(-11) + Pow2(-20)), 0x3c01);
  // Subnormal ties: 2^-25 is half of the smallest subnormal -> 0 (even);
  // 3 * 2^-25 is between 1 and 2 units -> 2 (even).
  EXPECT_EQ(FloatToHalf(Pow2(-25)), 0x0000);
  EXPECT_EQ(FloatToHalf(3 * Pow2(-25)), 0x0002);
  // Overflow: 65519 rounds down to 65504, 65520 (the tie) to Inf.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e9f), 0xfc00);
}

TEST(HalfTest, InfAndNanPreserved) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(inf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(-std::nanf("")))));
  // A signalling NaN whose payload sits only in low bits must not become Inf.
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(BitsFloat(0x7f800001u)))));
}

TEST(HalfTest, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Bf16Test, ReferenceValuesAndRounding) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(FloatToBf16(1.0f + Pow2(-8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between odd 1+2^-7 and even 1+2^-6: up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * Pow2(-8)), 0x3f82);
  EXPECT_EQ(FloatToBf16(1.0f + Pow2(-8) + Pow2(-20)), 0x3f81);
  // The largest float rounds up to Inf.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(BitsFloat(0x7f800001u)))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), b);
    }
  }
}

// EncodeValuesTo narrows arrays with AVX2 (bf16) and F16C (fp16) where the
// CPU has them: every value, at every position of a run and in the tail,
// must be what the scalar FloatToBf16 / FloatToHalf give (ties, carries into
// the exponent, overflow, Inf, NaN payloads, subnormals, both signs).
std::vector<uint32_t> FloatPatterns() {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3f808000u,
                                0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                                0xff800000u, 0x7f800001u, 0xffc12345u, 0x7fffffffu, 0x7f7f8000u,
                                0x0000ffffu, 0x477ff000u, 0x477fefffu, 0x38800000u, 0x33000000u,
                                0x33000001u, 0xb3800000u, 0x3f801000u, 0x3f803000u};
  uint64_t x = 0x9e3779b97f4a7c15ull;  // splitmix64: any 32-bit pattern.
  while (bits.size() < 150003) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    const uint32_t r = static_cast<uint32_t>(z ^ (z >> 31));
    bits.push_back(r);
    bits.push_back((r & 0xffff0000u) | 0x8000u);  // A bf16 tie.
    bits.push_back((r & 0xffffe000u) | 0x1000u);  // An fp16 tie (in range or not).
  }
  return bits;
}

TEST(CodecTest, ArrayNarrowingEqualsTheScalarRoundingForEveryPattern) {
  const std::vector<uint32_t> bits = FloatPatterns();
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = BitsFloat(bits[i]);
  for (Encoding e : {Encoding::kBf16, Encoding::kFp16}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16}, size_t{17},
                     size_t{64}, values.size()}) {
      std::string wire(2 * n, '\0');
      EncodeValuesTo(values.data(), n, e, wire.data());
      for (size_t i = 0; i < n; ++i) {
        uint16_t got;
        std::memcpy(&got, wire.data() + 2 * i, 2);
        const uint16_t want =
            e == Encoding::kBf16 ? FloatToBf16(values[i]) : FloatToHalf(values[i]);
        ASSERT_EQ(got, want) << (e == Encoding::kBf16 ? "bf16" : "fp16") << " n " << n << " at "
                             << i << " float bits 0x" << std::hex << bits[i];
      }
    }
  }
}

// DecodeValues widens fp16 arrays with F16C where the CPU has it: all 65536
// halves, in one array and in short ones, come back as HalfToFloat gives,
// a signalling NaN quieted.
TEST(HalfTest, ArrayWideningEqualsHalfToFloatForEveryHalf) {
  std::string wire(2 * 0x10000, '\0');
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    std::memcpy(wire.data() + 2 * h, &v, 2);
  }
  std::vector<float> out(0x10000);
  for (size_t n : {size_t{0x10000}, size_t{13}}) {
    for (size_t start = 0; start + n <= 0x10000; start += n) {
      ASSERT_TRUE(DecodeValues(absl::string_view(wire).substr(2 * start, 2 * n), Encoding::kFp16, n,
                               out.data() + start)
                      .ok());
    }
    for (uint32_t h = 0; h < 0x10000 / n * n; ++h) {
      ASSERT_EQ(FloatBits(out[h]), FloatBits(HalfToFloat(static_cast<uint16_t>(h))))
          << "n " << n << " half 0x" << std::hex << h;
    }
  }
  EXPECT_EQ(FloatBits(HalfToFloat(0x7c01)), 0x7fc02000u);  // Quieted, payload kept.
  EXPECT_EQ(FloatBits(HalfToFloat(0xfe00)), 0xffc00000u);
}

TEST(CodecTest, ArraysRoundTripInEveryEncoding) {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 1024.0f, -0.0f};
  for (Encoding e : {Encoding::kFp32, Encoding::kFp16, Encoding::kBf16}) {
    std::string wire = "prefix";
    EncodeValues(values.data(), values.size(), e, &wire);
    ASSERT_EQ(wire.size(), 6 + values.size() * BytesPerValue(e));
    std::vector<float> back(values.size());
    ASSERT_TRUE(
        DecodeValues(absl::string_view(wire).substr(6), e, values.size(), back.data()).ok());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(FloatBits(back[i]), FloatBits(values[i]));  // all exact here
    }
  }
}

TEST(CodecTest, Fp32IsLittleEndianOnTheWire) {
  const float one = 1.0f;  // 0x3f800000
  std::string wire;
  EncodeValues(&one, 1, Encoding::kFp32, &wire);
  ASSERT_EQ(wire.size(), 4u);
  EXPECT_EQ(static_cast<unsigned char>(wire[0]), 0x00);
  EXPECT_EQ(static_cast<unsigned char>(wire[3]), 0x3f);
}

TEST(CodecTest, FirstNonFiniteFindsTheFirstNanOrInfinity) {
  std::vector<float> v(200);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1.0f : 1.0f) * i * 1e30f;
  v[7] = std::numeric_limits<float>::max();
  v[8] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(FirstNonFinite(v.data(), v.size()), v.size());
  EXPECT_EQ(FirstNonFinite(v.data(), 0), 0u);
  const float bad[] = {
      std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
  // Positions at and around the scan's 64-value blocks.
  for (size_t at : {0, 1, 63, 64, 65, 127, 128, 199}) {
    for (float b : bad) {
      std::vector<float> w = v;
      w[at] = b;
      if (at + 3 < w.size()) w[at + 3] = b;  // A later one does not matter.
      EXPECT_EQ(FirstNonFinite(w.data(), w.size()), at) << at << " " << b;
      EXPECT_EQ(FirstNonFinite(w.data(), at), at);  // Not in range: none.
    }
  }
}

TEST(CodecTest, WrongByteCountIsRejected) {
  float out[3];
  const absl::Status st = DecodeValues(std::string(10, '\0'), Encoding::kFp32, 3, out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("expected 3 values"), std::string::npos) << st.message();
  EXPECT_TRUE(DecodeValues(std::string(6, '\0'), Encoding::kBf16, 3, out).ok());
}

// The sparse form keeps signs and indices: expanding what was appended gives
// the array back, in every encoding (up to the encoding's rounding).
TEST(CodecTest, NonZerosRoundTripWithSignsAndIndices) {
  std::vector<float> v(300, 0.0f);
  v[0] = -1.5f;
  v[7] = 2.25f;
  v[8] = -0.0f;  // A zero of either sign is not sent.
  v[64] = 1e-3f;
  v[299] = -7.0f;
  for (Encoding e : {Encoding::kFp32, Encoding::kFp16, Encoding::kBf16}) {
    std::vector<uint32_t> gaps;
    std::string values;
    uint32_t last = 0;
    // Two rows of 150 appended one after the other, as the client does.
    AppendNonZeros(v.data(), 150, 0, e, &gaps, &last, &values);
    AppendNonZeros(v.data() + 150, 150, 150, e, &gaps, &last, &values);
    EXPECT_EQ(gaps, (std::vector<uint32_t>{0, 7, 57, 235}));
    EXPECT_EQ(values.size(), 4 * BytesPerValue(e));
    std::vector<float> out(300, 9.0f);
    ASSERT_TRUE(ExpandNonZeros(gaps.data(), gaps.size(), values, e, 300, out.data()).ok());
    for (size_t i = 0; i < v.size(); ++i) {
      std::string one;
      EncodeValues(&v[i], 1, e, &one);
      float want;
      ASSERT_TRUE(DecodeValues(one, e, 1, &want).ok());
      EXPECT_EQ(out[i], want == 0.0f ? 0.0f : want) << i;
      EXPECT_EQ(std::signbit(out[i]), v[i] < 0.0f) << i;
    }
  }
}

TEST(CodecTest, BadSparseFormsAreRefused) {
  float out[10];
  const std::string two(8, '\0');
  const uint32_t ok[] = {1, 3};
  EXPECT_TRUE(ExpandNonZeros(ok, 2, two, Encoding::kFp32, 10, out).ok());
  const uint32_t repeated[] = {1, 0};
  EXPECT_NE(
      ExpandNonZeros(repeated, 2, two, Encoding::kFp32, 10, out).message().find("must increase"),
      std::string::npos);
  const uint32_t outside[] = {4, 6};
  EXPECT_NE(ExpandNonZeros(outside, 2, two, Encoding::kFp32, 10, out)
                .message()
                .find("outside the 10 values"),
            std::string::npos);
  // A gap that wraps a 32-bit index around is still outside.
  const uint32_t wrap[] = {5, 0xffffffffu};
  EXPECT_FALSE(ExpandNonZeros(wrap, 2, two, Encoding::kFp32, 10, out).ok());
  EXPECT_NE(ExpandNonZeros(ok, 2, std::string(6, '\0'), Encoding::kFp32, 10, out)
                .message()
                .find("2 indices need 8 bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace shardps
