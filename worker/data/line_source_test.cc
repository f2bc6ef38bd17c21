#include "worker/data/line_source.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

using testing::WriteFile;
using testing::WriteGzip;

// All lines of `path` (too-long lines as "<too long>"), or the error.
absl::StatusOr<std::vector<std::string>> ReadLines(const std::string& path,
                                                   size_t max_line_bytes = 1 << 20,
                                                   bool* compressed = nullptr) {
  auto source = LineSource::Open(path, max_line_bytes);
  if (!source.ok()) return source.status();
  std::vector<std::string> lines;
  LineSource::Line line;
  while (true) {
    auto more = (*source)->Next(&line);
    if (!more.ok()) return more.status();
    if (!*more) break;
    lines.push_back(line.too_long ? "<too long>" : std::string(line.text));
  }
  if (compressed != nullptr) *compressed = (*source)->compressed();
  return lines;
}

using Lines = std::vector<std::string>;

TEST(LineSourceTest, TrailingNewlineOrNot) {
  EXPECT_EQ(*ReadLines(WriteFile("a.tsv", "x\ny\n")), (Lines{"x", "y"}));
  EXPECT_EQ(*ReadLines(WriteFile("b.tsv", "x\ny")), (Lines{"x", "y"}));
  EXPECT_EQ(*ReadLines(WriteFile("c.tsv", "")), (Lines{}));
  EXPECT_EQ(*ReadLines(WriteFile("d.tsv", "\n\nz")), (Lines{"", "", "z"}));
  // CR is left to the parser.
  EXPECT_EQ(*ReadLines(WriteFile("e.tsv", "x\r\ny\r\n")), (Lines{"x\r", "y\r"}));
}

TEST(LineSourceTest, GzipIsDetectedByContentNotName) {
  bool compressed = false;
  const std::string gz = WriteGzip("plain_name.tsv", {"a\tb\n", "c\n"});  // 2 members
  EXPECT_EQ(*ReadLines(gz, 1 << 20, &compressed), (Lines{"a\tb", "c"}));
  EXPECT_TRUE(compressed);
  const std::string plain = WriteFile("gz_name.tsv.gz", "p\nq\n");
  EXPECT_EQ(*ReadLines(plain, 1 << 20, &compressed), (Lines{"p", "q"}));
  EXPECT_FALSE(compressed);
}

TEST(LineSourceTest, LargeGzipFileStreams) {
  const std::string content = testing::CriteoLines(0, 20000);
  const auto lines = ReadLines(WriteGzip("large.tsv.gz", {content}), 4096);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 20000u);
  EXPECT_EQ((*lines)[12345], testing::CriteoLine(1, 12345));
}

TEST(LineSourceTest, TruncatedGzipIsDataLoss) {
  const std::string full = testing::ReadAll(WriteGzip("full.gz", {testing::CriteoLines(0, 2000)}));
  const std::string path = WriteFile("truncated.gz", full.substr(0, full.size() / 2));
  const auto lines = ReadLines(path);
  ASSERT_EQ(lines.status().code(), absl::StatusCode::kDataLoss) << lines.status();
  EXPECT_NE(lines.status().message().find(path), std::string::npos);
}

TEST(LineSourceTest, CorruptGzipIsDataLoss) {
  std::string bytes = testing::ReadAll(WriteGzip("ok.gz", {testing::CriteoLines(0, 2000)}));
  for (size_t i = 100; i < 200; ++i) bytes[i] ^= 0x5a;
  const auto lines = ReadLines(WriteFile("corrupt.gz", bytes));
  EXPECT_EQ(lines.status().code(), absl::StatusCode::kDataLoss) << lines.status();
}

TEST(LineSourceTest, MissingFileIsNotFound) {
  auto source = LineSource::Open(testing::TempPath("no_such_file"), 1 << 20);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kNotFound);
}

