#include "common/checkpoint/crc32c.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace shardps {
namespace checkpoint {
namespace {

// Check values from RFC 3720 (iSCSI), appendix B.4, and the CRC catalogue.
TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, ExtendEqualsWholeAtEverySplitAndAlignment) {
  std::string data;
  for (int i = 0; i < 301; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  for (size_t start = 0; start < 9; ++start) {
    absl::string_view view = absl::string_view(data).substr(start);
    const uint32_t whole = Crc32c(view);
    for (size_t split = 0; split <= view.size(); split += 13) {
      uint32_t c = Crc32c(view.data(), split);
      c = Crc32cExtend(c, view.data() + split, view.size() - split);
      EXPECT_EQ(c, whole) << "start " << start << " split " << split;
    }
  }
}

// The hardware path (when the CPU has one) and the portable one agree on
// every length and alignment, split or whole.
TEST(Crc32cTest, HardwareAndPortableAgree) {
  std::string data;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 4099; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data.push_back(static_cast<char>(x));
  }
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4090}) {
      const absl::string_view view = absl::string_view(data).substr(start, len);
      EXPECT_EQ(Crc32c(view), Crc32cExtendPortable(0, view.data(), view.size()))
          << "start " << start << " len " << len;
      EXPECT_EQ(Crc32cExtend(0x12345678u, view.data(), view.size()),
                Crc32cExtendPortable(0x12345678u, view.data(), view.size()));
    }
  }
  std::printf("CRC32C hardware path: %s\n", Crc32cHardware() ? "yes" : "no");
}

// Lengths around the three-stream runs (3 x 4096 bytes) of the hardware
// path, at every alignment, from a non-zero CRC: the same as the portable
// code.
TEST(Crc32cTest, HardwareStreamsAgreeWithPortable) {
  std::string data;
  uint64_t x = 0x2545f4914f6cdd1dULL;
  for (int i = 0; i < 5 * 12288 + 64; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data.push_back(static_cast<char>(x));
  }
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len : {12287, 12288, 12289, 12295, 24576, 24583, 3 * 12288 + 17, 5 * 12288}) {
      const absl::string_view view = absl::string_view(data).substr(start, len);
      ASSERT_EQ(view.size(), len);
      EXPECT_EQ(Crc32cExtend(0x12345678u, view.data(), view.size()),
                Crc32cExtendPortable(0x12345678u, view.data(), view.size()))
          << "start " << start << " len " << len;
    }
  }
}

TEST(Crc32cTest, DetectsEverySingleBitFlip) {
  std::string data(64, 'x');
  const uint32_t good = Crc32c(data);
  for (size_t i = 0; i < data.size() * 8; ++i) {
    std::string bad = data;
    bad[i / 8] ^= static_cast<char>(1 << (i % 8));
    EXPECT_NE(Crc32c(bad), good);
  }
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps
