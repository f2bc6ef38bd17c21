// A serving replica following a real job (issue 34): a 1-server/1-worker
// BSP job checkpoints every 10 steps with delta checkpoints and eviction on;
// ps_replica follows its checkpoint directory from the start. Each test
// records every version the replica serves (Status) and checks, for each,
// that the replica's table hash equals ps_table_hash's, computed from that
// checkpoint's files alone.
//
// FollowsTheCheckpointsExactly: some versions are built incrementally (the
// version before plus a delta: replica.h), some of them in place on the
// model of the version before last, hash-equal all the same. At the
// last version, rows evicted in the chain's deltas (and not written again)
// are absent from Lookup while rows the last link wrote are present with the
// files' weights; Predict equals ps_score on the same checkpoint and lines to
// 6 digits; bad requests get INVALID_ARGUMENT naming the line.
//
// Each test runs twice: the replica follows the checkpoint files (Files),
// and the servers' delta stream (Stream: --scheduler; its first version,
// and its first after a restart, come from the files). In Stream the
// versions are the same cuts, served before their files are written, and
// the same checks hold (the table hash at every version against
// ps_table_hash of that checkpoint's files), bar those about files.
//
// FollowsARestartAndARollback: the replica is SIGKILLed after two versions
// and started again with the same flags once a newer checkpoint exists: it
// bootstraps at the newest one (catches up). Then the server is SIGKILLed 5
// clocks past a checkpoint and started again: the job rolls back to that
// checkpoint in a new generation and trains on; the replica ends on the
// post-rollback versions, hash-equal at every version, its Status.generation
// (the served MANIFEST's) risen from the job's generation before the kill
// to the one after. Last, the newest checkpoint is set aside as the
// scheduler sets a corrupt one aside on a rollback (renamed
// "<dir>.corrupt-<t>"): the replica moves back to the checkpoint before it
// (Status.rollbacks 1). Its /metrics moves along: version, versions
// applied, bytes read, rows, train-to-serve and Predict latency
// observations, rollbacks, newest checkpoint and lag.
//
// AStoppedReplicaDoesNotHoldTrainingBack: the replica SIGSTOPped after its
// first version; the job cuts 9 more checkpoints meanwhile (more than the
// servers keep for the stream); resumed, the replica catches up and ends
// hash-equal on the job's last checkpoint.
//
// The worker sleeps 150 ms a step (--step_delay_ms): the job's 157 steps
// then last over 20 s, long enough for the replica (polling every 50 ms) to
// serve several versions and for the server's eviction sweep, which runs
// every 10 s (server/ps_server.h), to evict idle rows during the job. A
// slower machine only makes the job longer. The test fails by name if it
// saw fewer than three versions or no eviction.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/checkpoint_file.h"
#include "gtest/gtest.h"
#include "proto/replica.grpc.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::ParseResult;
using testing::RunfilePath;
using testing::Subprocess;
using testing::SupervisedJob;

constexpr char kConfig[] = R"pb(
name: "replica"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 }
cluster {
  num_servers: 1 num_workers: 1 num_partitions: 64 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000
  max_message_bytes: 1048576  # The stream's parts then come in several chunks.
}
checkpoint { dir: "@CKPT@" every_steps: 10 keep: 100 delta: true }
)pb";

std::string DataDir() { return ::testing::TempDir() + "/replica_data"; }
std::string EvalFile() { return DataDir() + "/eval.tsv"; }

std::string Config() {
  testing::SmallDlrm t;
  t.sparse_extra = "eviction { ttl_clocks: 20 }";
  return testing::SmallDlrmTables(t) + absl::StrReplaceAll(kConfig, {{"@DATA@", DataDir()}});
}

