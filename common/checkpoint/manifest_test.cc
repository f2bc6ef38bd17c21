#include "common/checkpoint/manifest.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace checkpoint {
namespace {

using ::testing::HasSubstr;

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("manifest");
    manifest_ = testing::WriteTestCheckpoint(root_, 400);
    dir_ = JoinPath(root_, "ckpt-000000000400");
  }
  std::string File(int group) const { return JoinPath(dir_, PartitionGroupFileName(group)); }
  // Rewrites MANIFEST with `from` replaced by `to` and a valid CRC line.
  void EditManifest(absl::string_view from, absl::string_view to) {
    const std::string path = JoinPath(dir_, kManifestFileName);
    std::string text = testing::ReadAll(path);
    text = text.substr(0, text.rfind("# crc32c: "));
    ASSERT_THAT(text, HasSubstr(from));
    text = absl::StrReplaceAll(text, {{from, to}});
    testing::WriteAll(path,
                      absl::StrCat(text, "# crc32c: ", absl::StrFormat("%08x\n", Crc32c(text))));
  }

  std::string root_, dir_;
  CheckpointManifest manifest_;
};

TEST_F(ManifestTest, CheckpointIds) {
  EXPECT_EQ(CheckpointId(123), "ckpt-000000000123");
  EXPECT_EQ(ParseCheckpointId("ckpt-000000000123"), 123u);
  EXPECT_EQ(ParseCheckpointId("ckpt-18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(ParseCheckpointId("ckpt-18446744073709551616"));
  EXPECT_FALSE(ParseCheckpointId("ckpt-"));
  EXPECT_FALSE(ParseCheckpointId("ckpt--1"));
  EXPECT_FALSE(ParseCheckpointId("ckpt-12a"));
  EXPECT_FALSE(ParseCheckpointId("x-12"));
}

TEST_F(ManifestTest, WrittenManifestLoadsBackEqual) {
  auto loaded = LoadManifest(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->SerializeAsString(), manifest_.SerializeAsString());
  EXPECT_EQ(loaded->worker_positions(1).position(), std::string("binary\0\xff", 8));
  // The text is readable and ends with the CRC line.
  const std::string text = testing::ReadAll(JoinPath(dir_, kManifestFileName));
  EXPECT_THAT(text, HasSubstr("checkpoint_id: \"ckpt-000000000400\""));
  EXPECT_THAT(text, HasSubstr("kind: FULL"));
  EXPECT_EQ(text.substr(text.size() - 19, 10), "# crc32c: ");
  // Parse of a serialization is the identity.
  auto parsed = ParseManifest(SerializeManifest(manifest_), "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), manifest_.SerializeAsString());
}

TEST_F(ManifestTest, FilesOfTheManifestOpenWithItsExpectations) {
  for (const CheckpointFile& f : manifest_.files()) {
    Expectations e = FileExpectations(manifest_, f);
    e.tables = testing::TestTables();
    e.check_key_partitions = false;
    auto reader = CheckpointFileReader::Open(JoinPath(dir_, f.name()), e);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->num_records(), 4u * 5 * 2);
  }
  // The other file's partitions are refused.
  Expectations e = FileExpectations(manifest_, manifest_.files(1));
  EXPECT_THAT(CheckpointFileReader::Open(File(0), e).status().message(),
              HasSubstr("partitions [0,1,2,3] do not match the expected "
                        "[4,5,6,7]"));
}

TEST_F(ManifestTest, CorruptManifestIsRefused) {
  const std::string path = JoinPath(dir_, kManifestFileName);
  testing::FlipByte(path, 30);
  absl::Status s = LoadManifest(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path + ": CRC mismatch"));
}

TEST_F(ManifestTest, TruncatedManifestIsRefused) {
  const std::string path = JoinPath(dir_, kManifestFileName);
  testing::Truncate(path, 100);
  EXPECT_THAT(LoadManifest(dir_).status().message(),
              HasSubstr(path + ": truncated: no CRC line at the end"));
}

TEST_F(ManifestTest, DirectoryWithoutManifestIsNotACheckpoint) {
  ASSERT_TRUE(RemoveAll(JoinPath(dir_, kManifestFileName)).ok());
  absl::Status s = LoadManifest(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(JoinPath(dir_, kManifestFileName)));
}

TEST_F(ManifestTest, MissingFileIsRefusedNamingIt) {
  ASSERT_TRUE(RemoveAll(File(1)).ok());
  absl::Status s = LoadManifest(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), File(1) + ": listed in the manifest but missing");
}

