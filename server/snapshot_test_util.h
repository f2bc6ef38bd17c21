// Test helpers for checkpoints of ParameterServerCore (server/snapshot.h):
// a small job config, the cores of one job driven as one BSP worker, and
// dumps of every row. Test-only.
#ifndef SHARDPS_SERVER_SNAPSHOT_TEST_UTIL_H_
#define SHARDPS_SERVER_SNAPSHOT_TEST_UTIL_H_

#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/codec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/core_test_config.h"
#include "server/parameter_server_core.h"
#include "server/snapshot.h"

namespace shardps::testing {

namespace ckpt = checkpoint;

inline constexpr uint32_t kParts = 128;  // Two partition groups.
inline constexpr char kJob[] = "snapshot-test";

inline JobConfig Config(uint32_t num_servers, uint32_t user_dim = 3) {
  JobConfig c;
  c.set_name(kJob);
  SetAdam(AddSparseTable(&c, 1, "emb"));
  TableConfig* u = c.add_tables();
  u->set_id(2);
  u->set_name("user");
  u->set_kind(TableConfig::SPARSE);
  u->set_dim(user_dim);
  u->set_seed(7);
  u->mutable_init()->set_kind(InitializerConfig::NORMAL);
  u->mutable_init()->set_scale(0.05f);
  AdagradConfig* adagrad = u->mutable_optimizer()->mutable_adagrad();
  adagrad->set_learning_rate(0.1f);
  adagrad->set_initial_accumulator(0.1f);
  adagrad->set_eps(1e-10f);
  SetTestCluster(&c, num_servers, /*workers=*/1, kParts, BSP);
  return c;
}

// Every row of every table: (table, key) -> payload, bit for bit.
using Dump = std::map<std::pair<uint32_t, uint64_t>, std::vector<float>>;

// A checkpoint at `clock` on every core, FULL or a DELTA on `base` (whose
// manifest chain it extends), then its manifest naming `job` and
// `num_partitions`, written as the scheduler writes it. Returns the manifest;
// `dir`, if given, gets the checkpoint's directory.
inline ckpt::CheckpointManifest CheckpointCores(
    std::vector<std::unique_ptr<ParameterServerCore>>& cores, const std::string& root,
    uint64_t clock, const ckpt::CheckpointManifest* base, const std::string& job,
    uint32_t num_partitions, std::string* dir = nullptr) {
  ckpt::CheckpointManifest m;
  m.set_format_version(ckpt::kManifestFormatVersion);
  m.set_checkpoint_id(ckpt::CheckpointId(clock));
  m.set_clock(clock);
  m.set_job_name(job);
  m.set_config_fingerprint(1);
  m.set_num_partitions(num_partitions);
  m.set_kind(base ? ckpt::CheckpointManifest::DELTA : ckpt::CheckpointManifest::FULL);
  if (base != nullptr) {
    m.set_base_id(base->checkpoint_id());
    *m.mutable_chain() = base->chain();
  }
  m.add_chain(m.checkpoint_id());
  std::string written;
  for (auto& core : cores) {
    core->SetCheckpointRoot(root);
    CheckpointRequest request;
    request.set_clock(clock);
    request.set_delta(base != nullptr);
    if (base != nullptr) request.set_base_clock(base->clock());
    CheckpointResponse response;
    const absl::Status st = core->Checkpoint(request, &response);
    EXPECT_TRUE(st.ok()) << st;
    for (const ckpt::CheckpointFile& f : response.written()) *m.add_files() = f;
    written = response.checkpoint_dir();
  }
  const absl::Status st = ckpt::WriteManifest(written, m);
  EXPECT_TRUE(st.ok()) << st;
  if (dir != nullptr) *dir = written;
  return m;
}

// The servers of one job with the contiguous map, driven as one BSP worker.
class Job {
 public:
  explicit Job(uint32_t num_servers, const JobConfig& config)
      : map_(*PartitionMap::Contiguous(1, kParts, num_servers)) {
    for (uint32_t s = 0; s < num_servers; ++s) {
      CoreOptions options;
      options.config = config;
      options.server_index = s;
      auto core = ParameterServerCore::Create(options);
      EXPECT_TRUE(core.ok()) << core.status();
      cores_.push_back(std::move(*core));
    }
  }
  explicit Job(uint32_t num_servers) : Job(num_servers, Config(num_servers)) {}

  ParameterServerCore& core(uint32_t s) { return *cores_[s]; }
  uint32_t size() const { return cores_.size(); }

  // One BSP step: gradients of every key of both tables (Keys), pushed at
  // `clock`.
  void Step(uint64_t clock) { Push(clock, Keys); }

