// Checkpoint and restore across real ps_server processes: two servers write
// a checkpoint over gRPC, the test writes the manifest from their responses
// (as the scheduler will), the servers are killed, fresh ones restore it and
// serve bit-identical rows, and replaying the steps after the checkpoint
// ends bit-identical to the job that never stopped. A delta checkpoint on a
// full one is smaller and restores (as a chain) the same rows and tables;
// the scheduler's checkpointer writes delta chains with checkpoint.delta.
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/client/ps_client.h"
#include "common/partition.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "scheduler/checkpoint_client.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::SupervisedJob;

constexpr uint32_t kParts = 64;
// The control token the test's servers are started with
// (--control_token_file): the test plays the scheduler.
constexpr uint64_t kControlToken = 0x5eed5eed12345678ULL;

// A file holding kControlToken, readable by its owner only.
std::string ControlTokenFile() {
  const std::string path = ::testing::TempDir() + "/control.token";
  std::ofstream(path) << kControlToken << "\n";
  chmod(path.c_str(), 0600);
  return path;
}

std::string Config(uint32_t num_servers) {
  return absl::StrCat(R"pb(
name: "ckpt-process-test"
tables {
  id: 1 name: "emb" dim: 4 seed: 3
  init { kind: UNIFORM scale: 0.1 }
  optimizer { adam { learning_rate: 0.01 } }
}
tables {
  # No field feeds it (its default limit would be batch_size keys); the
  # test pushes its 400 keys in one request.
  id: 2 name: "user" dim: 3 seed: 4 max_keys_per_request: 400
  init { kind: NORMAL scale: 0.05 }
  optimizer { adagrad { learning_rate: 0.1 initial_accumulator: 0.1 } }
}
data { train_files: "unused.tsv" }
cluster { num_servers: )pb",
                      num_servers, R"pb( num_workers: 1 num_partitions: 64 mode: BSP }
)pb");
}

std::vector<uint64_t> Keys(uint32_t table) {
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 400; ++i) keys.push_back(i * 7919 + table * 13);
  return keys;
}

uint32_t Dim(uint32_t table) { return table == 1 ? 4 : 3; }

// SupervisedJob's options for `num_servers` servers alone (no scheduler:
// the test plays it), whose config's checkpoint.dir is `root`.
SupervisedJob::Options Servers(uint32_t num_servers, const std::string& name,
                               const std::string& root) {
  SupervisedJob::Options o = testing::ManualJob(
      name, absl::StrCat(Config(num_servers), "checkpoint { dir: \"", root, "\" }\n"), num_servers,
      0);
  o.scheduler = false;
  o.server_flags = {"--control_token_file=" + ControlTokenFile()};
  return o;
}

