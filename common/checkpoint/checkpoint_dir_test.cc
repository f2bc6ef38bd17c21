#include "common/checkpoint/checkpoint_dir.h"

#include <string>
#include <vector>

#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/checkpoint/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace checkpoint {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::NewTempDir("ckpt_dir"); }
  std::string Dir(uint64_t clock) const { return CheckpointPath(root_, clock); }
  std::vector<std::string> Names() const { return *ListDir(root_); }

  std::string root_;
};

TEST_F(CheckpointDirTest, LayoutAndCreate) {
  EXPECT_EQ(CheckpointPath("/x", 7), "/x/ckpt-000000000007");
  const std::string root = JoinPath(root_, "new");
  auto dir = CreateCheckpointDir(root, 7);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, JoinPath(root, "ckpt-000000000007"));
  EXPECT_TRUE(CreateCheckpointDir(root, 7).ok());  // Another server: fine.
  testing::WriteTestCheckpoint(root_, 9);
  EXPECT_EQ(CreateCheckpointDir(root_, 9).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(CheckpointDirTest, NoCheckpointIsNotFound) {
  EXPECT_EQ(LatestComplete(root_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestComplete(JoinPath(root_, "missing")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CheckpointDirTest, DirectoryWithoutManifestIsNotComplete) {
  testing::WriteTestCheckpoint(root_, 100);
  testing::WriteTestCheckpoint(root_, 200);
  ASSERT_TRUE(RemoveAll(JoinPath(Dir(200), kManifestFileName)).ok());
  auto latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->manifest.clock(), 100u);
  EXPECT_EQ(latest->dir, Dir(100));
}

TEST_F(CheckpointDirTest, LatestCompleteSkipsCorruptNewest) {
  testing::WriteTestCheckpoint(root_, 100);
  testing::WriteTestCheckpoint(root_, 200);
  testing::WriteTestCheckpoint(root_, 300);
  auto latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->manifest.clock(), 300u);
  testing::FlipByte(JoinPath(Dir(300), PartitionGroupFileName(1)), 50);
  latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->manifest.clock(), 200u);
  ASSERT_TRUE(RemoveAll(JoinPath(Dir(200), PartitionGroupFileName(0))).ok());
  latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->manifest.clock(), 100u);
  ASSERT_EQ(latest->chain.size(), 1u);
  EXPECT_EQ(latest->chain_dirs, std::vector<std::string>{Dir(100)});
}

TEST_F(CheckpointDirTest, DeltaChainResolves) {
  testing::WriteTestCheckpoint(root_, 100);
  testing::WriteTestCheckpoint(root_, 200, {"ckpt-000000000100"});
  testing::WriteTestCheckpoint(root_, 300, {"ckpt-000000000100", "ckpt-000000000200"});
  auto latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->manifest.kind(), CheckpointManifest::DELTA);
  ASSERT_EQ(latest->chain.size(), 3u);
  EXPECT_EQ(latest->chain[0].kind(), CheckpointManifest::FULL);
  EXPECT_EQ(latest->chain[2].clock(), 300u);
  EXPECT_EQ(latest->chain_dirs, (std::vector<std::string>{Dir(100), Dir(200), Dir(300)}));

  // A damaged link makes every delta after it unusable: LatestComplete falls
  // back to the newest checkpoint whose whole chain is intact.
  testing::FlipByte(JoinPath(Dir(200), PartitionGroupFileName(0)), 60);
  absl::Status s = LoadCheckpoint(root_, 300).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("needs ckpt-000000000200 of its delta "
                                     "chain"));
  latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->manifest.clock(), 100u);
}

TEST_F(CheckpointDirTest, DeltaOnADeltaMustLinkUp) {
  testing::WriteTestCheckpoint(root_, 100);
  // A delta whose chain starts with a delta, not a FULL checkpoint.
  testing::WriteTestCheckpoint(root_, 200, {"ckpt-000000000100"});
  testing::WriteTestCheckpoint(root_, 300, {"ckpt-000000000200"});
  absl::Status s = LoadCheckpoint(root_, 300).status();
  EXPECT_THAT(s.message(), HasSubstr("the chain does not start with a FULL checkpoint"));
}

TEST_F(CheckpointDirTest, GcKeepsNewestN) {
  for (uint64_t c : {100, 200, 300, 400, 500}) {
    testing::WriteTestCheckpoint(root_, c);
  }
  GcOptions options;
  options.keep = 2;
  auto gc = GarbageCollect(root_, options);
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_THAT(gc->kept, ElementsAre("ckpt-000000000400", "ckpt-000000000500"));
  EXPECT_THAT(gc->removed,
              ElementsAre("ckpt-000000000100", "ckpt-000000000200", "ckpt-000000000300"));
  EXPECT_THAT(Names(), ElementsAre("ckpt-000000000400", "ckpt-000000000500"));
  EXPECT_TRUE(LoadCheckpoint(root_, 400).ok());
  EXPECT_TRUE(LoadCheckpoint(root_, 500).ok());
}