  // A push at `clock` of gradients for `keys(table)` of both tables (a
  // function of key, clock and column), each key to its owner; every server
  // gets one (an empty push closes the clock there).
  void Push(uint64_t clock, const std::function<std::vector<uint64_t>(uint32_t)>& keys) {
    std::vector<PushRequest> pushes(size());
    for (PushRequest& p : pushes) {
      p.set_map_version(map_.version());
      p.set_clock(clock);
      p.set_worker_rank(0);
    }
    for (uint32_t table : {1u, 2u}) {
      const uint32_t dim = cores_[0]->store()->FindTable(table)->dim();
      std::vector<TableGradients*> out(size(), nullptr);
      for (uint64_t key : keys(table)) {
        const uint32_t s = map_.ServerOf(table, key);
        if (out[s] == nullptr) {
          out[s] = pushes[s].add_tables();
          out[s]->set_table_id(table);
        }
        out[s]->add_keys(key);
        std::vector<float> g(dim);
        for (uint32_t j = 0; j < dim; ++j) {
          g[j] = 0.01f * static_cast<float>(static_cast<int>((key * 31 + clock * 7 + j) % 17) - 8);
        }
        std::string bytes;
        EncodeValues(g.data(), dim, Encoding::kFp32, &bytes);
        out[s]->mutable_gradients()->append(bytes);
      }
    }
    for (uint32_t s = 0; s < size(); ++s) {
      PushResponse response;
      const absl::Status st = cores_[s]->Push(pushes[s], &response);
      ASSERT_TRUE(st.ok()) << st;
    }
  }

  // An eviction sweep on every server; the rows evicted.
  uint64_t Evict() {
    uint64_t evicted = 0;
    for (auto& core : cores_) evicted += core->Evict();
    return evicted;
  }

  static std::vector<uint64_t> Keys(uint32_t table) {
    std::vector<uint64_t> keys;
    for (uint64_t i = 0; i < (table == 1 ? 300u : 200u); ++i) {
      keys.push_back(i * 1000003 + table);
    }
    return keys;
  }

  // EVAL pulls of every key (changes nothing), at `clock`.
  std::vector<float> PullAll(uint64_t clock) {
    std::vector<float> values;
    for (uint32_t table : {1u, 2u}) {
      for (uint64_t key : Keys(table)) {
        PullRequest request;
        request.set_map_version(map_.version());
        request.set_purpose(EVAL);
        request.set_clock(clock);
        TableKeys* tk = request.add_tables();
        tk->set_table_id(table);
        tk->add_keys(key);
        PullResponse response;
        const absl::Status st = cores_[map_.ServerOf(table, key)]->Pull(
            request, absl::Now() + absl::Seconds(60), &response);
        EXPECT_TRUE(st.ok()) << st;
        const std::string& bytes = response.tables(0).values();
        const size_t n = bytes.size() / sizeof(float);
        values.resize(values.size() + n);
        std::memcpy(values.data() + values.size() - n, bytes.data(), bytes.size());
      }
    }
    return values;
  }

  Dump DumpAll() {
    Dump dump;
    for (auto& core : cores_) {
      for (Table* table : core->store()->tables()) {
        const size_t stride = table->row_stride();
        table->ForEachRow([&](uint64_t key, const float* payload) {
          auto [it, inserted] = dump.emplace(std::make_pair(table->id(), key),
                                             std::vector<float>(payload, payload + stride));
          EXPECT_TRUE(inserted) << "row on two servers";
        });
      }
    }
    return dump;
  }

  // Checkpoint on every server at `clock`, then the manifest from the
  // responses (as the scheduler does). Returns the checkpoint's directory.
  std::string Checkpoint(const std::string& root, uint64_t clock) {
    std::string dir;
    CheckpointCores(cores_, root, clock, /*base=*/nullptr, kJob, kParts, &dir);
    return dir;
  }

  // Restore on every server; the first error.
  absl::Status Restore(const RestoreRequest& request) {
    for (auto& core : cores_) {
      RestoreResponse response;
      absl::Status st = core->Restore(request, &response);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  // Restore of the checkpoint directory `dir` (<root>/ckpt-<clock>).
  absl::Status Restore(const std::string& dir) {
    const size_t slash = dir.rfind('/');
    const std::optional<uint64_t> clock = ckpt::ParseCheckpointId(dir.substr(slash + 1));
    if (slash == std::string::npos || !clock) {
      return absl::InvalidArgumentError(absl::StrCat(dir, " is not a checkpoint directory"));
    }
    return Restore(dir.substr(0, slash), *clock);
  }
  // Restore of the checkpoint at `clock` under `root`.
  absl::Status Restore(const std::string& root, uint64_t clock) {
    SetRoot(root);
    RestoreRequest request;
    request.set_clock(clock);
    return Restore(request);
  }
  std::vector<std::unique_ptr<ParameterServerCore>>& cores() { return cores_; }
  // Resharding tests: the map pushes and pulls are routed (and stamped) by
  // from now on (the cores get it by Control themselves), and a core that
  // joins the job (it gets a push of every clock from then on).
  const PartitionMap& map() const { return map_; }
  void SetMap(PartitionMap map) { map_ = std::move(map); }
  void AddCore(std::unique_ptr<ParameterServerCore> core) { cores_.push_back(std::move(core)); }
  // Where every core's checkpoints go from now on.
  void SetRoot(const std::string& root) {
    for (auto& core : cores_) core->SetCheckpointRoot(root);
  }

 private:
  PartitionMap map_;
  std::vector<std::unique_ptr<ParameterServerCore>> cores_;
};

inline std::string NewRoot(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/" + name;
  EXPECT_TRUE(ckpt::RemoveAll(root).ok());
  return root;
}

}  // namespace shardps::testing

#endif  // SHARDPS_SERVER_SNAPSHOT_TEST_UTIL_H_