std::vector<std::string> Lines(const std::string& path, size_t max) {
  std::vector<std::string> lines = absl::StrSplit(testing::ReadFile(path), '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() > max) lines.resize(max);
  return lines;
}

// GET http://<address><path> (HTTP/1.0, loopback); the body, "" on failure.
std::string HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// The value of metric `name` (a series without labels; for a histogram,
// name "<h>_count" or "<h>_sum") in a text exposition; -1 if absent.
double Metric(const std::string& text, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name + " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

// Runs a tool to its end; the fields of its `prefix` line (empty if none).
std::map<std::string, std::string> RunTool(const std::string& binary,
                                           const std::vector<std::string>& flags,
                                           const std::string& prefix, const std::string& log) {
  Subprocess tool;
  std::vector<std::string> argv = {RunfilePath(binary)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::map<std::string, std::string> result;
  if (!tool.Start(argv, log).ok()) return result;
  auto line = tool.WaitForLine(prefix, absl::Minutes(5));
  if (line.ok()) result = ParseResult(*line);
  auto code = tool.Wait(absl::Minutes(1));
  if (!code.ok() || *code != 0) result.clear();
  return result;
}

// The rows (key -> weights) one checkpoint's own files write and the keys
// they delete, for table `table_id`; `dim` floats a row.
struct Link {
  std::map<uint64_t, std::vector<float>> rows;
  std::set<uint64_t> deleted;
};
Link ReadLink(const std::string& dir, const checkpoint::CheckpointManifest& manifest,
              uint32_t table_id, uint32_t dim) {
  Link link;
  for (const checkpoint::CheckpointFile& f : manifest.files()) {
    auto reader = checkpoint::CheckpointFileReader::Open(dir + "/" + f.name());
    EXPECT_TRUE(reader.ok()) << reader.status();
    if (!reader.ok()) continue;
    for (const checkpoint::RecordBlock& b : (*reader)->blocks()) {
      if (b.table_id() != table_id || b.kind() == checkpoint::BlockKind::kAdmissionCounts) continue;
      for (size_t r = 0; r < b.size(); ++r) {
        if (b.deleted()) {
          link.deleted.insert(b.key(r));
          continue;
        }
        std::vector<float> w(dim);
        std::memcpy(w.data(), b.payload(r).data(), dim * sizeof(float));
        link.rows[b.key(r)] = std::move(w);
      }
    }
  }
  return link;
}

// The parameter: the replica follows the servers' delta stream
// (--scheduler) rather than the checkpoint files.
class ReplicaProcessTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 20000, 2000).ok());
    job_ = std::make_unique<SupervisedJob>(testing::ManualJob(
        // A directory of its own per test: a job resumes from checkpoints it finds.
        absl::StrCat(
            "replica_",
            absl::StrReplaceAll(::testing::UnitTest::GetInstance()->current_test_info()->name(),
                                {{"/", "_"}})),
        JobConfigText(), 1, 1, {"--step_delay_ms=150"}));
    ASSERT_TRUE(job_->Start().ok()) << job_->Logs();
    StartReplica();
  }

  virtual std::string JobConfigText() const { return Config(); }
  virtual std::vector<std::string> ExtraReplicaFlags() const { return {}; }

  // Starts ps_replica on the job's directory (again: the same flags), with
  // metrics; sets stub_ and metrics_.
  void StartReplica() {
    replica_ = std::make_unique<Subprocess>();
    ASSERT_TRUE(replica_->Start(ReplicaArgv(), job_->dir() + "/replica.log").ok());
    auto metrics = replica_->WaitForLine("PS_METRICS_LISTENING ", absl::Minutes(2));
    ASSERT_TRUE(metrics.ok()) << metrics.status()
                              << testing::ReadFile(job_->dir() + "/replica.log");
    metrics_ = std::string(absl::StripAsciiWhitespace(*metrics));
    auto listening = replica_->WaitForLine("PS_REPLICA_LISTENING ", absl::Minutes(2));
    ASSERT_TRUE(listening.ok()) << listening.status()
                                << testing::ReadFile(job_->dir() + "/replica.log");
    stub_ = Replica::NewStub(grpc::CreateChannel(
        std::string(absl::StripAsciiWhitespace(*listening)), grpc::InsecureChannelCredentials()));
  }

  std::vector<std::string> ReplicaArgv() const {
    std::vector<std::string> argv = {
        RunfilePath("replica/ps_replica"), "--config=" + job_->config_path(),
        "--checkpoint_dir=" + job_->ckpt(), "--poll_ms=50", "--metrics_listen=127.0.0.1:0"};
    if (GetParam()) argv.push_back("--scheduler=" + job_->address());
    for (const std::string& flag : ExtraReplicaFlags()) argv.push_back(flag);
    return argv;
  }

  // In stream mode: the versions came from the stream (after a first one
  // loaded from the files, and once more after each restart).
  void ExpectStreamed(int at_least) {
    if (!GetParam()) return;
    ReplicaStatusResponse status;
    ASSERT_TRUE(Call(&status).ok());
    EXPECT_TRUE(status.streaming());
    EXPECT_GE(status.stream_versions(), static_cast<uint64_t>(at_least))
        << testing::ReadFile(job_->dir() + "/replica.log");
    EXPECT_GT(status.stream_bytes(), 0u);
    const std::string metrics = Metrics();
    EXPECT_GE(Metric(metrics, "shardps_replica_stream_versions_total"), at_least) << metrics;
  }

  std::string Metrics() const { return HttpGet(metrics_, "/metrics"); }

  // Reads the replica's Status into `hash_at` (version -> table hash; a
  // version whose hash changes fails); returns the version served (0: none).
  uint64_t Record(std::map<uint64_t, uint64_t>* hash_at, ReplicaStatusResponse* out = nullptr) {
    ReplicaStatusResponse status;
    grpc::Status st = Call(&status);
    EXPECT_TRUE(st.ok()) << st.error_message();
    if (out != nullptr) *out = status;
    if (!st.ok() || !status.loaded()) return 0;
    auto [it, inserted] = hash_at->emplace(status.version(), status.table_hash());
    EXPECT_EQ(it->second, status.table_hash())
        << "version " << status.version() << " changed its hash";
    EXPECT_TRUE(status.last_error().empty()) << status.last_error();
    return status.version();
  }

  // Polls Record until `done(served)` holds; fails naming `what` after 10
  // minutes.
  uint64_t RecordUntil(const std::string& what, std::map<uint64_t, uint64_t>* hash_at,
                       const std::function<bool(uint64_t)>& done) {
    const absl::Time deadline = absl::Now() + absl::Minutes(10);
    while (true) {
      const uint64_t served = Record(hash_at);
      if (done(served)) return served;
      if (absl::Now() >= deadline) {
        ADD_FAILURE() << "waited for " << what << "; serving " << served << ", newest complete "
                      << testing::Checkpoints(job_->ckpt()).complete << "\n"
                      << testing::ReadFile(job_->dir() + "/replica.log") << job_->Logs();
        return served;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  // The replica's hash at each version equals ps_table_hash of that
  // checkpoint's files; returns how many of them are deltas. `versions_only`
  // gets the versions without a checkpoint (only versions_every_steps cuts
  // make them; otherwise they fail).
  int CheckHashes(const std::map<uint64_t, uint64_t>& hash_at,
                  std::vector<uint64_t>* versions_only = nullptr) {
    int deltas = 0;
    for (const auto& [version, hash] : hash_at) {
      if (versions_only != nullptr &&
          !std::filesystem::exists(checkpoint::CheckpointPath(job_->ckpt(), version))) {
        versions_only->push_back(version);
        continue;
      }
      auto resolved = checkpoint::LoadCheckpoint(job_->ckpt(), version);
      EXPECT_TRUE(resolved.ok()) << resolved.status();
      if (!resolved.ok()) continue;
      if (resolved->manifest.kind() == checkpoint::CheckpointManifest::DELTA) ++deltas;
      auto files = RunTool("replica/ps_table_hash",
                           {"--checkpoint_dir=" + job_->ckpt(), absl::StrCat("--clock=", version)},
                           "PS_TABLE_HASH ", job_->dir() + "/table_hash.log");
      EXPECT_EQ(files.count("hash"), 1u) << testing::ReadFile(job_->dir() + "/table_hash.log");
      uint64_t from_files = 0;
      EXPECT_TRUE(absl::SimpleHexAtoi(files["hash"], &from_files)) << files["hash"];
      EXPECT_EQ(hash, from_files) << "version " << version << " (" << files["rows"] << " rows)";
      std::printf(
          "version %llu (%s, chain %s): %s rows, hash %s\n",
          static_cast<unsigned long long>(version),
          resolved->manifest.kind() == checkpoint::CheckpointManifest::DELTA ? "delta" : "full",
          files["chain"].c_str(), files["rows"].c_str(), files["hash"].c_str());
    }
    return deltas;
  }

  void TearDown() override {
    if (replica_ != nullptr) {
      replica_->Signal(SIGTERM);
      auto code = replica_->Wait(absl::Seconds(30));
      EXPECT_TRUE(code.ok() && *code == 0)
          << "ps_replica did not exit cleanly: "
          << (code.ok() ? absl::StrCat("exit status ", *code) : code.status().ToString()) << "\n"
          << testing::ReadFile(job_->dir() + "/replica.log").substr(0, 20000);
    }
    if (job_ != nullptr) job_->KillAll();
  }

  grpc::Status Call(ReplicaStatusResponse* status) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Status(&ctx, ReplicaStatusRequest(), status);
  }
  grpc::Status Call(const PredictRequest& request, PredictResponse* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->Predict(&ctx, request, response);
  }
  grpc::Status Call(const LookupRequest& request, LookupResponse* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->Lookup(&ctx, request, response);
  }

  std::unique_ptr<SupervisedJob> job_;
  std::unique_ptr<Subprocess> replica_;
  std::string metrics_;  // The replica's metrics address.
  std::unique_ptr<Replica::Stub> stub_;
};

TEST_P(ReplicaProcessTest, FollowsTheCheckpointsExactly) {
  // Every version the replica serves while the job runs, until it serves
  // the job's last complete checkpoint after the job ended.
  std::map<uint64_t, uint64_t> hash_at;  // Version -> table hash.
  const uint64_t served =
      RecordUntil("the replica to serve the job's last checkpoint", &hash_at, [&](uint64_t v) {
        return job_->Ended() && v > 0 && v == testing::Checkpoints(job_->ckpt()).complete;
      });
  auto code = job_->WaitScheduler(absl::Minutes(1));
  ASSERT_TRUE(code.ok() && *code == 0) << job_->Logs();
  ASSERT_GE(hash_at.size(), 3u) << "the replica served fewer than 3 versions";
  ExpectStreamed(2);

  // The replica's hash at each version it served equals the hash of that
  // checkpoint's files; some of those versions are deltas.
  const int deltas = CheckHashes(hash_at);
  EXPECT_GE(deltas, 1) << "no delta checkpoint among the versions served";
  // Some of them were built from the version before plus a delta (the
  // hashes above hold for those too).
  const std::string metrics = Metrics();
  EXPECT_GE(Metric(metrics, "shardps_replica_versions_incremental_total"), 1)
      << "no version built incrementally\n"
      << metrics;
  // And some of those in place, on the model of the version before last.
  EXPECT_GE(Metric(metrics, "shardps_replica_versions_in_place_total"), 1)
      << "no version built in place\n"
      << metrics;

  // Rows evicted at any version served (a delta's deletions) and not
  // written again by the last version's chain are absent from the replica;
  // rows the last checkpoint wrote are there with the files' weights.
  auto last = checkpoint::LoadCheckpoint(job_->ckpt(), served);
  ASSERT_TRUE(last.ok()) << last.status();
  constexpr uint32_t kSparse = 1, kDim = 8;
  std::set<uint64_t> deleted;
  for (const auto& [version, hash] : hash_at) {
    auto resolved = checkpoint::LoadCheckpoint(job_->ckpt(), version);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    const Link link = ReadLink(resolved->dir, resolved->manifest, kSparse, kDim);
    deleted.insert(link.deleted.begin(), link.deleted.end());
  }
  std::vector<Link> chain;
  for (size_t i = 0; i < last->chain.size(); ++i) {
    chain.push_back(ReadLink(last->chain_dirs[i], last->chain[i], kSparse, kDim));
  }
  std::vector<uint64_t> evicted;
  for (uint64_t key : deleted) {
    bool present = false;  // Replaying the last chain: deletions, then rows.
    for (const Link& link : chain) {
      if (link.deleted.count(key) > 0) present = false;
      if (link.rows.count(key) > 0) present = true;
    }
    if (!present && evicted.size() < 1000) evicted.push_back(key);
  }
  ASSERT_FALSE(evicted.empty()) << "no row evicted (and not written again) in the "
                                << hash_at.size()
                                << " versions served (the server sweeps every 10 s)";
  LookupRequest gone;
  gone.set_table_id(kSparse);
  for (uint64_t key : evicted) gone.add_keys(key);
  LookupResponse gone_rows;
  ASSERT_TRUE(Call(gone, &gone_rows).ok());
  EXPECT_EQ(gone_rows.version(), served);
  ASSERT_EQ(gone_rows.found_size(), static_cast<int>(evicted.size()));
  for (int i = 0; i < gone_rows.found_size(); ++i) {
    EXPECT_FALSE(gone_rows.found(i)) << "evicted key " << evicted[i] << " is still served";
  }
  LookupRequest kept;
  kept.set_table_id(kSparse);
  std::vector<const std::vector<float>*> want;
  for (const auto& [key, weights] : chain.back().rows) {
    if (kept.keys_size() == 100) break;
    kept.add_keys(key);
    want.push_back(&weights);
  }
  ASSERT_GT(kept.keys_size(), 0);
  LookupResponse kept_rows;
  ASSERT_TRUE(Call(kept, &kept_rows).ok());
  ASSERT_EQ(kept_rows.dim(), kDim);
  ASSERT_EQ(kept_rows.values_size(), kept.keys_size() * static_cast<int>(kDim));
  for (int i = 0; i < kept.keys_size(); ++i) {
    EXPECT_TRUE(kept_rows.found(i)) << "key " << kept.keys(i);
    for (uint32_t d = 0; d < kDim; ++d) {
      EXPECT_EQ(kept_rows.values(i * kDim + d), (*want[i])[d]) << "key " << kept.keys(i);
    }
  }

  // Predict equals ps_score on the same checkpoint and lines.
  const std::vector<std::string> lines = Lines(EvalFile(), 64);
  ASSERT_EQ(lines.size(), 64u);
  const std::string data = job_->dir() + "/predict.tsv";
  std::ofstream(data) << absl::StrJoin(lines, "\n") << "\n";
  const std::string predictions = job_->dir() + "/predictions.txt";
  auto score =
      RunTool("worker/export/ps_score",
              {"--config=" + job_->config_path(), "--checkpoint_dir=" + job_->ckpt(),
               absl::StrCat("--clock=", served), "--data=" + data, "--predictions=" + predictions},
              "PS_SCORE_RESULT ", job_->dir() + "/ps_score.log");
  ASSERT_EQ(score["clock"], absl::StrCat(served))
      << testing::ReadFile(job_->dir() + "/ps_score.log");
  const std::vector<std::string> scored = Lines(predictions, 1000);
  ASSERT_EQ(scored.size(), lines.size());
  PredictRequest request;
  for (const std::string& line : lines) request.add_lines(line);
  PredictResponse response;
  grpc::Status st = Call(request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.version(), served);
  ASSERT_EQ(response.probabilities_size(), static_cast<int>(lines.size()));
  double max_diff = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    double want_p = 0;
    ASSERT_TRUE(absl::SimpleAtod(scored[i], &want_p)) << scored[i];
    EXPECT_NEAR(response.probabilities(static_cast<int>(i)), want_p, 1e-6) << "line " << i;
    max_diff = std::max(max_diff, std::abs(response.probabilities(static_cast<int>(i)) - want_p));
  }
  std::printf(
      "version %llu: %zu evicted keys absent, %d written keys served; Predict of %zu "
      "lines vs ps_score: max |diff| %.3g\n",
      static_cast<unsigned long long>(served), evicted.size(), kept.keys_size(), lines.size(),
      max_diff);

  // Bad requests: INVALID_ARGUMENT naming the line; nothing scored.
  PredictRequest bad;
  bad.add_lines(lines[0]);
  bad.add_lines("1\tnot a criteo line");
  st = Call(bad, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("line 1: "), std::string::npos) << st.error_message();
  PredictRequest too_many;
  for (int i = 0; i < 4097; ++i) too_many.add_lines(lines[0]);
  st = Call(too_many, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  LookupRequest no_table;
  no_table.set_table_id(99);
  no_table.add_keys(1);
  LookupResponse unused;
  st = Call(no_table, &unused);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
}

TEST_P(ReplicaProcessTest, FollowsARestartAndARollback) {
  std::map<uint64_t, uint64_t> hash_at;  // Version -> table hash, every replica.
  // Two versions, then the metrics say so.
  RecordUntil("two versions", &hash_at, [&](uint64_t) { return hash_at.size() >= 2; });
  const std::string early = Metrics();
  EXPECT_GE(Metric(early, "shardps_replica_versions_applied_total"), 2) << early;
  EXPECT_GT(Metric(early, "shardps_replica_version"), 0) << early;
  EXPECT_GT(Metric(early, "shardps_replica_version_rows"), 0) << early;
  EXPECT_GT(Metric(early, "shardps_replica_version_bytes"), 0) << early;
  EXPECT_GT(Metric(early, "shardps_replica_bytes_read_total"), 0) << early;
  EXPECT_GE(Metric(early, "shardps_replica_train_to_serve_seconds_count"), 2) << early;
  EXPECT_GT(Metric(early, "shardps_replica_train_to_serve_seconds_sum"), 0) << early;
  EXPECT_EQ(Metric(early, "shardps_replica_rollbacks_total"), 0) << early;

  // The replica SIGKILLed; started again with the same flags once a newer
  // checkpoint exists, it serves that one or a newer one at once.
  replica_->Signal(SIGKILL);
  auto killed = replica_->Wait(absl::Seconds(30));
  ASSERT_TRUE(killed.ok() && *killed == 128 + SIGKILL) << "ps_replica was not running";
  replica_.reset();
  const uint64_t before_kill = hash_at.rbegin()->first;
  const absl::Time deadline = absl::Now() + absl::Minutes(5);
  while (testing::Checkpoints(job_->ckpt()).complete <= before_kill) {
    ASSERT_FALSE(job_->Ended()) << "the job ended before a checkpoint after " << before_kill;
    ASSERT_LT(absl::Now(), deadline) << "no checkpoint after " << before_kill << job_->Logs();
    absl::SleepFor(absl::Milliseconds(20));
  }
  const uint64_t newest_at_restart = testing::Checkpoints(job_->ckpt()).complete;
  StartReplica();
  // It loads its first version before it listens: the first answer is it.
  ReplicaStatusResponse before_rollback;
  const uint64_t caught_up = Record(&hash_at, &before_rollback);
  EXPECT_GE(caught_up, newest_at_restart) << "the restarted replica did not catch up at once";
  std::printf("replica killed at version %llu, restarted: serves %llu (newest at restart %llu)\n",
              static_cast<unsigned long long>(before_kill),
              static_cast<unsigned long long>(caught_up),
              static_cast<unsigned long long>(newest_at_restart));

  // The server SIGKILLed 5 clocks past a checkpoint and started again: the
  // job rolls back to that checkpoint, in a new generation.
  auto mid = job_->WaitFor(
      "5 clocks past the newest complete checkpoint",
      [&](const JobStatusResponse& s) {
        const testing::CheckpointState c = testing::Checkpoints(job_->ckpt());
        return !c.writing && c.complete > 0 && s.min_clock() >= c.complete + 5;
      },
      absl::Minutes(5));
  ASSERT_TRUE(mid.ok()) << mid.status() << job_->Logs();
  // The versions so far were cut in the job's generation before the kill
  // (their MANIFESTs say so).
  EXPECT_GT(before_rollback.generation(), 0u);
  EXPECT_EQ(before_rollback.generation(), mid->generation());
  job_->sup().Signal(job_->server(0), SIGKILL);
  auto server_killed = job_->sup().WaitFinal(job_->server(0), absl::Seconds(30));
  ASSERT_TRUE(server_killed.ok() && *server_killed == 128 + SIGKILL)
      << "the server was not running";
  // No cut completes without the server: this is the point restored.
  const uint64_t restore_point = testing::Checkpoints(job_->ckpt()).complete;
  ASSERT_TRUE(job_->sup().Restart(job_->server(0)).ok()) << job_->Logs();
  auto rolled = job_->WaitFor(
      "the rollback",
      [&](const JobStatusResponse& s) {
        bool complete = !s.recoveries().empty();
        for (const auto& r : s.recoveries()) complete &= r.complete();
        return s.generation() > mid->generation() && complete;
      },
      absl::Minutes(5));
  ASSERT_TRUE(rolled.ok()) << rolled.status() << job_->Logs();

  // The replica follows the job to its end.
  const uint64_t last =
      RecordUntil("the replica to serve the job's last checkpoint", &hash_at, [&](uint64_t v) {
        return job_->Ended() && v > 0 && v == testing::Checkpoints(job_->ckpt()).complete;
      });
  auto code = job_->WaitScheduler(absl::Minutes(1));
  ASSERT_TRUE(code.ok() && *code == 0) << job_->Logs();
  const std::string log = job_->SchedulerLog();
  const size_t restored = log.find("every server restored the checkpoint ");
  ASSERT_NE(restored, std::string::npos) << "no rollback\n" << log;
  const std::string restored_line = log.substr(restored, log.find('\n', restored) - restored);
  EXPECT_NE(restored_line.find(checkpoint::CheckpointId(restore_point) + " "), std::string::npos)
      << "not a rollback to " << restore_point << ": " << restored_line;
  EXPECT_GT(last, restore_point);
  EXPECT_GT(hash_at.rbegin()->first, restore_point) << "no post-rollback version served";
  ReplicaStatusResponse status;
  Record(&hash_at, &status);
  EXPECT_EQ(status.rollbacks(), 0u) << "the restore point was complete: nothing to move back to";
  // (A replica on the stream lists the directory only to load a checkpoint.)
  if (!GetParam()) {
    EXPECT_EQ(status.newest_checkpoint(), last);
  }
  // The post-rollback versions are of the new generation.
  EXPECT_EQ(status.generation(), rolled->generation());
  EXPECT_GT(status.generation(), before_rollback.generation());
  CheckHashes(hash_at);
  std::printf("rollback to %llu; the replica served %zu versions, the last %llu\n",
              static_cast<unsigned long long>(restore_point), hash_at.size(),
              static_cast<unsigned long long>(last));

  ExpectStreamed(2);
  // The rest is about files: a replica on the stream serves the trainer's
  // state at each cut, whatever happens to the checkpoint written from it
  // later, and reads files only to load a checkpoint.
  if (GetParam()) return;
  // The newest checkpoint set aside as the scheduler does with a corrupt one
  // on a rollback: the replica moves back to the one before it.
  auto entries = checkpoint::ListCheckpoints(job_->ckpt());
  ASSERT_TRUE(entries.ok());
  uint64_t previous = 0;
  for (const auto& e : *entries) {
    if (e.clock < last && std::filesystem::exists(e.dir + "/MANIFEST")) previous = e.clock;
  }
  ASSERT_GT(previous, 0u);
  std::filesystem::rename(checkpoint::CheckpointPath(job_->ckpt(), last),
                          checkpoint::CheckpointPath(job_->ckpt(), last) + ".corrupt-1");
  const uint64_t back = RecordUntil("the replica to move back to " + std::to_string(previous),
                                    &hash_at, [&](uint64_t v) { return v == previous; });
  Record(&hash_at, &status);
  EXPECT_EQ(back, previous);
  EXPECT_EQ(status.rollbacks(), 1u);
  EXPECT_EQ(status.newest_checkpoint(), previous);
  EXPECT_EQ(status.generation(), rolled->generation()) << "checkpoint " << previous;
  CheckHashes(std::map<uint64_t, uint64_t>{{previous, status.table_hash()}});

  PredictRequest request;
  for (const std::string& line : Lines(EvalFile(), 16)) request.add_lines(line);
  PredictResponse response;
  grpc::Status st = Call(request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.version(), previous);
  const std::string late = Metrics();
  EXPECT_EQ(Metric(late, "shardps_replica_version"), static_cast<double>(previous)) << late;
  EXPECT_EQ(Metric(late, "shardps_replica_newest_checkpoint"), static_cast<double>(previous))
      << late;
  EXPECT_EQ(Metric(late, "shardps_replica_version_lag"), 0) << late;
  EXPECT_EQ(Metric(late, "shardps_replica_rollbacks_total"), 1) << late;
  EXPECT_EQ(Metric(late, "shardps_replica_versions_applied_total"),
            static_cast<double>(status.versions_applied()))
      << late;
  EXPECT_EQ(Metric(late, "shardps_replica_train_to_serve_seconds_count"),
            static_cast<double>(status.versions_applied()))
      << late;
  EXPECT_EQ(Metric(late, "shardps_replica_predict_seconds_count"), 1) << late;
  EXPECT_EQ(Metric(late, "shardps_replica_predict_lines_total"), 16) << late;
  std::printf("train-to-serve over %g versions: mean %.3f s\n",
              Metric(late, "shardps_replica_train_to_serve_seconds_count"),
              Metric(late, "shardps_replica_train_to_serve_seconds_sum") /
                  Metric(late, "shardps_replica_train_to_serve_seconds_count"));
}

}  // namespace
// A replica that stops reading (SIGSTOP: a stuck or overloaded serving
// host) does not hold training back: the job cuts 9 more checkpoints while
// it is stopped (on the stream the servers' sending threads wait, the
// parts it lacks leave their logs). Resumed (SIGCONT), it catches up: on the
// stream by loading a checkpoint (the first part it gets does not continue
// its version, or the stream is gone with the job), on the files by its
// next poll; it ends on the job's last checkpoint, hash-equal at every
// version.
TEST_P(ReplicaProcessTest, AStoppedReplicaDoesNotHoldTrainingBack) {
  std::map<uint64_t, uint64_t> hash_at;
  const uint64_t first = RecordUntil("a version", &hash_at, [](uint64_t v) { return v > 0; });
  replica_->Signal(SIGSTOP);
  auto ahead = job_->WaitFor(
      "9 more checkpoints while the replica is stopped",
      [&](const JobStatusResponse&) {
        return testing::Checkpoints(job_->ckpt()).complete >= first + 90;
      },
      absl::Minutes(5));
  replica_->Signal(SIGCONT);
  ASSERT_TRUE(ahead.ok()) << ahead.status() << job_->Logs();
  const uint64_t last =
      RecordUntil("the replica to serve the job's last checkpoint", &hash_at, [&](uint64_t v) {
        return job_->Ended() && v > 0 && v == testing::Checkpoints(job_->ckpt()).complete;
      });
  auto code = job_->WaitScheduler(absl::Minutes(1));
  ASSERT_TRUE(code.ok() && *code == 0) << job_->Logs();
  CheckHashes(hash_at);
  ReplicaStatusResponse status;
  Record(&hash_at, &status);
  std::printf(
      "stopped at version %llu, resumed with checkpoint %llu complete; served %llu at the "
      "end (%llu loads of a checkpoint to follow the stream again)\n",
      static_cast<unsigned long long>(first),
      static_cast<unsigned long long>(ahead.ok() ? first + 90 : 0),
      static_cast<unsigned long long>(last), static_cast<unsigned long long>(status.resyncs()));
}