TEST(LineSourceTest, TooLongLinesAreSkippedAndFlagged) {
  const std::string path =
      WriteFile("long.tsv", "short\n" + std::string(100, 'x') + "\nafter\n" + std::string(40, 'y'));
  EXPECT_EQ(*ReadLines(path, 32), (Lines{"short", "<too long>", "after", "<too long>"}));
}

TEST(LineSourceTest, SeekToALineStart) {
  for (const bool gzip : {false, true}) {
    const std::string content = "l0\nline1\nl2\nl3";
    const std::string path =
        gzip ? WriteGzip("seek.gz", {content}) : WriteFile("seek.tsv", content);
    auto source = *LineSource::Open(path, 64);
    ASSERT_TRUE(source->Seek(9, 2).ok());  // "l2"
    LineSource::Line line;
    ASSERT_TRUE(*source->Next(&line));
    EXPECT_EQ(line.text, "l2");
    EXPECT_EQ(source->next_line(), 3u);
    EXPECT_EQ(source->next_offset(), 12u);
    // Back to the start, and to the very end (no trailing newline).
    ASSERT_TRUE(source->Seek(0, 0).ok());
    ASSERT_TRUE(*source->Next(&line));
    EXPECT_EQ(line.text, "l0");
    ASSERT_TRUE(source->Seek(14, 4).ok());
    EXPECT_FALSE(*source->Next(&line));
    // Not line starts.
    EXPECT_EQ(source->Seek(4, 1).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(source->Seek(13, 3).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(source->Seek(99, 3).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(LineSourceTest, SeekToLineAtOrAfterAByteFindsTheNextLineStart) {
  for (const bool gzip : {false, true}) {
    const std::string content = "l0\nline1\nl2\nl3";  // Lines at 0, 3, 9, 12.
    const std::string path =
        gzip ? WriteGzip("after.gz", {content}) : WriteFile("after.tsv", content);
    auto source = *LineSource::Open(path, 64);
    LineSource::Line line;
    const struct {
      uint64_t offset;
      const char* first;  // nullptr: no line starts at or after it.
      uint64_t at;
    } cases[] = {{0, "l0", 0}, {1, "line1", 3}, {3, "line1", 3},   {4, "l2", 9},
                 {9, "l2", 9}, {10, "l3", 12},  {13, nullptr, 14}, {99, nullptr, 0}};
    for (const auto& c : cases) {
      SCOPED_TRACE(c.offset);
      ASSERT_TRUE(source->SeekToLineAtOrAfter(c.offset, 0).ok());
      if (c.first == nullptr) {
        EXPECT_FALSE(*source->Next(&line));
        continue;
      }
      EXPECT_EQ(source->next_offset(), c.at);
      ASSERT_TRUE(*source->Next(&line));
      EXPECT_EQ(line.text, c.first);
      EXPECT_EQ(source->next_line(), 1u);  // Numbered from 0 at the seek.
    }
  }
}

TEST(LineSourceTest, CountsBytesReadAndDecompressed) {
  const std::string content = testing::CriteoLines(0, 500);
  auto plain = *LineSource::Open(WriteFile("count.tsv", content), 4096);
  auto gz = *LineSource::Open(WriteGzip("count.gz", {content}), 4096);
  // A plain seek reads nothing before the target; a gzip one decompresses it.
  const uint64_t half = content.size() / 2;
  ASSERT_TRUE(plain->SeekToLineAtOrAfter(half, 0).ok());
  ASSERT_TRUE(gz->SeekToLineAtOrAfter(half, 0).ok());
  LineSource::Line line;
  while (*plain->Next(&line)) {
  }
  while (*gz->Next(&line)) {
  }
  EXPECT_GE(plain->bytes_read(), content.size() - half);
  EXPECT_LE(plain->bytes_read(), content.size() - half + 1);  // + the byte before.
  EXPECT_EQ(plain->bytes_decompressed(), 0u);
  EXPECT_EQ(gz->bytes_decompressed(), content.size());
  EXPECT_EQ(gz->bytes_read(), 0u);
}

}  // namespace
}  // namespace data
}  // namespace shardps