// Servers started from one config, with the map and a client over them.
class Cluster {
 public:
  // Servers whose config's checkpoint.dir is `root`.
  Cluster(uint32_t num_servers, const std::string& name, const std::string& root)
      : servers_(Servers(num_servers, name, root)) {
    EXPECT_TRUE(servers_.Start().ok()) << servers_.Logs();
    EXPECT_TRUE(servers_.WaitListening(absl::Seconds(60)).ok()) << servers_.Logs();
    map_.set_version(1);
    map_.set_num_partitions(kParts);
    const absl::StatusOr<PartitionMap> contiguous =
        PartitionMap::Contiguous(1, kParts, num_servers);
    EXPECT_TRUE(contiguous.ok()) << contiguous.status();
    for (uint32_t o : contiguous->owners()) map_.add_owner(o);
    for (uint32_t i = 0; i < num_servers; ++i) {
      const std::string& address = servers_.server_address(i);
      map_.add_server_addresses(address);
      stubs_.push_back(ParameterServer::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
    }
    auto client = PsClient::Create(PsClient::Options(), map_, [this](uint64_t) { return map_; });
    EXPECT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  void KillAll() {
    client_.reset();
    servers_.KillAll();
    for (uint32_t i = 0; i < size(); ++i) {
      EXPECT_TRUE(servers_.sup().WaitFinal(servers_.server(i), absl::Seconds(60)).ok());
    }
  }

  // One BSP step of the single worker: gradients of every key (or, with
  // `every` > 1, of one key in `every`), a function of (key, clock).
  void Step(uint64_t clock, uint32_t every = 1) {
    std::vector<std::vector<float>> grads(3);
    std::vector<std::vector<uint64_t>> keys(3);
    std::vector<TablePush> pushes;
    for (uint32_t t : {1u, 2u}) {
      const std::vector<uint64_t> all = Keys(t);
      for (size_t i = 0; i < all.size(); ++i) {
        if ((i + clock) % every == 0) keys[t].push_back(all[i]);
      }
      for (uint64_t k : keys[t]) {
        for (uint32_t j = 0; j < Dim(t); ++j) {
          grads[t].push_back(
              0.01f * static_cast<float>(static_cast<int>((k * 31 + clock * 5 + j) % 13) - 6));
        }
      }
      pushes.push_back({t, Dim(t), keys[t].data(), keys[t].size(), grads[t].data()});
    }
    const absl::Status st = client_->PushAsync(pushes, clock, 1.0f, true)->Wait();
    ASSERT_TRUE(st.ok()) << st;
  }

  // Every row, read by evaluation pulls at `clock` (they change nothing).
  std::vector<float> PullAll(uint64_t clock) {
    std::vector<std::vector<uint64_t>> keys(3);
    std::vector<float> out;
    std::vector<TablePull> pulls;
    size_t total = 0;
    for (uint32_t t : {1u, 2u}) total += Keys(t).size() * Dim(t);
    out.resize(total);
    size_t offset = 0;
    for (uint32_t t : {1u, 2u}) {
      keys[t] = Keys(t);
      pulls.push_back({t, Dim(t), keys[t].data(), keys[t].size(), out.data() + offset});
      offset += keys[t].size() * Dim(t);
    }
    const absl::Status st = client_->PullAsync(pulls, EVAL, clock)->Wait();
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }

  ParameterServer::Stub& stub(uint32_t i) { return *stubs_[i]; }
  void set_generation(uint64_t g) { client_->set_generation(g); }
  const PartitionMapProto& map() const { return map_; }
  uint32_t size() const { return map_.server_addresses_size(); }

 private:
  SupervisedJob servers_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
  PartitionMapProto map_;
  std::unique_ptr<PsClient> client_;
};

// Checkpoint RPCs to every server, then the manifest from their responses
// (FULL, or a DELTA on `base`). Returns the manifest.
checkpoint::CheckpointManifest WriteCheckpoint(
    Cluster& cluster, const std::string& root, uint64_t clock,
    const checkpoint::CheckpointManifest* base = nullptr) {
  checkpoint::CheckpointManifest manifest;
  manifest.set_format_version(checkpoint::kManifestFormatVersion);
  manifest.set_checkpoint_id(checkpoint::CheckpointId(clock));
  manifest.set_clock(clock);
  manifest.set_job_name("ckpt-process-test");
  manifest.set_config_fingerprint(42);
  manifest.set_num_partitions(kParts);
  manifest.set_kind(base ? checkpoint::CheckpointManifest::DELTA
                         : checkpoint::CheckpointManifest::FULL);
  if (base != nullptr) {
    manifest.set_base_id(base->checkpoint_id());
    *manifest.mutable_chain() = base->chain();
  }
  manifest.add_chain(checkpoint::CheckpointId(clock));
  // As the scheduler: COPY on every server (then the workers could go on),
  // COLLECT the files.
  std::string dir;
  for (auto phase : {CheckpointRequest::COPY, CheckpointRequest::COLLECT}) {
    for (uint32_t i = 0; i < cluster.size(); ++i) {
      grpc::ClientContext context;
      CheckpointRequest request;
      request.set_control_token(kControlToken);
      request.set_clock(clock);
      request.set_phase(phase);
      request.set_delta(base != nullptr);
      if (base != nullptr) request.set_base_clock(base->clock());
      CheckpointResponse response;
      const grpc::Status st = cluster.stub(i).Checkpoint(&context, request, &response);
      EXPECT_TRUE(st.ok()) << st.error_message();
      EXPECT_GT(response.rows(), 0u);
      for (const auto& f : response.written()) *manifest.add_files() = f;
      dir = response.checkpoint_dir();
    }
  }
  const absl::Status st = checkpoint::WriteManifest(dir, manifest);
  EXPECT_TRUE(st.ok()) << st;
  return manifest;
}

// A FULL checkpoint; returns its directory.
std::string Checkpoint(Cluster& cluster, const std::string& root, uint64_t clock) {
  WriteCheckpoint(cluster, root, clock);
  return checkpoint::CheckpointPath(root, clock);
}

uint64_t Bytes(const checkpoint::CheckpointManifest& m) {
  uint64_t bytes = 0;
  for (const auto& f : m.files()) bytes += f.size();
  return bytes;
}

// Per server and table: (name, dim, live rows), and each server's clock.
std::vector<std::string> TableInfos(Cluster& cluster) {
  std::vector<std::string> out;
  for (uint32_t i = 0; i < cluster.size(); ++i) {
    grpc::ClientContext context;
    TableInfoRequest request;
    TableInfoResponse response;
    const grpc::Status st = cluster.stub(i).TableInfo(&context, request, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    out.push_back(
        absl::StrCat("server ", response.server_index(), " clock ", response.applied_clock()));
    for (const TableStats& t : response.tables()) {
      out.push_back(
          absl::StrCat(t.table_id(), " ", t.name(), " dim ", t.dim(), " live ", t.live_rows()));
    }
  }
  return out;
}

// Restores the checkpoint at `clock` of the servers' checkpoint.dir.
void Restore(Cluster& cluster, uint64_t clock) {
  for (uint32_t i = 0; i < cluster.size(); ++i) {
    grpc::ClientContext context;
    RestoreRequest request;
    request.set_control_token(kControlToken);
    request.set_clock(clock);
    RestoreResponse response;
    const grpc::Status st = cluster.stub(i).Restore(&context, request, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(response.clock(), clock);
  }
}

TEST(CheckpointProcessTest, RestoredServersServeBitIdenticalRowsAndResume) {
  const std::string root = ::testing::TempDir() + "/ckpt-process";
  ASSERT_TRUE(checkpoint::RemoveAll(root).ok());
  std::vector<float> at_checkpoint, at_end;
  std::string dir;
  {
    Cluster original(2, "original", root);
    for (uint64_t c = 0; c < 3; ++c) original.Step(c);
    dir = Checkpoint(original, root, 3);
    at_checkpoint = original.PullAll(3);
    // The job that never fails goes on for two more steps.
    for (uint64_t c = 3; c < 5; ++c) original.Step(c);
    at_end = original.PullAll(5);
    ASSERT_NE(at_end, at_checkpoint);
    original.KillAll();
  }
  {
    Cluster restored(2, "restored", root);
    Restore(restored, 3);
    EXPECT_EQ(restored.PullAll(3), at_checkpoint);
    for (uint64_t c = 3; c < 5; ++c) restored.Step(c);
    EXPECT_EQ(restored.PullAll(5), at_end);
    restored.KillAll();
  }
  {
    Cluster single(1, "single", root);  // Another server count.
    Restore(single, 3);
    EXPECT_EQ(single.PullAll(3), at_checkpoint);
    for (uint64_t c = 3; c < 5; ++c) single.Step(c);
    EXPECT_EQ(single.PullAll(5), at_end);
    single.KillAll();
  }
}

TEST(CheckpointProcessTest, CorruptCheckpointIsRefusedOverGrpc) {
  const std::string root = ::testing::TempDir() + "/ckpt-corrupt";
  ASSERT_TRUE(checkpoint::RemoveAll(root).ok());
  Cluster cluster(2, "corrupt", root);
  cluster.Step(0);
  const std::string dir = Checkpoint(cluster, root, 1);
  const std::vector<float> before = cluster.PullAll(1);
  ASSERT_TRUE(checkpoint::RemoveAll(dir + "/part-0000-000032.shard").ok());
  grpc::ClientContext context;
  RestoreRequest request;
  request.set_control_token(kControlToken);
  request.set_clock(1);
  RestoreResponse response;
  const grpc::Status st = cluster.stub(1).Restore(&context, request, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_NE(st.error_message().find("part-0000-000032.shard"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(cluster.PullAll(1), before);
  cluster.KillAll();
}

TEST(CheckpointProcessTest, DeltaCheckpointIsSmallerAndRestoresTheSameRows) {
  const std::string root = ::testing::TempDir() + "/ckpt-delta";
  ASSERT_TRUE(checkpoint::RemoveAll(root).ok());
  std::vector<float> rows;
  std::vector<std::string> infos;
  checkpoint::CheckpointManifest full, delta;
  {
    Cluster original(2, "delta-original", root);
    for (uint64_t c = 0; c < 3; ++c) original.Step(c);
    full = WriteCheckpoint(original, root, 3);
    // Two steps that touch one key in 8.
    for (uint64_t c = 3; c < 5; ++c) original.Step(c, 8);
    delta = WriteCheckpoint(original, root, 5, &full);
    rows = original.PullAll(5);
    infos = TableInfos(original);
    original.KillAll();
  }
  std::cout << "full checkpoint " << Bytes(full) << " bytes, delta (1 key in 4 "
            << "changed) " << Bytes(delta) << " bytes\n";
  EXPECT_LT(Bytes(delta), Bytes(full) / 2);
  EXPECT_EQ(delta.chain_size(), 2);
  {
    Cluster restored(2, "delta-restored", root);
    Restore(restored, 5);
    EXPECT_EQ(restored.PullAll(5), rows);
    EXPECT_EQ(TableInfos(restored), infos);
    restored.KillAll();
  }
}

TEST(CheckpointProcessTest, SchedulerCheckpointerWritesDeltaChainsAndResumes) {
  const std::string root = ::testing::TempDir() + "/ckpt-sched-delta";
  ASSERT_TRUE(checkpoint::RemoveAll(root).ok());
  JobConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(Config(2), &config));
  config.mutable_checkpoint()->set_dir(root);
  config.mutable_checkpoint()->set_delta(true);
  config.mutable_checkpoint()->set_keep(1);
  // A cut as the coordinator makes it: copy on every server, then the files
  // and the manifest.
  auto cut = [](ServerOps& ops, const PartitionMapProto& map, uint64_t clock,
                const Positions& positions) {
    absl::Status st = ops.CopyCut(map, 0, clock, /*delta_on_last=*/false);
    if (st.ok()) st = ops.FinishCut(map, 0, clock, positions);
    return st;
  };
  std::vector<float> rows;
  {
    Cluster original(2, "sched-original", root);
    const std::unique_ptr<ServerOps> ops = MakeGrpcServerOps(config, kControlToken);
    for (uint64_t c = 0; c < 3; ++c) original.Step(c);
    ASSERT_TRUE(cut(*ops, original.map(), 3, {{0, "at-3"}}).ok());
    for (uint64_t c = 3; c < 5; ++c) original.Step(c, 8);
    ASSERT_TRUE(cut(*ops, original.map(), 5, {{0, "at-5"}}).ok());
    for (uint64_t c = 5; c < 7; ++c) original.Step(c, 8);
    ASSERT_TRUE(cut(*ops, original.map(), 7, {{0, "at-7"}}).ok());
    rows = original.PullAll(7);
    original.KillAll();
  }
  // keep = 1 kept the newest and the chain it needs.
  auto latest = checkpoint::LatestComplete(root);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->manifest.kind(), checkpoint::CheckpointManifest::DELTA);
  ASSERT_EQ(latest->chain.size(), 3u);
  EXPECT_EQ(latest->chain[0].kind(), checkpoint::CheckpointManifest::FULL);
  EXPECT_EQ(latest->chain[1].clock(), 5u);
  EXPECT_LT(Bytes(latest->chain[1]), Bytes(latest->chain[0]) / 2);
  std::cout << "scheduler checkpoints: full " << Bytes(latest->chain[0]) << " bytes, deltas "
            << Bytes(latest->chain[1]) << " and " << Bytes(latest->manifest) << " bytes\n";
  {
    Cluster restored(2, "sched-restored", root);
    const std::unique_ptr<ServerOps> ops = MakeGrpcServerOps(config, kControlToken);
    auto points = ops->RestorePoints();
    ASSERT_TRUE(points.ok()) << points.status();
    // Newest first; the links of its chain are complete checkpoints too.
    ASSERT_EQ(points->size(), 3u);
    EXPECT_EQ(points->front().clock, 7u);
    EXPECT_EQ(points->back().clock, 3u);
    EXPECT_EQ(points->front().positions.at(0), "at-7");
    auto restored_stats = ops->Restore(restored.map(), std::nullopt, points->front(), 0);
    ASSERT_TRUE(restored_stats.ok()) << restored_stats.status();
    EXPECT_GE(restored_stats->rows, 800u);  // Every link's rows.
    EXPECT_GT(restored_stats->bytes, 0u);
    EXPECT_EQ(restored.PullAll(7), rows);
    // After a restore the next delta continues the restored chain (every
    // server kept the restored checkpoint as its base).
    restored.Step(7, 8);
    ASSERT_TRUE(cut(*ops, restored.map(), 8, {}).ok());
    auto eighth = checkpoint::LoadCheckpoint(root, 8);
    ASSERT_TRUE(eighth.ok()) << eighth.status();
    EXPECT_EQ(eighth->manifest.kind(), checkpoint::CheckpointManifest::DELTA);
    EXPECT_EQ(eighth->chain.size(), 4u);
    // A new scheduler's first checkpoint is FULL.
    restored.Step(8, 8);
    const std::unique_ptr<ServerOps> fresh = MakeGrpcServerOps(config, kControlToken);
    ASSERT_TRUE(cut(*fresh, restored.map(), 9, {}).ok());
    auto ninth = checkpoint::LoadCheckpoint(root, 9);
    ASSERT_TRUE(ninth.ok()) << ninth.status();
    EXPECT_EQ(ninth->manifest.kind(), checkpoint::CheckpointManifest::FULL);
    restored.KillAll();
  }
  // Another job's checkpoint directory is refused, naming it.
  JobConfig other = config;
  other.set_name("another-job");
  auto refused = MakeGrpcServerOps(other, kControlToken)->RestorePoints();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("ckpt-process-test"), std::string::npos);
}

// Raw data-path calls of one generation against server `i`.
grpc::Status PushOne(Cluster& cluster, uint32_t i, uint64_t generation, uint64_t key) {
  grpc::ClientContext context;
  PushRequest request;
  request.set_map_version(1);
  request.set_clock(0);
  request.set_generation(generation);
  TableGradients* g = request.add_tables();
  g->set_table_id(1);
  g->add_keys(key);
  const float grad[4] = {1, 1, 1, 1};
  g->set_gradients(std::string(reinterpret_cast<const char*>(grad), sizeof grad));
  PushResponse response;
  return cluster.stub(i).Push(&context, request, &response);
}

// A restore moves every server into the request's generation: a push of the
// old generation (in flight during a rollback) is refused as stale and
// changes nothing, a push of a newer one is UNAVAILABLE (retried), and an
// initial restore puts every row back to its initial value at clock 0.
TEST(CheckpointProcessTest, RestoreMovesServersIntoItsGenerationAndRefusesOldRequests) {
  const std::string root = ::testing::TempDir() + "/ckpt-generation";
  ASSERT_TRUE(checkpoint::RemoveAll(root).ok());
  Cluster cluster(1, "generation", root);
  const std::vector<float> initial = cluster.PullAll(0);
  for (uint64_t c = 0; c < 2; ++c) cluster.Step(c);
  Checkpoint(cluster, root, 2);
  const std::vector<float> at_checkpoint = cluster.PullAll(2);
  cluster.Step(2);
  ASSERT_NE(cluster.PullAll(3), at_checkpoint);
  {
    grpc::ClientContext context;
    RestoreRequest request;
    request.set_control_token(kControlToken);
    request.set_clock(2);
    request.set_generation(7);
    RestoreResponse response;
    const grpc::Status st = cluster.stub(0).Restore(&context, request, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(response.clock(), 2u);
    EXPECT_GT(response.bytes_read(), 0u);
  }
  const uint64_t key = Keys(1)[0];
  const grpc::Status stale = PushOne(cluster, 0, 0, key);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(stale.error_message().find("stale generation"), std::string::npos)
      << stale.error_message();
  EXPECT_EQ(PushOne(cluster, 0, 8, key).error_code(), grpc::StatusCode::UNAVAILABLE);
  cluster.set_generation(7);
  EXPECT_EQ(cluster.PullAll(2), at_checkpoint) << "a refused push changed a row";
  {
    TableInfoRequest request;
    TableInfoResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(cluster.stub(0).TableInfo(&context, request, &response).ok());
    EXPECT_EQ(response.generation(), 7u);
    EXPECT_EQ(response.applied_clock(), 2u);
  }
  {
    grpc::ClientContext context;
    RestoreRequest request;
    request.set_control_token(kControlToken);
    request.set_initial(true);
    request.set_generation(9);
    RestoreResponse response;
    ASSERT_TRUE(cluster.stub(0).Restore(&context, request, &response).ok());
    EXPECT_EQ(response.clock(), 0u);
  }
  cluster.set_generation(9);
  EXPECT_EQ(cluster.PullAll(0), initial);
  cluster.KillAll();
}

}  // namespace
}  // namespace shardps
