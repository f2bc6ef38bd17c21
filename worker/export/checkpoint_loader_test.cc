// RestoreCheckpoint against checkpoints written with the servers' own code
// (StoreSnapshot, WriteSnapshot, WriteManifest): exact rows, the chosen
// clock, and every refusal with the servers' messages.
#include "worker/export/checkpoint_loader.h"

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "server/snapshot.h"
#include "server/table_store.h"

namespace shardps {
namespace exporter {
namespace {

constexpr char kConfig[] = R"pb(
name: "@NAME@"
tables {
  id: 1 name: "categorical" kind: SPARSE dim: @DIM@ seed: 17
  init { kind: UNIFORM scale: 0.05 }
  optimizer { adagrad { learning_rate: 0.05 } }
}
tables {
  id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
  optimizer { adam { learning_rate: 0.002 } }
}
model { kind: DLRM bottom_mlp: [8, 4] top_mlp: [8] dense_table: "mlp" }
data { format: CRITEO synthetic_dir: "/nonexistent" }
cluster { num_servers: 2 num_partitions: 128 dense_chunk_size: 16 }
)pb";

constexpr uint64_t kChunks = 3;

JobConfig Config(const std::string& name = "job", int dim = 4) {
  auto config = ParseJobConfig(
      absl::StrReplaceAll(kConfig, {{"@NAME@", name}, {"@DIM@", absl::StrCat(dim)}}), "test.pbtxt");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

using Dump = std::map<std::pair<uint32_t, uint64_t>, std::vector<float>>;

Dump DumpStore(const TableStore& store) {
  Dump dump;
  for (const Table* t : store.tables()) {
    t->ForEachRow([&](uint64_t key, const float* p) {
      dump[{t->id(), key}] = std::vector<float>(p, p + t->row_stride());
    });
  }
  return dump;
}

// A store with 500 trained sparse rows and the dense chunks (if `dense`),
// its values depending on `salt`.
std::unique_ptr<TableStore> MakeStore(const JobConfig& config, float salt, bool dense = true) {
  auto store = TableStore::Create(config);
  EXPECT_TRUE(store.ok()) << store.status();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 500; ++k) keys.push_back(k * 7919 + 3);
  std::vector<float> rows(keys.size() * 4), grads(keys.size() * 4);
  EXPECT_TRUE((*store)->Pull(1, keys.data(), keys.size(), true, rows.data()).ok());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = salt * 0.01f * static_cast<float>(i % 13);
  EXPECT_TRUE((*store)->Push(1, keys.data(), keys.size(), grads.data(), 1.0f).ok());
  if (dense) {
    std::vector<uint64_t> chunks = {0, 1, 2};
    std::vector<float> init(kChunks * 16);
    for (size_t i = 0; i < init.size(); ++i) init[i] = salt + static_cast<float>(i);
    EXPECT_TRUE((*store)->InitRows(2, chunks.data(), chunks.size(), init.data()).ok());
  }
  return *std::move(store);
}

// Writes `store` as the checkpoint at `clock` under `root`, as the servers
// and the scheduler do.
void WriteCheckpoint(const JobConfig& config, const TableStore& store, const std::string& root,
                     uint64_t clock) {
  const uint32_t p = config.cluster().num_partitions();
  auto snapshot = StoreSnapshot::Take(store, std::vector<bool>(p, true));
  auto dir = checkpoint::CreateCheckpointDir(root, clock);
  ASSERT_TRUE(dir.ok()) << dir.status();
  SnapshotWriteOptions options;
  options.dir = *dir;
  options.job_name = config.name();
  options.clock = clock;
  options.tables = TableSchemas(store);
  options.writer.compression = checkpoint::Compression::kZstd;
  auto files = WriteSnapshot(*snapshot, options);
  ASSERT_TRUE(files.ok()) << files.status();
  checkpoint::CheckpointManifest m;
  m.set_format_version(checkpoint::kManifestFormatVersion);
  m.set_checkpoint_id(checkpoint::CheckpointId(clock));
  m.set_clock(clock);
  m.set_job_name(config.name());
  m.set_config_fingerprint(ConfigFingerprint(config));
  m.set_num_partitions(p);
  for (const auto& f : *files) *m.add_files() = checkpoint::ToManifestEntry(f);
  m.set_kind(checkpoint::CheckpointManifest::FULL);
  m.add_chain(m.checkpoint_id());
  ASSERT_TRUE(checkpoint::WriteManifest(*dir, m).ok());
}

std::string Root(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/" + name;
  (void)checkpoint::RemoveAll(root);
  return root;
}

TEST(CheckpointLoaderTest, RestoresEveryRowBitForBit) {
  const JobConfig config = Config();
  auto source = MakeStore(config, 1.0f);
  const std::string root = Root("exact");
  WriteCheckpoint(config, *source, root, 40);
  auto target = MakeStore(config, 9.0f);  // Rows to be replaced.
  auto loaded = RestoreCheckpoint(config, root, std::nullopt, kChunks, target.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->clock, 40u);
  EXPECT_EQ(loaded->dir, checkpoint::CheckpointPath(root, 40));
  EXPECT_EQ(loaded->rows, 503u);
  EXPECT_EQ(loaded->rows_per_table.at(1), 500u);
  EXPECT_EQ(loaded->rows_per_table.at(2), kChunks);
  EXPECT_GT(loaded->bytes, 0u);
  EXPECT_EQ(DumpStore(*target), DumpStore(*source));
}

TEST(CheckpointLoaderTest, LatestCompleteOrTheGivenClock) {
  const JobConfig config = Config();
  const std::string root = Root("clocks");
  auto at10 = MakeStore(config, 1.0f);
  auto at20 = MakeStore(config, 2.0f);
  WriteCheckpoint(config, *at10, root, 10);
  WriteCheckpoint(config, *at20, root, 20);
  ASSERT_TRUE(checkpoint::MakeDir(checkpoint::CheckpointPath(root, 30)).ok());  // No MANIFEST.
  auto store = TableStore::Create(config);
  ASSERT_TRUE(store.ok());
  auto latest = RestoreCheckpoint(config, root, std::nullopt, kChunks, store->get());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->clock, 20u);
  EXPECT_EQ(DumpStore(**store), DumpStore(*at20));
  auto older = RestoreCheckpoint(config, root, 10, kChunks, store->get());
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(DumpStore(**store), DumpStore(*at10));
  auto incomplete = RestoreCheckpoint(config, root, 30, kChunks, store->get());
  EXPECT_FALSE(incomplete.ok());
}

TEST(CheckpointLoaderTest, CorruptFileIsRefusedNamingIt) {
  const JobConfig config = Config();
  const std::string root = Root("corrupt");
  WriteCheckpoint(config, *MakeStore(config, 1.0f), root, 40);
  const std::string file = checkpoint::CheckpointPath(root, 40) + "/part-0001.shard";
  auto bytes = checkpoint::ReadFileToString(file);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  (*bytes)[bytes->size() / 2] ^= 0x10;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << *bytes;
  auto store = MakeStore(config, 9.0f);
  const Dump before = DumpStore(*store);
  auto loaded = RestoreCheckpoint(config, root, std::nullopt, kChunks, store.get());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "part-0001.shard")) << loaded.status();
  EXPECT_EQ(DumpStore(*store), before) << "nothing applied";
}

