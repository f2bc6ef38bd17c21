// CheckpointChain: full or delta, the MANIFEST, garbage collection, a failed
// cut and a takeover, on real checkpoint directories (the servers' part
// files stood in for by files of a few bytes).
#include "scheduler/checkpoint_chain.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "scheduler/job_test_util.h"

namespace shardps {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointId;
using checkpoint::CheckpointManifest;
using testing::FreshCheckpointDir;
using testing::WriteCutFiles;

JobConfig ChainConfig(bool delta, uint32_t keep = 100) {
  JobConfig c = testing::Config(10, ASP, FreshCheckpointDir("chain"));
  c.mutable_checkpoint()->set_delta(delta);
  c.mutable_checkpoint()->set_keep(keep);
  return c;
}

// One cut at `clock` as the servers and the scheduler take it; returns
// whether it was a delta.
bool Cut(CheckpointChain* chain, const JobConfig& c, uint64_t clock, bool delta_on_last = false,
         const Positions& positions = {}) {
  const bool delta = chain->BeginCut(absl::Now(), delta_on_last);
  const auto files =
      WriteCutFiles(c.checkpoint().dir(), clock, c.cluster().num_partitions(), /*bytes=*/7);
  const absl::Status st = chain->Complete(clock, /*generation=*/3, files, positions);
  EXPECT_TRUE(st.ok()) << clock << ": " << st;
  return delta;
}

CheckpointManifest ManifestAt(const JobConfig& c, uint64_t clock) {
  auto m = checkpoint::LoadManifest(checkpoint::CheckpointPath(c.checkpoint().dir(), clock));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : CheckpointManifest();
}

std::vector<uint64_t> Clocks(const std::vector<RestorePoint>& points) {
  std::vector<uint64_t> clocks;
  for (const RestorePoint& p : points) clocks.push_back(p.clock);
  return clocks;
}

// With checkpoint.delta: FULL first, then deltas on the previous one until
// the chain holds kMaxDeltasPerFull of them, then FULL again.
TEST(CheckpointChainTest, DeltasFollowAFullOneUpToTheLimit) {
  const JobConfig c = ChainConfig(/*delta=*/true);
  CheckpointChain chain(c);
  EXPECT_FALSE(chain.base_clock().has_value());
  EXPECT_FALSE(Cut(&chain, c, 10));
  EXPECT_EQ(ManifestAt(c, 10).kind(), CheckpointManifest::FULL);
  uint64_t clock = 10;
  for (size_t d = 1; d <= checkpoint::kMaxDeltasPerFull; ++d) {
    EXPECT_EQ(chain.base_clock(), clock);
    clock += 10;
    EXPECT_TRUE(Cut(&chain, c, clock)) << "delta " << d;
    const CheckpointManifest m = ManifestAt(c, clock);
    EXPECT_EQ(m.kind(), CheckpointManifest::DELTA);
    EXPECT_EQ(m.base_id(), CheckpointId(clock - 10));
    ASSERT_EQ(static_cast<size_t>(m.chain_size()), d + 1);
    EXPECT_EQ(m.chain(0), CheckpointId(10));
    EXPECT_EQ(m.chain(d), CheckpointId(clock));
  }
  clock += 10;
  EXPECT_FALSE(Cut(&chain, c, clock)) << "the chain is full: a new one starts";
  EXPECT_EQ(ManifestAt(c, clock).chain_size(), 1);
  EXPECT_TRUE(Cut(&chain, c, clock + 10));
}

// Without checkpoint.delta every cut is FULL, but a move's catch-up is a
// delta whenever there is a base.
TEST(CheckpointChainTest, ACatchUpIsADeltaWhateverTheConfigSays) {
  const JobConfig c = ChainConfig(/*delta=*/false);
  CheckpointChain chain(c);
  EXPECT_FALSE(Cut(&chain, c, 5, /*delta_on_last=*/true)) << "no base yet";
  EXPECT_FALSE(Cut(&chain, c, 10));
  EXPECT_TRUE(Cut(&chain, c, 12, /*delta_on_last=*/true));
  EXPECT_EQ(ManifestAt(c, 12).base_id(), CheckpointId(10));
  EXPECT_FALSE(Cut(&chain, c, 20));
}

// The MANIFEST names the job, the cut's generation and time, every file and
// every worker's data position; RestorePoints reads them back.
TEST(CheckpointChainTest, TheManifestHoldsFilesPositionsAndTheCut) {
  const JobConfig c = ChainConfig(/*delta=*/true);
  CheckpointChain chain(c);
  const absl::Time before = absl::Now();
  Cut(&chain, c, 10, false, {{0, "w0@10"}, {1, "w1@10"}});
  const CheckpointManifest m = ManifestAt(c, 10);
  EXPECT_EQ(m.job_name(), c.name());
  EXPECT_EQ(m.config_fingerprint(), ConfigFingerprint(c));
  EXPECT_EQ(m.num_partitions(), c.cluster().num_partitions());
  EXPECT_EQ(m.generation(), 3u);
  EXPECT_GE(m.cut_unix_micros(), absl::ToUnixMicros(before));
  ASSERT_EQ(m.files_size(), 1);
  EXPECT_EQ(m.files(0).size(), 7u);
  ASSERT_EQ(m.worker_positions_size(), 2);
  auto points = chain.RestorePoints();
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ((*points)[0].dir, checkpoint::CheckpointPath(c.checkpoint().dir(), 10));
  EXPECT_EQ((*points)[0].positions.at(1), "w1@10");
  EXPECT_EQ((*points)[0].chain, std::vector<std::string>{CheckpointId(10)});
}

// GC keeps checkpoint.keep complete checkpoints, the links their chains
// need, and the pinned ones.
TEST(CheckpointChainTest, GarbageCollectionKeepsKeepPinnedAndTheChainsLinks) {
  const JobConfig full = ChainConfig(/*delta=*/false, /*keep=*/2);
  CheckpointChain chain(full);
  Cut(&chain, full, 10);
  chain.Pin({10});
  for (uint64_t clock : {20, 30, 40}) Cut(&chain, full, clock);
  auto points = chain.RestorePoints();
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ(Clocks(*points), (std::vector<uint64_t>{40, 30, 10}));
  chain.Pin({});
  chain.CollectGarbage();
  EXPECT_EQ(Clocks(*chain.RestorePoints()), (std::vector<uint64_t>{40, 30}));

  const JobConfig delta = ChainConfig(/*delta=*/true, /*keep=*/1);
  CheckpointChain deltas(delta);
  for (uint64_t clock : {10, 20, 30}) Cut(&deltas, delta, clock);
  // Keep 1: ckpt-30, and the links it is a delta on: ckpt-20 and the FULL ckpt-10.
  EXPECT_EQ(Clocks(*deltas.RestorePoints()), (std::vector<uint64_t>{30, 20, 10}));
}

// A cut that fails (here its MANIFEST: a file is missing) leaves nothing
// complete and the chain as it was; one the servers refused as a delta is
// written in full.
TEST(CheckpointChainTest, AFailedCutLeavesTheChainAsItWas) {
  const JobConfig c = ChainConfig(/*delta=*/true);
  CheckpointChain chain(c);
  Cut(&chain, c, 10);
  EXPECT_TRUE(chain.BeginCut(absl::Now(), false));
  auto files = WriteCutFiles(c.checkpoint().dir(), 20, c.cluster().num_partitions(), 7);
  fs::remove(checkpoint::CheckpointPath(c.checkpoint().dir(), 20) + "/" + files[0].name());
  EXPECT_FALSE(chain.Complete(20, 3, files, {}).ok());
  EXPECT_EQ(chain.base_clock(), 10u);
  EXPECT_EQ(Clocks(*chain.RestorePoints()), std::vector<uint64_t>{10});
  EXPECT_TRUE(Cut(&chain, c, 30)) << "a delta on the same base";
  EXPECT_EQ(ManifestAt(c, 30).base_id(), CheckpointId(10));

  EXPECT_TRUE(chain.BeginCut(absl::Now(), false));
  chain.WriteInFull();
  EXPECT_FALSE(chain.cut_delta());
  files = WriteCutFiles(c.checkpoint().dir(), 40, c.cluster().num_partitions(), 7);
  ASSERT_TRUE(chain.Complete(40, 3, files, {}).ok());
  EXPECT_EQ(ManifestAt(c, 40).kind(), CheckpointManifest::FULL);
  EXPECT_EQ(chain.base_clock(), 40u);
}

// A new scheduler (a takeover) has no base: its first cut is FULL. After a
// restore of every server the chain goes on from the restored checkpoint;
// after a reset to the initial values it starts again.
TEST(CheckpointChainTest, ANewSchedulerStartsFullAndARestoreContinuesItsChain) {
  const JobConfig c = ChainConfig(/*delta=*/true);
  {
    CheckpointChain earlier(c);
    Cut(&earlier, c, 10);
    Cut(&earlier, c, 20);
  }
  CheckpointChain chain(c);
  EXPECT_FALSE(chain.base_clock().has_value());
  auto points = chain.RestorePoints();
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(Clocks(*points), (std::vector<uint64_t>{20, 10}));
  EXPECT_EQ((*points)[0].chain, (std::vector<std::string>{CheckpointId(10), CheckpointId(20)}));
  EXPECT_FALSE(chain.BeginCut(absl::Now(), false)) << "the takeover's first cut";

  chain.Restored((*points)[0]);
  EXPECT_TRUE(Cut(&chain, c, 30));
  EXPECT_EQ(ManifestAt(c, 30).chain_size(), 3);

  chain.Restored(RestorePoint());  // The initial values.
  EXPECT_FALSE(chain.base_clock().has_value());
  EXPECT_FALSE(Cut(&chain, c, 40));
}

// Checkpoints of another job (name or partition count) are refused, naming
// the checkpoint; none at all (no directory, or checkpoints off) is empty.
TEST(CheckpointChainTest, RestorePointsRefuseAnotherJobsCheckpoints) {
  JobConfig c = ChainConfig(/*delta=*/false);
  CheckpointChain chain(c);
  auto none = chain.RestorePoints();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  Cut(&chain, c, 10);
  JobConfig other = c;
  other.set_name("another-job");
  auto refused = CheckpointChain(other).RestorePoints();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(CheckpointId(10)), std::string::npos)
      << refused.status();
  JobConfig off = c;
  off.mutable_checkpoint()->clear_dir();
  EXPECT_TRUE(CheckpointChain(off).RestorePoints()->empty());
}

}  // namespace
}  // namespace shardps
