#include "common/checkpoint/file_io.h"

#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/test_util.h"
#include "gtest/gtest.h"

namespace shardps {
namespace checkpoint {
namespace {

TEST(FileIoTest, AtomicWriteAppearsOnlyOnCommit) {
  const std::string dir = testing::NewTempDir("file_io");
  const std::string path = JoinPath(dir, "f");
  auto writer = AtomicFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append("hello ").ok());
  ASSERT_TRUE((*writer)->Append("world").ok());
  EXPECT_EQ(ReadFileToString(path).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(*ReadFileToString(path), "hello world");
  EXPECT_EQ((*writer)->size(), 11u);
  EXPECT_EQ((*writer)->crc32c(), Crc32c("hello world"));
  auto digest = DigestFile(path);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(digest->size, 11u);
  EXPECT_EQ(digest->crc32c, Crc32c("hello world"));
  EXPECT_EQ(*ListDir(dir), std::vector<std::string>{"f"});
  EXPECT_FALSE((*writer)->Commit().ok());
}

TEST(FileIoTest, RemoveAllAndTempNames) {
  const std::string dir = testing::NewTempDir("file_io");
  ASSERT_TRUE(MakeDir(JoinPath(dir, "a")).ok());
  ASSERT_TRUE(MakeDir(JoinPath(dir, "a")).ok());  // Exists: fine.
  ASSERT_TRUE(WriteFileAtomically(JoinPath(dir, "a/x"), "1").ok());
  EXPECT_TRUE(IsDirectory(JoinPath(dir, "a")));
  ASSERT_TRUE(RemoveAll(JoinPath(dir, "a")).ok());
  EXPECT_FALSE(IsDirectory(JoinPath(dir, "a")));
  EXPECT_TRUE(RemoveAll(JoinPath(dir, "a")).ok());
  EXPECT_TRUE(IsTempFileName("MANIFEST.tmp.12.0"));
  EXPECT_FALSE(IsTempFileName("MANIFEST"));
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps
