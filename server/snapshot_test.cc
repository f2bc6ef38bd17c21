// Checkpoint and restore of ParameterServerCore (server/snapshot.h): round
// trips, restores onto other server counts, refused corrupt checkpoints.
// Core-level, no network.
#include "server/snapshot.h"

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/codec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "server/parameter_server_core.h"

namespace shardps {
namespace {

namespace ckpt = checkpoint;

constexpr uint32_t kParts = 128;  // Two partition groups.
constexpr char kJob[] = "snapshot-test";

JobConfig Config(uint32_t num_servers, uint32_t user_dim = 3) {
  JobConfig c;
  c.set_name(kJob);
  TableConfig* t = c.add_tables();
  t->set_id(1);
  t->set_name("emb");
  t->set_kind(TableConfig::SPARSE);
  t->set_dim(4);
  t->set_seed(5);
  t->mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t->mutable_init()->set_scale(0.1f);
  AdamConfig* adam = t->mutable_optimizer()->mutable_adam();
  adam->set_learning_rate(0.01f);
  adam->set_beta1(0.9f);
  adam->set_beta2(0.999f);
  adam->set_eps(1e-8f);
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
  ClusterConfig* k = c.mutable_cluster();
  k->set_num_servers(num_servers);
  k->set_num_workers(1);
  k->set_num_partitions(kParts);
  k->set_mode(BSP);
  k->set_max_message_bytes(64 << 20);
  k->set_server_deadline_ms(60000);
  k->set_dense_chunk_size(8);
  return c;
}

// Every row of every table: (table, key) -> payload, bit for bit.
using Dump = std::map<std::pair<uint32_t, uint64_t>, std::vector<float>>;

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

