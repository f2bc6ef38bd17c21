// checkpoint_guard.h: the directory probe, corrupt vs incomplete
// checkpoints, setting a corrupt one aside, removing a failed cut, the
// directory's lock.
#include "scheduler/checkpoint_guard.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
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

TEST(CheckpointGuardTest, OneLockHolderADescribedRefusalAndTheLockBackOnRelease) {
  const std::string root = Root("lock");
  ASSERT_TRUE(ProbeCheckpointDir(root).ok());
  auto first = CheckpointDirLock::Acquire(root, "job a, pid 1 on host h", absl::ZeroDuration());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->locked());
  // Another holder (another open of the file: flock is per open file, so
  // this is what a second process sees) is refused, told who holds it.
  auto second = CheckpointDirLock::Acquire(root, "job b", absl::ZeroDuration());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(second.status().message(), "job a, pid 1 on host h"))
      << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), root)) << second.status();
  // A waiting one gets it once the holder lets go within the wait.
  std::thread release([&first] {
    absl::SleepFor(absl::Milliseconds(300));
    first->reset();
  });
  auto third = CheckpointDirLock::Acquire(root, "job c", absl::Minutes(1));
  release.join();
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE((*third)->locked());
  std::ifstream in((*third)->path());
  std::string line;
  std::getline(in, line);
  EXPECT_TRUE(absl::StartsWith(line, "job c, since ")) << line;
  // Nothing else in the directory changes: no checkpoint is listed.
  auto corrupt = FindCorruptCheckpoints(root, -1);
  ASSERT_TRUE(corrupt.ok()) << corrupt.status();
  EXPECT_TRUE(corrupt->empty());
}

TEST(CheckpointGuardTest, TheLockOfAKilledProcessIsFreeAtOnce) {
  const std::string root = Root("lock_killed");
  ASSERT_TRUE(ProbeCheckpointDir(root).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto held = CheckpointDirLock::Acquire(root, "the child", absl::ZeroDuration());
    const char c = held.ok() && (*held)->locked() ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    while (true) pause();  // Until SIGKILL.
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(c, 'y') << "the child did not take the lock";
  auto refused = CheckpointDirLock::Acquire(root, "parent", absl::ZeroDuration());
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "the child")) << refused.status();
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  auto taken = CheckpointDirLock::Acquire(root, "parent", absl::ZeroDuration());
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE((*taken)->locked());
}

}  // namespace
}  // namespace shardps
