// Every kind of bad checkpoint is refused by a restore, naming the file, and
// changes nothing. Core-level, no network.
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "gtest/gtest.h"
#include "server/parameter_server_core.h"
#include "server/snapshot.h"
#include "server/snapshot_test_util.h"

namespace shardps {
namespace {

namespace ckpt = checkpoint;
using testing::Config;
using testing::Dump;
using testing::Job;
using testing::kJob;
using testing::kParts;
using testing::NewRoot;

// A checkpoint of job A, and a target job B with rows of its own: every bad
// checkpoint is refused and leaves B exactly as it was.
class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Job original(2);
    for (uint64_t c = 0; c < 3; ++c) original.Step(c);
    dir_ = original.Checkpoint(
        NewRoot(::testing::UnitTest::GetInstance()->current_test_info()->name()), 3);
    // One server reads every file: a refusal must leave all of it unchanged.
    target_ = std::make_unique<Job>(1);
    target_->Step(0);
    before_ = target_->DumpAll();
  }

  // Restores onto the target; expects `code` and `text` in the message, and
  // the target unchanged.
  void ExpectRefused(absl::StatusCode code, const std::string& text) {
    const absl::Status st = target_->Restore(dir_);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(text), std::string::npos) << st;
    EXPECT_EQ(target_->DumpAll(), before_);
    EXPECT_EQ(target_->core(0).applied_clock(), 1u);
  }

  std::string File(const std::string& name) { return dir_ + "/" + name; }
  std::string Read(const std::string& path) {
    auto contents = ckpt::ReadFileToString(path);
    EXPECT_TRUE(contents.ok()) << contents.status();
    return *contents;
  }
  void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  std::string dir_;
  std::unique_ptr<Job> target_;
  Dump before_;
};

TEST_F(CorruptionTest, FlippedByteIsRefusedNamingTheFile) {
  // The manifest's CRC of the file no longer matches.
  const std::string path = File("part-0000.shard");
  std::string bytes = Read(path);
  bytes[bytes.size() / 2] ^= 0x40;
  Write(path, bytes);
  ExpectRefused(absl::StatusCode::kDataLoss, "part-0000.shard");
}

TEST_F(CorruptionTest, FlippedByteWithMatchingManifestIsRefusedByBlockCrc) {
  // The manifest is rewritten with the damaged file's size and CRC: the
  // reader's block CRC still catches it.
  const std::string path = File("part-0000.shard");
  std::string bytes = Read(path);
  bytes[bytes.size() / 2] ^= 0x01;
  Write(path, bytes);
  auto manifest = ckpt::ParseManifest(Read(File(ckpt::kManifestFileName)), "m");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto digest = ckpt::DigestFile(path);
  ASSERT_TRUE(digest.ok());
  manifest->mutable_files(0)->set_crc32c(digest->crc32c);
  Write(File(ckpt::kManifestFileName), ckpt::SerializeManifest(*manifest));
  ExpectRefused(absl::StatusCode::kDataLoss, "CRC mismatch");
}

TEST_F(CorruptionTest, TruncatedFileIsRefused) {
  const std::string path = File("part-0001.shard");
  const std::string bytes = Read(path);
  Write(path, bytes.substr(0, bytes.size() - 100));
  ExpectRefused(absl::StatusCode::kDataLoss, "part-0001.shard");
}

TEST_F(CorruptionTest, MissingFileIsRefused) {
  ASSERT_TRUE(ckpt::RemoveAll(File("part-0001.shard")).ok());
  ExpectRefused(absl::StatusCode::kNotFound, "part-0001.shard");
}

TEST_F(CorruptionTest, MissingManifestIsRefused) {
  ASSERT_TRUE(ckpt::RemoveAll(File(ckpt::kManifestFileName)).ok());
  ExpectRefused(absl::StatusCode::kNotFound, "MANIFEST");
}

TEST_F(CorruptionTest, OtherTableSchemaIsRefused) {
  target_ = std::make_unique<Job>(1, Config(1, /*user_dim=*/5));
  target_->Step(0);
  before_ = target_->DumpAll();
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "dim");
}

TEST_F(CorruptionTest, OtherJobIsRefused) {
  JobConfig other = Config(1);
  other.set_name("another-job");
  target_ = std::make_unique<Job>(1, other);
  before_ = target_->DumpAll();
  const absl::Status st = target_->Restore(dir_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("another-job"), std::string::npos) << st;
  EXPECT_EQ(target_->DumpAll(), before_);
}

}  // namespace
}  // namespace shardps