TEST_F(CheckpointDirTest, GcKeepsTheBasesOfKeptDeltas) {
  testing::WriteTestCheckpoint(root_, 100);
  testing::WriteTestCheckpoint(root_, 200);
  testing::WriteTestCheckpoint(root_, 300, {"ckpt-000000000200"});
  testing::WriteTestCheckpoint(root_, 400, {"ckpt-000000000200", "ckpt-000000000300"});
  GcOptions options;
  options.keep = 1;
  auto gc = GarbageCollect(root_, options);
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_THAT(gc->kept, ElementsAre("ckpt-000000000200", "ckpt-000000000300", "ckpt-000000000400"));
  EXPECT_THAT(gc->removed, ElementsAre("ckpt-000000000100"));
  auto latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->chain.size(), 3u);
}

TEST_F(CheckpointDirTest, GcKeepsPinnedCheckpointsAndTheirBases) {
  testing::WriteTestCheckpoint(root_, 100);
  testing::WriteTestCheckpoint(root_, 200);
  testing::WriteTestCheckpoint(root_, 300, {"ckpt-000000000200"});
  testing::WriteTestCheckpoint(root_, 400);
  testing::WriteTestCheckpoint(root_, 500);
  GcOptions options;
  options.keep = 1;
  options.pinned = {300, 700};  // 700 does not exist: ignored.
  auto gc = GarbageCollect(root_, options);
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_THAT(gc->kept, ElementsAre("ckpt-000000000200", "ckpt-000000000300", "ckpt-000000000500"));
  EXPECT_THAT(gc->removed, ElementsAre("ckpt-000000000100", "ckpt-000000000400"));
  EXPECT_TRUE(LoadCheckpoint(root_, 300).ok());
}

TEST_F(CheckpointDirTest, GcRemovesDeadAttemptsAndTempFilesButNotInProgress) {
  testing::WriteTestCheckpoint(root_, 100);
  testing::WriteTestCheckpoint(root_, 200);
  testing::WriteTestCheckpoint(root_, 300);
  // 200 died half-written (no MANIFEST, a temporary file); 300 has a stray
  // temporary file; 400 is being written right now.
  ASSERT_TRUE(RemoveAll(JoinPath(Dir(200), kManifestFileName)).ok());
  testing::WriteAll(JoinPath(Dir(200), "part-0002.shard.tmp.1.0"), "x");
  testing::WriteAll(JoinPath(Dir(300), "MANIFEST.tmp.1.0"), "x");
  ASSERT_TRUE(CreateCheckpointDir(root_, 400).ok());
  testing::WriteAll(JoinPath(Dir(400), "part-0000.shard.tmp.9.0"), "x");
  testing::WriteAll(JoinPath(root_, "README"), "not a checkpoint");
  GcOptions options;
  options.keep = 2;
  auto gc = GarbageCollect(root_, options);
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_THAT(gc->kept, ElementsAre("ckpt-000000000100", "ckpt-000000000300"));
  EXPECT_THAT(gc->removed, ElementsAre("ckpt-000000000200"));
  EXPECT_EQ(gc->temp_files_removed, 1u);
  EXPECT_THAT(Names(),
              ElementsAre("README", "ckpt-000000000100", "ckpt-000000000300", "ckpt-000000000400"));
  EXPECT_THAT(*ListDir(Dir(400)), ElementsAre("part-0000.shard.tmp.9.0"));
  EXPECT_THAT(*ListDir(Dir(300)), ElementsAre("MANIFEST", "part-0000.shard", "part-0001.shard"));
  options.keep = 0;
  EXPECT_EQ(GarbageCollect(root_, options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointDirTest, GcWithoutCompleteCheckpointsRemovesNothing) {
  ASSERT_TRUE(CreateCheckpointDir(root_, 100).ok());
  auto gc = GarbageCollect(root_, GcOptions());
  ASSERT_TRUE(gc.ok());
  EXPECT_TRUE(gc->removed.empty());
  EXPECT_THAT(Names(), ElementsAre("ckpt-000000000100"));
}

TEST_F(CheckpointDirTest, ZstdCheckpointIsComplete) {
  testing::WriteTestCheckpoint(root_, 100, {}, Compression::kZstd);
  auto latest = LatestComplete(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  auto reader = CheckpointFileReader::Open(JoinPath(Dir(100), latest->manifest.files(0).name()));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->num_records(), 40u);
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps
