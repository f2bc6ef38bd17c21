// A serving replica following a real job (issue 34, first slice): a
// 1-server/1-worker BSP job checkpoints every 10 steps with delta checkpoints
// and eviction on; ps_replica follows its checkpoint directory from the
// start. The test records every version the replica serves (Status) and
// checks, for each, that the replica's table hash equals ps_table_hash's,
// computed from that checkpoint's files alone. At the last version: rows
// evicted in the chain's deltas (and not written again) are absent from
// Lookup while rows the last link wrote are present with the files'
// weights; Predict equals ps_score on the same checkpoint and lines to 6
// digits; bad requests get INVALID_ARGUMENT naming the line.
//
// The worker sleeps 150 ms a step (--step_delay_ms): the job's 157 steps
// then last over 20 s, long enough for the replica (polling every 50 ms) to
// serve several versions and for the server's eviction sweep, which runs
// every 10 s (server/ps_server.h), to evict idle rows during the job. A
// slower machine only makes the job longer. The test fails by name if it
// saw fewer than three versions or no eviction.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
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
      if (b.table_id() != table_id) continue;
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

class ReplicaProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 20000, 2000).ok());
    job_ = std::make_unique<SupervisedJob>(
        testing::ManualJob("replica", Config(), 1, 1, {"--step_delay_ms=150"}));
    ASSERT_TRUE(job_->Start().ok()) << job_->Logs();
    ASSERT_TRUE(replica_
                    .Start({RunfilePath("replica/ps_replica"), "--config=" + job_->config_path(),
                            "--checkpoint_dir=" + job_->ckpt(), "--poll_ms=50"},
                           job_->dir() + "/replica.log")
                    .ok());
    auto listening = replica_.WaitForLine("PS_REPLICA_LISTENING ", absl::Minutes(2));
    ASSERT_TRUE(listening.ok()) << listening.status()
                                << testing::ReadFile(job_->dir() + "/replica.log");
    stub_ = Replica::NewStub(grpc::CreateChannel(
        std::string(absl::StripAsciiWhitespace(*listening)), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    replica_.Signal(SIGTERM);
    auto code = replica_.Wait(absl::Seconds(30));
    EXPECT_TRUE(code.ok() && *code == 0) << "ps_replica did not exit cleanly";
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
  Subprocess replica_;
  std::unique_ptr<Replica::Stub> stub_;
};

TEST_F(ReplicaProcessTest, FollowsTheCheckpointsExactly) {
  // Every version the replica serves while the job runs, until it serves
  // the job's last complete checkpoint after the job ended.
  std::map<uint64_t, uint64_t> hash_at;  // Version -> table hash.
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  uint64_t served = 0;
  while (true) {
    ReplicaStatusResponse status;
    grpc::Status st = Call(&status);
    ASSERT_TRUE(st.ok()) << st.error_message();
    if (status.loaded()) {
      served = status.version();
      auto [it, inserted] = hash_at.emplace(served, status.table_hash());
      EXPECT_EQ(it->second, status.table_hash()) << "version " << served << " changed its hash";
      EXPECT_TRUE(status.last_error().empty()) << status.last_error();
    }
    const bool ended = job_->Ended();
    if (ended && served > 0 && served == testing::Checkpoints(job_->ckpt()).complete) break;
    ASSERT_LT(absl::Now(), deadline)
        << "waited for the replica to serve the job's last checkpoint ("
        << testing::Checkpoints(job_->ckpt()).complete << "); serving " << served
        << (ended ? "" : "; the job has not ended") << "\n"
        << testing::ReadFile(job_->dir() + "/replica.log") << job_->Logs();
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto code = job_->WaitScheduler(absl::Minutes(1));
  ASSERT_TRUE(code.ok() && *code == 0) << job_->Logs();
  ASSERT_GE(hash_at.size(), 3u) << "the replica served fewer than 3 versions";

  // The replica's hash at each version it served equals the hash of that
  // checkpoint's files; some of those versions are deltas.
  int deltas = 0;
  for (const auto& [version, hash] : hash_at) {
    auto resolved = checkpoint::LoadCheckpoint(job_->ckpt(), version);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    if (resolved->manifest.kind() == checkpoint::CheckpointManifest::DELTA) ++deltas;
    auto files = RunTool("replica/ps_table_hash",
                         {"--checkpoint_dir=" + job_->ckpt(), absl::StrCat("--clock=", version)},
                         "PS_TABLE_HASH ", job_->dir() + "/table_hash.log");
    ASSERT_EQ(files.count("hash"), 1u) << testing::ReadFile(job_->dir() + "/table_hash.log");
    uint64_t from_files = 0;
    ASSERT_TRUE(absl::SimpleHexAtoi(files["hash"], &from_files)) << files["hash"];
    EXPECT_EQ(hash, from_files) << "version " << version << " (" << files["rows"] << " rows)";
    std::printf(
        "version %llu (%s, chain %s): %s rows, hash %s\n", static_cast<unsigned long long>(version),
        resolved->manifest.kind() == checkpoint::CheckpointManifest::DELTA ? "delta" : "full",
        files["chain"].c_str(), files["rows"].c_str(), files["hash"].c_str());
  }
  EXPECT_GE(deltas, 1) << "no delta checkpoint among the versions served";

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

}  // namespace
}  // namespace shardps
