// checkpoint_guard.h: the directory probe, corrupt vs incomplete
// checkpoints, setting a corrupt one aside, removing a failed cut.
#include "scheduler/checkpoint_guard.h"

#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

namespace fs = std::filesystem;

std::string Root(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/guard_" + name;
  fs::remove_all(root);
  return root;
}

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(CheckpointGuardTest, ProbeCreatesTheDirectoryAndLeavesNothingBehind) {
  const std::string root = Root("probe") + "/a/b";
  ASSERT_TRUE(ProbeCheckpointDir(root).ok());
  EXPECT_TRUE(fs::is_directory(root));
  EXPECT_TRUE(fs::is_empty(root));
}

TEST(CheckpointGuardTest, ProbeRefusesAFileAndAPathBelowAFile) {
  const std::string root = Root("file");
  Write(root, "not a directory");
  absl::Status st = ProbeCheckpointDir(root);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(root + " exists and is not a directory"), std::string::npos) << st;
  st = ProbeCheckpointDir(root + "/ckpt");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mkdir " + root + "/ckpt"), std::string::npos) << st;
  EXPECT_NE(st.message().find("Not a directory"), std::string::npos) << st;
}

TEST(CheckpointGuardTest, CorruptIsAManifestThatDoesNotLoadNotAMissingOne) {
  const std::string root = Root("corrupt");
  Write(checkpoint::CheckpointPath(root, 10) + "/part-0000.shard", "half a file");  // Incomplete.
  Write(checkpoint::CheckpointPath(root, 20) + "/MANIFEST", "garbage");             // Corrupt.
  Write(checkpoint::CheckpointPath(root, 30) + "/part-0000.shard", "x");            // Incomplete.
  auto corrupt = FindCorruptCheckpoints(root, -1);
  ASSERT_TRUE(corrupt.ok()) << corrupt.status();
  ASSERT_EQ(corrupt->size(), 1u);
  EXPECT_EQ((*corrupt)[0].clock, 20u);
  EXPECT_NE((*corrupt)[0].why.message().find("MANIFEST"), std::string::npos) << (*corrupt)[0].why;
  corrupt = FindCorruptCheckpoints(root, 20);
  ASSERT_TRUE(corrupt.ok());
  EXPECT_TRUE(corrupt->empty()) << "only checkpoints newer than `after` are listed";
  EXPECT_TRUE(FindCorruptCheckpoints(root + "/missing", -1)->empty());

  // Set aside: no longer a checkpoint directory, the files kept.
  auto aside = SetCheckpointAside(checkpoint::CheckpointPath(root, 20), absl::FromUnixSeconds(77));
  ASSERT_TRUE(aside.ok()) << aside.status();
  EXPECT_EQ(*aside, checkpoint::CheckpointPath(root, 20) + ".corrupt-77");
  EXPECT_TRUE(fs::exists(*aside + "/MANIFEST"));
  auto listed = checkpoint::ListCheckpoints(root);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].clock, 10u);
  EXPECT_EQ((*listed)[1].clock, 30u);
}

TEST(CheckpointGuardTest, RemovesAFailedCutButNeverACheckpointWithManifest) {
  const std::string root = Root("remove");
  Write(checkpoint::CheckpointPath(root, 5) + "/part-0000.shard", "orphan");
  Write(checkpoint::CheckpointPath(root, 6) + "/MANIFEST", "kept, whatever it holds");
  EXPECT_TRUE(RemoveIncompleteCheckpoint(root, 5).ok());
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointPath(root, 5)));
  EXPECT_TRUE(RemoveIncompleteCheckpoint(root, 6).ok());
  EXPECT_TRUE(fs::exists(checkpoint::CheckpointPath(root, 6) + "/MANIFEST"));
  EXPECT_TRUE(RemoveIncompleteCheckpoint(root, 7).ok()) << "none: nothing to do";
}

}  // namespace
}  // namespace shardps