TEST(CheckpointLoaderTest, AnotherJobOrTableConfigIsRefused) {
  const std::string root = Root("mismatch");
  WriteCheckpoint(Config(), *MakeStore(Config(), 1.0f), root, 40);

  const JobConfig other_job = Config("other");
  auto store = TableStore::Create(other_job);
  auto loaded = RestoreCheckpoint(other_job, root, std::nullopt, kChunks, store->get());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "\"job\"")) << loaded.status();

  const JobConfig other_dim = Config("job", 8);
  store = TableStore::Create(other_dim);
  loaded = RestoreCheckpoint(other_dim, root, std::nullopt, kChunks, store->get());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "categorical")) << loaded.status();
}

TEST(CheckpointLoaderTest, CheckpointWithoutDenseWeightsIsRefused) {
  const JobConfig config = Config();
  const std::string root = Root("nodense");
  WriteCheckpoint(config, *MakeStore(config, 1.0f, /*dense=*/false), root, 40);
  auto store = TableStore::Create(config);
  auto loaded = RestoreCheckpoint(config, root, std::nullopt, kChunks, store->get());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "no chunk 0")) << loaded.status();
}

TEST(CheckpointLoaderTest, NoCheckpointIsNotFound) {
  const JobConfig config = Config();
  const std::string root = Root("none");
  ASSERT_TRUE(checkpoint::MakeDir(root).ok());
  auto store = TableStore::Create(config);
  auto loaded = RestoreCheckpoint(config, root, std::nullopt, kChunks, store->get());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), root)) << loaded.status();
}

}  // namespace
}  // namespace exporter
}  // namespace shardps
