#include "worker/export/embedding_file.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/checkpoint/file_io.h"
#include "gtest/gtest.h"

namespace shardps {
namespace exporter {
namespace {

std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

EmbeddingFileHeader Header(uint32_t dim) {
  EmbeddingFileHeader h;
  h.table_id = 7;
  h.table_name = "categorical";
  h.dim = dim;
  h.clock = 120;
  h.job_name = "job";
  return h;
}

// Writes 3 rows of dim 2 and returns the file's bytes.
std::string WriteSmall(const std::string& path) {
  const std::vector<uint64_t> keys = {3, 10, ~uint64_t{0}};
  const std::vector<float> values = {0.5f, -1.0f, 2.0f, 3.5f, 1e-30f, -0.0f};
  auto written = WriteEmbeddingFile(path, Header(2), keys, values);
  EXPECT_TRUE(written.ok()) << written.status();
  auto bytes = checkpoint::ReadFileToString(path);
  EXPECT_TRUE(bytes.ok());
  EXPECT_EQ(written->size, bytes->size());
  return *bytes;
}

TEST(EmbeddingFileTest, RoundTrip) {
  const std::string path = Path("round_trip.emb");
  const std::string bytes = WriteSmall(path);
  EXPECT_EQ(bytes.size(), 48 + 11 + 3 + 3 * (8 + 4 * 2) + 12u);
  auto reader = EmbeddingFileReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const EmbeddingFileHeader& h = (*reader)->header();
  EXPECT_EQ(h.version, kEmbeddingFileVersion);
  EXPECT_EQ(h.table_id, 7u);
  EXPECT_EQ(h.table_name, "categorical");
  EXPECT_EQ(h.dim, 2u);
  EXPECT_EQ(h.dtype, EmbeddingDtype::kFp32);
  EXPECT_EQ(h.num_rows, 3u);
  EXPECT_EQ(h.clock, 120u);
  EXPECT_EQ(h.job_name, "job");
  EXPECT_EQ((*reader)->key(0), 3u);
  EXPECT_EQ((*reader)->key(2), ~uint64_t{0});
  EXPECT_EQ((*reader)->row(1)[0], 2.0f);
  EXPECT_EQ((*reader)->row(1)[1], 3.5f);
  EXPECT_EQ((*reader)->row(2)[0], 1e-30f);
  EXPECT_TRUE(std::signbit((*reader)->row(2)[1]));
  auto found = (*reader)->Find(10);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ((*found)[0], 2.0f);
  EXPECT_FALSE((*reader)->Find(4).has_value());
  EXPECT_FALSE((*reader)->Find(0).has_value());
}

TEST(EmbeddingFileTest, EmptyTableRoundTrips) {
  const std::string path = Path("empty.emb");
  ASSERT_TRUE(WriteEmbeddingFile(path, Header(4), {}, {}).ok());
  auto reader = EmbeddingFileReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->num_rows(), 0u);
  EXPECT_FALSE((*reader)->Find(1).has_value());
}

TEST(EmbeddingFileTest, WriterRefusesBadArguments) {
  const std::vector<uint64_t> unsorted = {5, 5};
  const std::vector<float> two_rows = {1, 2};
  auto st = WriteEmbeddingFile(Path("bad.emb"), Header(1), unsorted, two_rows);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.status().message(), "strictly increasing"));
  const std::vector<uint64_t> keys = {1, 2};
  st = WriteEmbeddingFile(Path("bad.emb"), Header(2), keys, two_rows);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  st = WriteEmbeddingFile(Path("bad.emb"), Header(0), {}, {});
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(checkpoint::FileSize(Path("bad.emb")).ok()) << "nothing written";
}

TEST(EmbeddingFileTest, EveryFlippedByteIsRefused) {
  const std::string bytes = WriteSmall(Path("flip.emb"));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] ^= 0x01;
    auto reader = EmbeddingFileReader::Parse(damaged, "flip.emb");
    ASSERT_FALSE(reader.ok()) << "byte " << i << " flipped was accepted";
    EXPECT_TRUE(absl::StrContains(reader.status().message(), "flip.emb"));
    EXPECT_TRUE(reader.status().code() == absl::StatusCode::kDataLoss ||
                reader.status().code() == absl::StatusCode::kFailedPrecondition)
        << reader.status();
  }
}

TEST(EmbeddingFileTest, TruncationAndTrailingBytesAreRefused) {
  const std::string bytes = WriteSmall(Path("trunc.emb"));
  for (size_t n : {size_t{0}, size_t{5}, size_t{47}, size_t{60}, bytes.size() - 1}) {
    auto reader = EmbeddingFileReader::Parse(bytes.substr(0, n), "trunc.emb");
    ASSERT_FALSE(reader.ok()) << n;
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss) << reader.status();
  }
  auto reader = EmbeddingFileReader::Parse(bytes + "x", "trunc.emb");
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "trailing")) << reader.status();
}

TEST(EmbeddingFileTest, WrongMagicAndNewerVersionSayWhat) {
  std::string bytes = WriteSmall(Path("version.emb"));
  std::string other = bytes;
  std::memcpy(&other[0], "SHPSCKPT", 8);
  auto reader = EmbeddingFileReader::Parse(other, "version.emb");
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "magic")) << reader.status();
  const uint32_t v2 = 2;
  std::memcpy(&bytes[8], &v2, 4);
  reader = EmbeddingFileReader::Parse(bytes, "version.emb");
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "version 2")) << reader.status();
}

TEST(EmbeddingFileTest, MissingFileIsNotFound) {
  auto reader = EmbeddingFileReader::Open(Path("missing.emb"));
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace exporter
}  // namespace shardps
