// FilePoller on a directory of MANIFESTs (no checkpoint files: the poller
// reads only MANIFESTs; the replica, here a recording host, builds): the
// newest complete checkpoint first, one being written left alone, one that
// does not load refused by identity and a rewritten one at the same clock
// taken, a served checkpoint gone or rewritten moves back (a rollback), and
// the stream's modes (newer only when lost, anything on a resync).
#include "replica/file_poller.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "gtest/gtest.h"

namespace shardps {
namespace replica {
namespace {

// A replica that serves what it is asked to unless told to refuse it.
class RecordingHost final : public FilePoller::Host {
 public:
  struct Call {
    uint64_t clock;
    int64_t created;
    FilePoller::Move move;
  };
  std::map<uint64_t, absl::Status> refuse;  // By clock.
  std::optional<VersionId> served;
  std::vector<Call> calls;
  std::vector<std::string> errors;

  std::optional<VersionId> Served() const override { return served; }
  absl::Status ServeCheckpoint(const checkpoint::CheckpointEntry& entry, int64_t created,
                               const FilePoller::Move& move) override {
    calls.push_back({entry.clock, created, move});
    if (auto it = refuse.find(entry.clock); it != refuse.end()) return it->second;
    served = VersionId(entry.clock, created);
    return absl::OkStatus();
  }
  void RecordError(const std::string& error) override { errors.push_back(error); }
};

class FilePollerTest : public ::testing::Test {
 protected:
  FilePollerTest() : root_(::testing::TempDir() + "/file_poller"), poller_(root_, &host_) {
    (void)checkpoint::RemoveAll(root_);
  }

  // A complete checkpoint's MANIFEST at `clock`, created at `created`.
  void Write(uint64_t clock, int64_t created) {
    auto dir = checkpoint::CreateCheckpointDir(root_, clock);
    ASSERT_TRUE(dir.ok() || absl::IsAlreadyExists(dir.status())) << dir.status();
    checkpoint::CheckpointManifest m;
    m.set_format_version(checkpoint::kManifestFormatVersion);
    m.set_checkpoint_id(checkpoint::CheckpointId(clock));
    m.set_clock(clock);
    m.set_job_name("poller");
    m.set_num_partitions(1);
    m.set_created_unix_micros(created);
    m.set_kind(checkpoint::CheckpointManifest::FULL);
    m.add_chain(m.checkpoint_id());
    checkpoint::CheckpointFile* file = m.add_files();
    file->set_name("part-0");
    file->add_partitions(0);
    ASSERT_TRUE(checkpoint::WriteFileAtomically(
                    checkpoint::JoinPath(checkpoint::CheckpointPath(root_, clock),
                                         checkpoint::kManifestFileName),
                    checkpoint::SerializeManifest(m))
                    .ok());
  }
  // A checkpoint being written: its directory, no MANIFEST.
  void Begin(uint64_t clock) { ASSERT_TRUE(checkpoint::CreateCheckpointDir(root_, clock).ok()); }

  const std::string root_;
  RecordingHost host_;
  FilePoller poller_;
};

TEST_F(FilePollerTest, ServesTheNewestCompleteCheckpointAndLeavesOneBeingWritten) {
  EXPECT_FALSE(poller_.Poll(FilePoller::Mode::kFiles)) << "no directory yet";
  Write(10, 100);
  Write(20, 200);
  Begin(30);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  ASSERT_EQ(host_.calls.size(), 1u);
  EXPECT_EQ(host_.calls[0].clock, 20u);
  EXPECT_EQ(host_.calls[0].created, 200);
  EXPECT_FALSE(host_.calls[0].move.from.has_value());
  EXPECT_FALSE(host_.calls[0].move.rollback);
  EXPECT_EQ(host_.calls[0].move.newest, 20u);
  EXPECT_EQ(poller_.newest_on_disk(), 20u);
  // Nothing newer: nothing built.
  EXPECT_FALSE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.calls.size(), 1u);
  Write(30, 300);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.calls.back().clock, 30u);
  EXPECT_EQ(host_.calls.back().move.from, VersionId(20, 200));
  EXPECT_TRUE(host_.errors.empty());
}

TEST_F(FilePollerTest, ACheckpointThatDoesNotLoadIsRefusedByIdentity) {
  Write(10, 100);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  Write(20, 200);
  host_.refuse[20] = absl::DataLossError("a corrupt file");
  EXPECT_FALSE(poller_.Poll(FilePoller::Mode::kFiles));
  ASSERT_EQ(host_.errors.size(), 1u);
  EXPECT_EQ(host_.errors[0],
            absl::StrCat(checkpoint::CheckpointPath(root_, 20), ": DATA_LOSS: a corrupt file"));
  EXPECT_FALSE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.calls.size(), 2u) << "not tried again";
  // Written again at the same clock: another checkpoint, taken.
  host_.refuse.clear();
  Write(20, 250);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.served, VersionId(20, 250));
  // One written again while it loads is left for the next poll, not refused.
  Write(30, 300);
  host_.refuse[30] = absl::AbortedError("written again while loading");
  EXPECT_FALSE(poller_.Poll(FilePoller::Mode::kFiles));
  host_.refuse.clear();
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.served, VersionId(30, 300));
  EXPECT_EQ(host_.errors.size(), 1u);
}

TEST_F(FilePollerTest, AServedCheckpointGoneOrRewrittenMovesBack) {
  Write(10, 100);
  Write(20, 200);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  ASSERT_EQ(host_.served, VersionId(20, 200));
  // 20 written again after a rollback: the newest complete one, 20 itself.
  Write(20, 210);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.served, VersionId(20, 210));
  EXPECT_TRUE(host_.calls.back().move.rollback);
  // 20 set aside: back to 10.
  ASSERT_TRUE(checkpoint::RemoveAll(checkpoint::CheckpointPath(root_, 20)).ok());
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.served, VersionId(10, 100));
  EXPECT_TRUE(host_.calls.back().move.rollback);
  // Gone and nothing else loads: still serving it, said so.
  host_.refuse[10] = absl::DataLossError("corrupt");
  host_.served = VersionId(5, 50);
  EXPECT_FALSE(poller_.Poll(FilePoller::Mode::kFiles));
  EXPECT_EQ(host_.errors.back(),
            "version 5 is no longer on disk as it was loaded and no other complete checkpoint "
            "loads; still serving it");
}

TEST_F(FilePollerTest, TheStreamLoadsNewerOnesWhenLostAndAnyOnAResync) {
  Write(10, 100);
  Write(20, 200);
  host_.served = VersionId(30, kStreamVersion);  // A version from the stream.
  EXPECT_FALSE(poller_.Poll(FilePoller::Mode::kNewer));
  EXPECT_TRUE(host_.calls.empty());
  Write(40, 400);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kNewer));
  EXPECT_EQ(host_.served, VersionId(40, 400));
  EXPECT_FALSE(host_.calls.back().move.rollback);
  EXPECT_FALSE(host_.calls.back().move.resync);
  host_.served = VersionId(50, kStreamVersion);
  ASSERT_TRUE(poller_.Poll(FilePoller::Mode::kResync));
  EXPECT_EQ(host_.served, VersionId(40, 400));
  EXPECT_TRUE(host_.calls.back().move.rollback);
  EXPECT_TRUE(host_.calls.back().move.resync);
  EXPECT_TRUE(host_.errors.empty());
}

}  // namespace
}  // namespace replica
}  // namespace shardps
