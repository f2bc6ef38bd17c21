// LocalModel, the replica's door into the worker role, on checkpoints and
// stream versions written with the servers' own code (checkpointed_job.h):
// a RowObserver is told exactly what each record replaces (replaying the
// changes onto the rows held before gives the rows held after), with or
// without an observer the same rows are written, Copy holds the same rows,
// and what it refuses is refused by name.
#include "worker/export/local_model.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "gtest/gtest.h"
#include "worker/export/checkpointed_job.h"

namespace shardps {
namespace exporter {
namespace {

using Rows = std::map<std::pair<uint32_t, uint64_t>, std::vector<float>>;

Rows RowsOf(const LocalModel& model) {
  Rows rows;
  model.ForEachRow([&rows](uint32_t table, uint64_t key, const float* weights, uint32_t dim) {
    rows[{table, key}] = std::vector<float>(weights, weights + dim);
  });
  return rows;
}

// Replays each change onto the rows held before, checking that `before` is
// what they hold.
class Replay final : public RowObserver {
 public:
  explicit Replay(Rows rows) : rows_(std::move(rows)) {}
  void Changed(const RowChange& c) override {
    ++changes_;
    const auto key = std::make_pair(c.table_id, c.key);
    const auto it = rows_.find(key);
    if (c.before == nullptr) {
      EXPECT_TRUE(it == rows_.end()) << "table " << c.table_id << " key " << c.key << " is held";
    } else if (it == rows_.end()) {
      ADD_FAILURE() << "table " << c.table_id << " key " << c.key << " is not held";
    } else {
      EXPECT_EQ(it->second, std::vector<float>(c.before, c.before + c.dim)) << c.key;
    }
    EXPECT_FALSE(c.shared && c.before == nullptr) << "a shared row always exists: " << c.key;
    if (c.after == nullptr) {
      EXPECT_FALSE(c.shared);
      rows_.erase(key);
    } else {
      rows_[key] = std::vector<float>(c.after, c.after + c.dim);
    }
  }
  const Rows& rows() const { return rows_; }
  int changes() const { return changes_; }

 private:
  Rows rows_;
  int changes_ = 0;
};

std::string Root(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/" + name;
  (void)checkpoint::RemoveAll(root);
  return root;
}

std::unique_ptr<LocalModel> Restored(const JobConfig& config, const std::string& root,
                                     uint64_t clock) {
  auto model = LocalModel::Create(config);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  auto dir = (*model)->Restore(root, clock);
  EXPECT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, checkpoint::CheckpointPath(root, clock));
  return dir.ok() ? *std::move(model) : nullptr;
}

TEST(LocalModelTest, TheObserverSeesWhatEachDeltaRecordReplaces) {
  const JobConfig config = export_testing::SmallJobConfig();
  const std::string root = Root("local_delta");
  export_testing::WriteFourVersions(config, root);
  if (::testing::Test::HasFatalFailure()) return;
  std::unique_ptr<LocalModel> model = Restored(config, root, 10);
  std::unique_ptr<LocalModel> blind = Restored(config, root, 10);
  std::unique_ptr<LocalModel> at40 = Restored(config, root, 40);
  ASSERT_TRUE(model && blind && at40);
  auto next = checkpoint::LoadCheckpoint(root, 40);
  ASSERT_TRUE(next.ok()) << next.status();
  uint64_t bytes = 0;
  auto links = model->ReadLinks(*next, 1, &bytes);
  ASSERT_TRUE(links.ok()) << links.status();
  ASSERT_EQ(links->size(), 3u);
  EXPECT_GT(bytes, 0u);
  Replay replay(RowsOf(*model));
  for (const LocalModel::Link& link : *links) {
    model->Apply(*link, &replay);
    blind->Apply(*link, nullptr);
  }
  EXPECT_GT(replay.changes(), 0);
  const Rows rows = RowsOf(*at40);
  EXPECT_EQ(replay.rows(), rows);
  EXPECT_EQ(RowsOf(*model), rows);
  EXPECT_EQ(RowsOf(*blind), rows);
  // Key(5) was evicted before 20 and written again at 35; Key(320) created
  // after 10 and evicted at 30.
  const std::vector<uint64_t> keys = {export_testing::Key(5), export_testing::Key(320)};
  uint32_t dim = 0;
  std::vector<bool> found;
  std::vector<float> values;
  ASSERT_TRUE(model->Lookup(export_testing::kSparseTable, keys, &dim, &found, &values).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, false}));
  EXPECT_EQ(dim, export_testing::kSparseDim);
  EXPECT_EQ(values.size(), 2 * dim);
}

TEST(LocalModelTest, StreamRowsWriteTheWeightsOfTheirCut) {
  const JobConfig config = export_testing::SmallJobConfig();
  const std::string root = Root("local_stream");
  const auto versions = export_testing::WriteFourVersions(config, root);
  if (::testing::Test::HasFatalFailure()) return;
  std::unique_ptr<LocalModel> model = Restored(config, root, 10);
  std::unique_ptr<LocalModel> at20 = Restored(config, root, 20);
  ASSERT_TRUE(model && at20);
  Replay replay(RowsOf(*model));
  for (const auto& part : versions.at(20)) {
    for (const VersionRows& rows : part->tables()) model->Apply(rows, &replay);
  }
  const Rows rows = RowsOf(*at20);
  EXPECT_EQ(replay.rows(), rows);
  EXPECT_EQ(RowsOf(*model), rows);
  // A copy holds the same rows.
  auto copy = model->Copy();
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(RowsOf(**copy), rows);
}

TEST(LocalModelTest, RefusesByName) {
  const JobConfig config = export_testing::SmallJobConfig();
  const std::string root = Root("local_refused");
  export_testing::WriteFourVersions(config, root);
  if (::testing::Test::HasFatalFailure()) return;
  auto model = LocalModel::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->Restore(root, 15).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*model)->TableDim(export_testing::kSparseTable), export_testing::kSparseDim);
  EXPECT_EQ((*model)->TableDim(99), 0u);
  uint32_t dim;
  std::vector<bool> found;
  std::vector<float> values;
  EXPECT_EQ((*model)->Lookup(99, {1}, &dim, &found, &values).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> probs;
  const absl::Status bad = (*model)->Predict({"0\t1", "not a line"}, &probs);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("line "), absl::string_view::npos) << bad;
  // A damaged delta file is refused before a row is applied.
  auto next = checkpoint::LoadCheckpoint(root, 30);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*model)->ReadLinks(*next, 4, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string file = checkpoint::JoinPath(next->dir, next->manifest.files(0).name());
  auto contents = checkpoint::ReadFileToString(file);
  ASSERT_TRUE(contents.ok());
  (*contents)[contents->size() / 2] ^= 0x40;
  ASSERT_TRUE(checkpoint::WriteFileAtomically(file, *contents).ok());
  EXPECT_EQ((*model)->ReadLinks(*next, 2, nullptr).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace exporter
}  // namespace shardps
