#include "worker/export/checkpointed_job.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "server/snapshot.h"
#include "server/table_store.h"
#include "server/version_log.h"
#include "worker/param_store.h"
#include "worker/trainer.h"

namespace shardps {
namespace export_testing {

JobConfig SmallJobConfig() {
  constexpr char kConfig[] = R"pb(
name: "served"
tables {
  id: 1 name: "categorical" kind: SPARSE dim: 8 seed: 17
  init { kind: UNIFORM scale: 0.05 }
  optimizer { adagrad { learning_rate: 0.05 } }
  eviction { ttl_clocks: 8 }
  admission { min_count: 2 }
}
tables {
  id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
  optimizer { adam { learning_rate: 0.002 } }
}
model { kind: DLRM bottom_mlp: [16, 8] top_mlp: [16] dense_table: "mlp" }
data { format: CRITEO synthetic_dir: "/nonexistent" }
training { batch_size: 16 intra_op_threads: 1 }
cluster { num_partitions: 16 }
)pb";
  auto config = ParseJobConfig(kConfig, "checkpointed_job.pbtxt");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : JobConfig();
}

CheckpointedJob::CheckpointedJob(const JobConfig& config) : config_(config) {
  auto params = MakeLocalParamStore(config);
  EXPECT_TRUE(params.ok()) << params.status();
  params_ = *std::move(params);
  TrainerOptions options;
  options.config = config;
  options.params = params_.get();
  options.model_options.device = c10::Device(c10::DeviceType::CPU);
  auto trainer = Trainer::Create(std::move(options));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  trainer_ = *std::move(trainer);
  EXPECT_TRUE(trainer_->InitDenseWeights().ok());
}

CheckpointedJob::~CheckpointedJob() { trainer_.reset(); }  // Before the store it uses.

TableStore* CheckpointedJob::store() { return params_->local_tables(); }

void CheckpointedJob::Train(uint64_t clock, uint64_t first, uint64_t last) {
  store()->SetClock(clock);
  std::vector<uint64_t> keys;
  for (uint64_t k = first; k < last; ++k) keys.push_back(Key(k));
  std::vector<float> rows(keys.size() * kSparseDim), grads(keys.size() * kSparseDim);
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] = 0.01f * static_cast<float>((i + clock) % 13) - 0.05f;
  }
  for (int push = 0; push < 2; ++push) {
    ASSERT_TRUE(store()->Pull(kSparseTable, keys.data(), keys.size(), true, rows.data()).ok());
    ASSERT_TRUE(store()->Push(kSparseTable, keys.data(), keys.size(), grads.data(), 1.0f).ok());
  }
  const Table* dense = store()->FindTable(kDenseTable);
  const uint64_t chunk = 0;
  std::vector<float> dense_grad(dense->dim(), 0.001f * static_cast<float>(clock));
  ASSERT_TRUE(store()->Push(kDenseTable, &chunk, 1, dense_grad.data(), 1.0f).ok());
}

uint64_t CheckpointedJob::Evict(uint64_t clock) { return store()->Evict(clock, 0); }

void CheckpointedJob::Checkpoint(const std::string& root, uint64_t clock,
                                 std::optional<uint64_t> base) {
  const uint32_t p = config_.cluster().num_partitions();
  std::unique_ptr<StoreSnapshot> snapshot =
      StoreSnapshot::Take(*store(), std::vector<bool>(p, true),
                          base.has_value() ? std::optional<uint32_t>(generation_) : std::nullopt);
  generation_ = store()->AdvanceGeneration();
  auto dir = checkpoint::CreateCheckpointDir(root, clock);
  ASSERT_TRUE(dir.ok()) << dir.status();
  SnapshotWriteOptions options;
  options.dir = *dir;
  options.job_name = config_.name();
  options.clock = clock;
  options.base_clock = base.value_or(0);
  options.tables = TableSchemas(*store());
  auto files = WriteSnapshot(*snapshot, options);
  ASSERT_TRUE(files.ok()) << files.status();
  checkpoint::CheckpointManifest m;
  m.set_format_version(checkpoint::kManifestFormatVersion);
  m.set_checkpoint_id(checkpoint::CheckpointId(clock));
  m.set_clock(clock);
  m.set_job_name(config_.name());
  m.set_config_fingerprint(ConfigFingerprint(config_));
  m.set_num_partitions(p);
  m.set_created_unix_micros(static_cast<int64_t>(clock));
  for (const auto& f : *files) *m.add_files() = checkpoint::ToManifestEntry(f);
  if (base.has_value()) {
    m.set_kind(checkpoint::CheckpointManifest::DELTA);
    m.set_base_id(checkpoint::CheckpointId(*base));
    for (const std::string& id : chain_) m.add_chain(id);
  } else {
    m.set_kind(checkpoint::CheckpointManifest::FULL);
    chain_.clear();
  }
  chain_.push_back(m.checkpoint_id());
  m.add_chain(m.checkpoint_id());
  ASSERT_TRUE(checkpoint::WriteManifest(*dir, m).ok());
  // The same cut as a version of the servers' stream (one server: every
  // partition), in small chunks: a version of many messages.
  versions_[clock] = MakeVersionPart(*snapshot, *store(), clock, /*generation=*/1, base.value_or(0),
                                     /*base_generation=*/1,
                                     /*server_index=*/0, absl::Now(), /*max_chunk_bytes=*/4096);
}

std::map<uint64_t, CheckpointedJob::Parts> WriteFourVersions(const JobConfig& config,
                                                             const std::string& root) {
  CheckpointedJob job(config);
  job.Train(1, 0, 300);
  job.Checkpoint(root, 10, std::nullopt);
  job.Train(15, 100, 200);         // Changed rows.
  job.Train(16, 300, 350);         // New rows.
  EXPECT_EQ(job.Evict(20), 200u);  // Keys [0, 100) and [200, 300): last touched at clock 1.
  job.Checkpoint(root, 20, 10);
  job.Train(25, 100, 150);         // Rows only: no shared row changes, they come from the copy.
  EXPECT_EQ(job.Evict(30), 100u);  // [150, 200) and [300, 350), last touched at 15 and 16.
  job.Checkpoint(root, 30, 20);
  job.Train(35, 0, 50);  // Evicted at 20, written again (admitted again: shared rows move).
  EXPECT_EQ(job.Evict(40), 50u);  // [100, 150), last touched at 25.
  job.Checkpoint(root, 40, 30);
  return job.versions();
}

}  // namespace export_testing
}  // namespace shardps