TEST_F(ManifestTest, WrongSizeFileIsRefusedNamingIt) {
  const uint64_t size = manifest_.files(0).size();
  testing::WriteAll(File(0), testing::ReadAll(File(0)) + "!");
  absl::Status s = LoadManifest(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            absl::StrCat(File(0), ": size ", size + 1, " does not match the manifest's ", size));
  testing::Truncate(File(0), size - 1);
  EXPECT_THAT(LoadManifest(dir_).status().message(), HasSubstr(absl::StrCat(": size ", size - 1)));
}

TEST_F(ManifestTest, FlippedByteInAFileIsRefusedByItsCrc) {
  testing::FlipByte(File(1), 100);
  absl::Status s = LoadManifest(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(File(1) + ": CRC32C "));
  EXPECT_THAT(s.message(), HasSubstr("does not match the manifest's"));
  LoadManifestOptions sizes_only;
  sizes_only.verify_file_crcs = false;
  EXPECT_TRUE(LoadManifest(dir_, sizes_only).ok());
  // The file reader still catches it.
  EXPECT_FALSE(CheckpointFileReader::Open(File(1)).ok());
}

TEST_F(ManifestTest, WrongVersionIsRefused) {
  EditManifest("format_version: 1", "format_version: 2");
  absl::Status s = LoadManifest(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("format_version 2 is not supported"));
}

TEST_F(ManifestTest, ManifestInTheWrongDirectoryIsRefused) {
  const std::string other = JoinPath(root_, "ckpt-000000000500");
  ASSERT_TRUE(MakeDir(other).ok());
  ASSERT_TRUE(
      WriteFileAtomically(JoinPath(other, kManifestFileName), SerializeManifest(manifest_)).ok());
  EXPECT_THAT(LoadManifest(other).status().message(),
              HasSubstr("does not match its directory ckpt-000000000500"));
}

TEST_F(ManifestTest, GarbageIsRefused) {
  EditManifest("clock: 400", "clock: \"x\"");
  EXPECT_THAT(LoadManifest(dir_).status().message(), HasSubstr("not a manifest: "));
}

TEST_F(ManifestTest, ValidationRules) {
  const auto invalid = [&](CheckpointManifest m, absl::string_view message) {
    absl::Status s = ValidateManifest(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(message));
  };
  EXPECT_TRUE(ValidateManifest(manifest_).ok());
  CheckpointManifest m = manifest_;
  m.mutable_files(1)->mutable_partitions()->RemoveLast();
  invalid(m, "partition 7 is in no file");
  m = manifest_;
  m.mutable_files(1)->set_partitions(0, 3);
  invalid(m, "partition 3 is in both part-0000.shard and part-0001.shard");
  m = manifest_;
  m.mutable_files(1)->set_name("../evil");
  invalid(m, "bad file name \"../evil\"");
  m = manifest_;
  m.mutable_files(1)->set_name("part-0000.shard");
  invalid(m, "listed twice");
  m = manifest_;
  m.mutable_worker_positions(1)->set_rank(0);
  invalid(m, "worker rank 0 listed twice");
  m = manifest_;
  m.set_clock(401);
  invalid(m, "does not match clock 401");
  m = manifest_;
  m.set_base_id("ckpt-000000000300");
  invalid(m, "a FULL checkpoint has no base_id");
  m = manifest_;
  m.set_kind(CheckpointManifest::DELTA);
  invalid(m, "a DELTA's chain must end with {base_id, checkpoint_id}");
  m.set_base_id("ckpt-000000000500");
  m.clear_chain();
  m.add_chain("ckpt-000000000500");
  m.add_chain("ckpt-000000000400");
  invalid(m, "is not a checkpoint id newer than the one before");
  m = manifest_;
  m.set_num_partitions(0);
  invalid(m, "num_partitions must be > 0");
}

TEST_F(ManifestTest, WriteManifestChecksTheFiles) {
  CheckpointManifest m = manifest_;
  m.mutable_files(0)->set_size(m.files(0).size() + 1);
  absl::Status s = WriteManifest(dir_, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(File(0)));
  ASSERT_TRUE(RemoveAll(File(1)).ok());
  EXPECT_EQ(WriteManifest(dir_, manifest_).code(), absl::StatusCode::kNotFound);
}

TEST_F(ManifestTest, CheckManifestMatchesJob) {
  EXPECT_TRUE(CheckManifestMatchesJob(manifest_, "job", 77, 8).ok());
  EXPECT_THAT(CheckManifestMatchesJob(manifest_, "job", 78, 8).message(),
              HasSubstr("ckpt-000000000400: config fingerprint "
                        "000000000000004d does not match the job config's "
                        "000000000000004e"));
  EXPECT_THAT(CheckManifestMatchesJob(manifest_, "job", 77, 16).message(),
              HasSubstr("num_partitions 8 does not match the job config's 16"));
  EXPECT_THAT(CheckManifestMatchesJob(manifest_, "other", 77, 8).message(),
              HasSubstr("job \"job\" does not match"));
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps
