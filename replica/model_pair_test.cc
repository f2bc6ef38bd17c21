// ModelPair on checkpoints and stream versions written with the servers'
// code (worker/export/checkpointed_job.h: FULL at 10, deltas at 20, 30,
// 40): each version it builds, from its chain, on a copy or in place on the
// idle model, equals the checkpoint loaded whole; a reader holding the idle
// model makes the build use a copy; a checkpoint that does not extend the
// served chain is built from its own; a stream delta that does not continue
// the version served is not built.
#include "replica/model_pair.h"

#include <map>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "gtest/gtest.h"
#include "worker/export/checkpointed_job.h"

namespace shardps {
namespace replica {
namespace {

class ModelPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/model_pair";
    (void)checkpoint::RemoveAll(root_);
    for (auto& [clock, parts] : export_testing::WriteFourVersions(config_, root_)) {
      auto version = std::make_shared<ServedModel::StreamVersion>();
      version->clock = clock;
      version->parts = parts;
      stream_[clock] = version;
    }
  }

  checkpoint::CheckpointEntry Entry(uint64_t clock) const {
    return {clock, checkpoint::CheckpointId(clock), checkpoint::CheckpointPath(root_, clock)};
  }

  // Builds checkpoint `clock` (created_unix_micros is its clock), checks it
  // against the checkpoint loaded whole, and serves it.
  ModelPair::Built BuildAndServe(ModelPair* pair, uint64_t clock) {
    auto built = pair->BuildCheckpoint(Entry(clock), static_cast<int64_t>(clock));
    EXPECT_TRUE(built.ok()) << built.status();
    if (!built.ok()) return {};
    ExpectVersion(*built->version, clock);
    ModelPair::Built flags;
    flags.incremental = built->incremental;
    flags.in_place = built->in_place;
    flags.links_read = built->links_read;
    served_ = pair->Serve(*std::move(built));
    return flags;
  }

  void ExpectVersion(const ServedModel& model, uint64_t clock) {
    auto whole = ServedModel::Load(config_, root_, clock);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(model.clock(), clock);
    EXPECT_EQ(model.table_hash(), (*whole)->table_hash()) << "version " << clock;
    EXPECT_EQ(model.rows(), (*whole)->rows()) << "version " << clock;
  }

  const JobConfig config_ = export_testing::SmallJobConfig();
  std::string root_;
  std::map<uint64_t, ServedModel::StreamLink> stream_;
  std::shared_ptr<ServedModel> served_;
};

TEST_F(ModelPairTest, FromTheChainThenOnACopyThenInPlace) {
  ModelPair pair(config_, root_, absl::Milliseconds(200));
  ModelPair::Built b = BuildAndServe(&pair, 10);
  EXPECT_FALSE(b.incremental);
  EXPECT_EQ(b.links_read, 1u);
  // No idle model yet (10 was built from its chain): on a copy.
  b = BuildAndServe(&pair, 20);
  EXPECT_TRUE(b.incremental);
  EXPECT_FALSE(b.in_place);
  EXPECT_EQ(b.links_read, 1u);
  // 10, idle, catches up with 20 and applies 30; then 20 with 30 and 40.
  for (uint64_t clock : {30, 40}) {
    b = BuildAndServe(&pair, clock);
    EXPECT_TRUE(b.incremental) << clock;
    EXPECT_TRUE(b.in_place) << clock;
  }
  // Back to 20 (a rollback): not an extension of 40's chain.
  b = BuildAndServe(&pair, 20);
  EXPECT_FALSE(b.incremental);
  EXPECT_EQ(b.links_read, 2u);
}

TEST_F(ModelPairTest, AReaderHoldingTheIdleModelMakesACopy) {
  ModelPair pair(config_, root_, absl::Milliseconds(20));
  BuildAndServe(&pair, 10);
  BuildAndServe(&pair, 20);
  const std::shared_ptr<ServedModel> reader = served_;  // An answer on 20, still running.
  BuildAndServe(&pair, 30);                             // 10 idle: in place.
  ModelPair::Built b = BuildAndServe(&pair, 40);        // 20 idle, but held.
  EXPECT_TRUE(b.incremental);
  EXPECT_FALSE(b.in_place);
  EXPECT_EQ(reader->clock(), 20u);
  ExpectVersion(*reader, 20);  // The reader's version did not change.
}

TEST_F(ModelPairTest, StreamVersionsThatContinueAreBuiltTheRestAreNot) {
  ModelPair pair(config_, root_, absl::Milliseconds(200));
  auto full = pair.BuildStream(stream_.at(10), 1);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE(full->has_value());
  EXPECT_TRUE((*full)->full);
  ExpectVersion(*(*full)->version, 10);
  served_ = pair.Serve(**std::move(full));
  for (uint64_t clock : {20, 30, 40}) {
    auto built = pair.BuildStream(stream_.at(clock), 1);
    ASSERT_TRUE(built.ok()) << built.status();
    ASSERT_TRUE(built->has_value()) << clock;
    EXPECT_TRUE((*built)->incremental);
    EXPECT_EQ((*built)->in_place, clock > 20) << clock;
    ExpectVersion(*(*built)->version, clock);
    served_ = pair.Serve(**std::move(built));
  }
  // Of another generation than the one served: not built.
  auto other = pair.BuildStream(stream_.at(40), 2);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->has_value());
  // A version built in place and then refused (Discard) leaves the pair:
  // the next one is built on a copy. (40's delta, on 30, continues 40.)
  auto refused = pair.BuildStream(stream_.at(40), 1);
  ASSERT_TRUE(refused.ok() && refused->has_value());
  EXPECT_TRUE((*refused)->in_place);
  pair.Discard(**refused);
  auto again = pair.BuildStream(stream_.at(40), 1);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_FALSE((*again)->in_place);
  ExpectVersion(*(*again)->version, 40);
}

}  // namespace
}  // namespace replica
}  // namespace shardps