  // One BSP step: gradients of every key of both tables, a function of the
  // step, pushed to their owners (empty pushes close the clock elsewhere).
  void Step(uint64_t clock) {
    std::vector<PushRequest> pushes(size());
    for (PushRequest& p : pushes) {
      p.set_map_version(1);
      p.set_clock(clock);
      p.set_worker_rank(0);
    }
    for (uint32_t table : {1u, 2u}) {
      const uint32_t dim = cores_[0]->store()->FindTable(table)->dim();
      std::vector<TableGradients*> out(size(), nullptr);
      for (uint64_t key : Keys(table)) {
        const uint32_t s = map_.ServerOf(table, key);
        if (out[s] == nullptr) {
          out[s] = pushes[s].add_tables();
          out[s]->set_table_id(table);
        }
        out[s]->add_keys(key);
        std::vector<float> g(dim);
        for (uint32_t j = 0; j < dim; ++j) {
          g[j] = 0.01f * static_cast<float>(
                             static_cast<int>((key * 31 + clock * 7 + j) % 17) - 8);
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
        request.set_map_version(1);
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
    ckpt::CheckpointManifest manifest;
    manifest.set_format_version(ckpt::kManifestFormatVersion);
    manifest.set_checkpoint_id(ckpt::CheckpointId(clock));
    manifest.set_clock(clock);
    manifest.set_job_name(kJob);
    manifest.set_config_fingerprint(1);
    manifest.set_num_partitions(kParts);
    manifest.set_kind(ckpt::CheckpointManifest::FULL);
    manifest.add_chain(ckpt::CheckpointId(clock));
    std::string dir;
    for (auto& core : cores_) {
      CheckpointRequest request;
      request.set_dir(root);
      request.set_clock(clock);
      CheckpointResponse response;
      const absl::Status st = core->Checkpoint(request, &response);
      EXPECT_TRUE(st.ok()) << st;
      for (const ckpt::CheckpointFile& f : response.written()) {
        *manifest.add_files() = f;
      }
      dir = response.checkpoint_dir();
    }
    const absl::Status st = ckpt::WriteManifest(dir, manifest);
    EXPECT_TRUE(st.ok()) << st;
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
  absl::Status Restore(const std::string& dir) {
    RestoreRequest request;
    request.set_manifest(dir);
    return Restore(request);
  }

 private:
  PartitionMap map_;
  std::vector<std::unique_ptr<ParameterServerCore>> cores_;
};

std::string NewRoot(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/" + name;
  EXPECT_TRUE(ckpt::RemoveAll(root).ok());
  return root;
}

TEST(SnapshotTest, RoundTripIsBitIdenticalIncludingOptimizerState) {
  Job original(2);
  for (uint64_t c = 0; c < 5; ++c) original.Step(c);
  const std::string dir = original.Checkpoint(NewRoot("roundtrip"), 5);
  const Dump before = original.DumpAll();
  ASSERT_EQ(before.size(), 500u);

  Job restored(2);
  ASSERT_TRUE(restored.Restore(dir).ok());
  EXPECT_EQ(restored.DumpAll(), before);
  EXPECT_EQ(restored.core(0).applied_clock(), 5u);
  EXPECT_EQ(restored.core(1).applied_clock(), 5u);
  EXPECT_EQ(restored.PullAll(5), original.PullAll(5));

  // The optimizer state came along: the same further steps give the same
  // rows (Adam's moments and step counts, Adagrad's accumulators).
  for (uint64_t c = 5; c < 8; ++c) {
    original.Step(c);
    restored.Step(c);
  }
  EXPECT_EQ(restored.PullAll(8), original.PullAll(8));
  EXPECT_EQ(restored.DumpAll(), original.DumpAll());
  EXPECT_NE(original.DumpAll(), before);
}

TEST(SnapshotTest, RestoresOntoOtherServerCounts) {
  // 3 servers split both partition groups, so some files hold part of a
  // group; 2 servers own one whole group each.
  for (uint32_t from : {2u, 3u}) {
    Job original(from);
    for (uint64_t c = 0; c < 3; ++c) original.Step(c);
    const std::string dir =
        original.Checkpoint(NewRoot(absl::StrCat("servers", from)), 3);
    const Dump before = original.DumpAll();
    for (uint32_t to : {1u, 2u, 3u}) {
      Job restored(to);
      ASSERT_TRUE(restored.Restore(dir).ok()) << from << " -> " << to;
      EXPECT_EQ(restored.DumpAll(), before) << from << " -> " << to;
      for (uint64_t c = 3; c < 5; ++c) restored.Step(c);
      EXPECT_EQ(restored.core(0).applied_clock(), 5u);
    }
  }
}

TEST(SnapshotTest, FileNamesFollowPartitionGroups) {
  Job two(2);
  two.Step(0);
  CheckpointRequest request;
  request.set_dir(NewRoot("names"));
  request.set_clock(1);
  CheckpointResponse r0, r1;
  ASSERT_TRUE(two.core(0).Checkpoint(request, &r0).ok());
  ASSERT_TRUE(two.core(1).Checkpoint(request, &r1).ok());
  ASSERT_EQ(r0.files_size(), 1);
  EXPECT_EQ(r0.files(0), "part-0000.shard");
  EXPECT_EQ(r1.files(0), "part-0001.shard");
  ASSERT_EQ(r0.written(0).partitions_size(), 64);
  EXPECT_EQ(r0.rows() + r1.rows(), 500u);
  EXPECT_GT(r0.bytes(), 0u);

  Job three(3);  // Owns [0,42], [43,85], [86,127].
  three.Step(0);
  request.set_dir(NewRoot("names3"));
  CheckpointResponse r;
  ASSERT_TRUE(three.core(1).Checkpoint(request, &r).ok());
  ASSERT_EQ(r.files_size(), 2);
  EXPECT_EQ(r.files(0), "part-0000-000043.shard");
  EXPECT_EQ(r.files(1), "part-0001-000064.shard");
}

TEST(SnapshotTest, RestoreByRootFindsTheLatestOrTheNamedClock) {
  Job original(1);
  const std::string root = NewRoot("byroot");
  original.Step(0);
  original.Checkpoint(root, 1);
  const Dump at1 = original.DumpAll();
  original.Step(1);
  original.Checkpoint(root, 2);
  const Dump at2 = original.DumpAll();
  ASSERT_NE(at1, at2);

  Job restored(1);
  RestoreRequest request;
  request.set_root(root);
  ASSERT_TRUE(restored.Restore(request).ok());
  EXPECT_EQ(restored.DumpAll(), at2);
  request.set_clock(1);
  ASSERT_TRUE(restored.Restore(request).ok());
  EXPECT_EQ(restored.DumpAll(), at1);
  EXPECT_EQ(restored.core(0).applied_clock(), 1u);
}

TEST(SnapshotTest, BspCheckpointNeedsExactlyTheClocksBelowApplied) {
  Job job(1);
  job.Step(0);
  job.Step(1);
  CheckpointRequest request;
  request.set_dir(NewRoot("clock"));
  request.set_clock(1);
  CheckpointResponse response;
  absl::Status st = job.core(0).Checkpoint(request, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("applied clocks < 2"), std::string::npos) << st;

  // A delta on a checkpoint this server never copied: refused.
  request.set_delta(true);
  request.set_clock(2);
  request.set_base_clock(1);
  st = job.core(0).Checkpoint(request, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("no record of its base ckpt-000000000001"),
            std::string::npos)
      << st;
  request.clear_dir();
  request.set_delta(false);
  EXPECT_EQ(job.core(0).Checkpoint(request, &response).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SnapshotTest, CheckpointWithManifestCannotBeOverwritten) {
  Job job(1);
  job.Step(0);
  const std::string root = NewRoot("twice");
  job.Checkpoint(root, 1);
  CheckpointRequest request;
  request.set_dir(root);
  request.set_clock(1);
  CheckpointResponse response;
  EXPECT_EQ(job.core(0).Checkpoint(request, &response).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(SnapshotTest, CopyPhaseLetsTrainingGoOnWhileFilesAreWritten) {
  Job job(2);
  for (uint64_t c = 0; c < 2; ++c) job.Step(c);
  const Dump at2 = job.DumpAll();
  const std::string root = NewRoot("twophase");
  CheckpointRequest request;
  request.set_dir(root);
  request.set_clock(2);
  request.set_phase(CheckpointRequest::COPY);
  ckpt::CheckpointManifest manifest;
  for (uint32_t s = 0; s < 2; ++s) {
    CheckpointResponse response;
    ASSERT_TRUE(job.core(s).Checkpoint(request, &response).ok());
    EXPECT_EQ(response.files_size(), 0);
  }
  // Training resumes before the files are collected.
  job.Step(2);
  ASSERT_NE(job.DumpAll(), at2);
  CheckpointRequest collect = request;
  collect.set_phase(CheckpointRequest::COLLECT);
  collect.set_clock(3);
  CheckpointResponse response;
  absl::Status st = job.core(0).Checkpoint(collect, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  collect.set_clock(2);
  std::string dir;
  for (uint32_t s = 0; s < 2; ++s) {
    response.Clear();
    st = job.core(s).Checkpoint(collect, &response);
    ASSERT_TRUE(st.ok()) << st;
    for (const ckpt::CheckpointFile& f : response.written()) {
      *manifest.add_files() = f;
    }
    dir = response.checkpoint_dir();
  }
  // Collected once only.
  EXPECT_EQ(job.core(0).Checkpoint(collect, &response).code(),
            absl::StatusCode::kFailedPrecondition);
  manifest.set_format_version(ckpt::kManifestFormatVersion);
  manifest.set_checkpoint_id(ckpt::CheckpointId(2));
  manifest.set_clock(2);
  manifest.set_job_name(kJob);
  manifest.set_config_fingerprint(1);
  manifest.set_num_partitions(kParts);
  manifest.set_kind(ckpt::CheckpointManifest::FULL);
  manifest.add_chain(ckpt::CheckpointId(2));
  ASSERT_TRUE(ckpt::WriteManifest(dir, manifest).ok());

  Job restored(1);
  ASSERT_TRUE(restored.Restore(dir).ok());
  EXPECT_EQ(restored.DumpAll(), at2);  // The cut at the copy.
}

TEST(SnapshotTest, UncollectedWriteIsDroppedByTheNextCheckpoint) {
  Job job(1);
  job.Step(0);
  const std::string root = NewRoot("uncollected");
  CheckpointRequest request;
  request.set_dir(root);
  request.set_clock(1);
  request.set_phase(CheckpointRequest::COPY);
  CheckpointResponse response;
  ASSERT_TRUE(job.core(0).Checkpoint(request, &response).ok());
  job.Step(1);
  request.set_clock(2);
  request.set_phase(CheckpointRequest::COPY_AND_WRITE);
  ASSERT_TRUE(job.core(0).Checkpoint(request, &response).ok());
  EXPECT_EQ(response.files_size(), 2);
  request.set_clock(1);
  request.set_phase(CheckpointRequest::COLLECT);
  EXPECT_EQ(job.core(0).Checkpoint(request, &response).code(),
            absl::StatusCode::kFailedPrecondition);
}

// A checkpoint of job A, and a target job B with rows of its own: every bad
// checkpoint is refused and leaves B exactly as it was.
class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Job original(2);
    for (uint64_t c = 0; c < 3; ++c) original.Step(c);
    dir_ = original.Checkpoint(
        NewRoot(::testing::UnitTest::GetInstance()->current_test_info()->name()), 3);
    // One server reads every file: a refusal must leave all of it unchanged.
    target_ = std::make_unique<Job>(1);
    target_->Step(0);
    before_ = target_->DumpAll();
  }

  // Restores onto the target; expects `code` and `text` in the message, and
  // the target unchanged.
  void ExpectRefused(absl::StatusCode code, const std::string& text) {
    const absl::Status st = target_->Restore(dir_);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(text), std::string::npos) << st;
    EXPECT_EQ(target_->DumpAll(), before_);
    EXPECT_EQ(target_->core(0).applied_clock(), 1u);
  }

  std::string File(const std::string& name) { return dir_ + "/" + name; }
  std::string Read(const std::string& path) {
    auto contents = ckpt::ReadFileToString(path);
    EXPECT_TRUE(contents.ok()) << contents.status();
    return *contents;
  }
  void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  std::string dir_;
  std::unique_ptr<Job> target_;
  Dump before_;
};

TEST_F(CorruptionTest, FlippedByteIsRefusedNamingTheFile) {
  // The manifest's CRC of the file no longer matches.
  const std::string path = File("part-0000.shard");
  std::string bytes = Read(path);
  bytes[bytes.size() / 2] ^= 0x40;
  Write(path, bytes);
  ExpectRefused(absl::StatusCode::kDataLoss, "part-0000.shard");
}

TEST_F(CorruptionTest, FlippedByteWithMatchingManifestIsRefusedByBlockCrc) {
  // The manifest is rewritten with the damaged file's size and CRC: the
  // reader's block CRC still catches it.
  const std::string path = File("part-0000.shard");
  std::string bytes = Read(path);
  bytes[bytes.size() / 2] ^= 0x01;
  Write(path, bytes);
  auto manifest = ckpt::ParseManifest(Read(File(ckpt::kManifestFileName)), "m");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto digest = ckpt::DigestFile(path);
  ASSERT_TRUE(digest.ok());
  manifest->mutable_files(0)->set_crc32c(digest->crc32c);
  Write(File(ckpt::kManifestFileName), ckpt::SerializeManifest(*manifest));
  ExpectRefused(absl::StatusCode::kDataLoss, "CRC mismatch");
}

TEST_F(CorruptionTest, TruncatedFileIsRefused) {
  const std::string path = File("part-0001.shard");
  const std::string bytes = Read(path);
  Write(path, bytes.substr(0, bytes.size() - 100));
  ExpectRefused(absl::StatusCode::kDataLoss, "part-0001.shard");
}

TEST_F(CorruptionTest, MissingFileIsRefused) {
  ASSERT_TRUE(ckpt::RemoveAll(File("part-0001.shard")).ok());
  ExpectRefused(absl::StatusCode::kNotFound, "part-0001.shard");
}

TEST_F(CorruptionTest, MissingManifestIsRefused) {
  ASSERT_TRUE(ckpt::RemoveAll(File(ckpt::kManifestFileName)).ok());
  ExpectRefused(absl::StatusCode::kNotFound, "MANIFEST");
}

TEST_F(CorruptionTest, OtherTableSchemaIsRefused) {
  target_ = std::make_unique<Job>(1, Config(1, /*user_dim=*/5));
  target_->Step(0);
  before_ = target_->DumpAll();
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "dim");
}

TEST_F(CorruptionTest, OtherJobIsRefused) {
  JobConfig other = Config(1);
  other.set_name("another-job");
  target_ = std::make_unique<Job>(1, other);
  before_ = target_->DumpAll();
  const absl::Status st = target_->Restore(dir_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("another-job"), std::string::npos) << st;
  EXPECT_EQ(target_->DumpAll(), before_);
}

}  // namespace
}  // namespace shardps