// Versions between checkpoints (checkpoint.version_every_steps): the job
// checkpoints every 30 clocks and cuts a version for the stream every 5
// (the servers copy and publish, no files). The replica, with
// --verify_stream, compares each stream version it builds with the
// servers' hash of their rows at the cut before serving it. It serves
// versions that exist only on the stream, each verified (and none refused);
// at the versions that are checkpoints, its hash also equals ps_table_hash
// of the files, so the servers' hash is the files' hash too.
class ReplicaVersionsTest : public ReplicaProcessTest {
 protected:
  std::string JobConfigText() const override {
    return absl::StrReplaceAll(Config(),
                               {{"every_steps: 10", "every_steps: 30 version_every_steps: 5"}});
  }
  std::vector<std::string> ExtraReplicaFlags() const override { return {"--verify_stream"}; }
};

TEST_P(ReplicaVersionsTest, VersionsBetweenCheckpointsAreTheTrainersState) {
  std::map<uint64_t, uint64_t> hash_at;
  RecordUntil("the replica to serve the job's last checkpoint", &hash_at, [&](uint64_t v) {
    return job_->Ended() && v > 0 && v == testing::Checkpoints(job_->ckpt()).complete;
  });
  auto code = job_->WaitScheduler(absl::Minutes(1));
  ASSERT_TRUE(code.ok() && *code == 0) << job_->Logs();
  std::vector<uint64_t> versions_only;
  CheckHashes(hash_at, &versions_only);
  ASSERT_GE(versions_only.size(), 3u)
      << "fewer than 3 versions served that are no checkpoint\n"
      << testing::ReadFile(job_->dir() + "/replica.log") << job_->Logs();
  for (uint64_t v : versions_only) {
    EXPECT_EQ(v % 5, 0u) << "version " << v << " is no multiple of version_every_steps";
    EXPECT_NE(v % 30, 0u) << "checkpoint " << v << " has no files";
  }
  ReplicaStatusResponse status;
  Record(&hash_at, &status);
  EXPECT_EQ(status.hash_mismatches(), 0u) << testing::ReadFile(job_->dir() + "/replica.log");
  // Every version served from the stream was verified (the first ones may
  // have been cut before the replica asked for hashes).
  EXPECT_GE(status.verified_versions(), versions_only.size());
  EXPECT_GE(status.stream_versions(), versions_only.size());
  EXPECT_NE(job_->SchedulerLog().find("(no files)"), std::string::npos)
      << "no version-only cut logged";
  // The servers stamped their pushes, and the replica timed them from the
  // apply to the version that showed them.
  EXPECT_GT(status.pushes_timed(), 0u);
  EXPECT_GT(status.push_to_serve_p50_seconds(), 0);
  EXPECT_LE(status.push_to_serve_p50_seconds(), status.push_to_serve_p99_seconds());
  EXPECT_LE(status.push_to_serve_p99_seconds(), status.push_to_serve_max_seconds());
  std::printf(
      "%zu versions served, %zu of them on the stream only; %llu verified against the "
      "servers' hash, %llu mismatches; %llu pushes timed, push to serve p50 %.3f s max %.3f s\n",
      hash_at.size(), versions_only.size(),
      static_cast<unsigned long long>(status.verified_versions()),
      static_cast<unsigned long long>(status.hash_mismatches()),
      static_cast<unsigned long long>(status.pushes_timed()), status.push_to_serve_p50_seconds(),
      status.push_to_serve_max_seconds());
}

INSTANTIATE_TEST_SUITE_P(Stream, ReplicaVersionsTest, ::testing::Values(true),
                         [](const ::testing::TestParamInfo<bool>&) { return "Stream"; });

INSTANTIATE_TEST_SUITE_P(FilesOrStream, ReplicaProcessTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Stream" : "Files";
                         });

}  // namespace shardps
