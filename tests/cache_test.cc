// The worker's embedding cache (training.cache, worker/embedding_cache.h)
// with real processes: inert in BSP (a 2x2 BSP job with the cache ends with
// the bits of one without it); with one worker, whose cached rows are
// exactly the servers' (its own pushes applied to them), an SSP(2) job with
// prefetch is bit-identical to the same job without the cache and pulls
// fewer embedding bytes; with two workers the hits stay within the bound.
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::ReadFile;
using testing::SupervisedJob;
constexpr auto Dir = testing::TestDir;
using Result = std::map<std::string, std::string>;

// Row-wise Adagrad (one float of state a row) for the embeddings, as the
// default job; Adam for the MLP.
// The job's tables and model: testing::kSmallDlrmTables with its own sparse
// optimizer.
std::string Tables() {
  testing::SmallDlrm t;
  t.sparse_optimizer = "rowwise_adagrad { learning_rate: 0.1 initial_accumulator: 3e-6 }";
  return testing::SmallDlrmTables(t);
}

constexpr char kConfig[] = R"pb(
name: "cache"
data { format: CRITEO synthetic_dir: "@DATA@" }
training {
  batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 prefetch: true
  lr_schedule { warmup_steps: 20 }
  @CACHE@
}
cluster {
  num_servers: 2 num_workers: @WORKERS@ num_partitions: 256 mode: @MODE@
  heartbeat_ms: 200 dead_after_ms: 3000
}
)pb";

std::string Config(int workers, const std::string& mode, bool cache) {
  return Tables() +
         absl::StrReplaceAll(kConfig, {{"@DATA@", ::testing::TempDir() + "/cache_data"},
                                       {"@WORKERS@", absl::StrCat(workers)},
                                       {"@MODE@", mode},
                                       {"@CACHE@", cache ? "cache { max_rows: 200000 }" : ""}});
}

uint64_t Number(const Result& r, const std::string& key) {
  uint64_t v = 0;
  const auto it = r.find(key);
  EXPECT_TRUE(it != r.end() && absl::SimpleAtoi(it->second, &v)) << key << " missing";
  return v;
}

// The cache's fields of a PS_WORKER_RESULT, for the test's log.
std::string CacheFields(const Result& r) {
  std::string out;
  for (const auto& [key, value] : r) {
    if (key.rfind("cache_", 0) == 0 || key == "pull_bytes_sparse") {
      absl::StrAppend(&out, " ", key, "=", value);
    }
  }
  return out;
}

double Real(const Result& r, const std::string& key) {
  double v = 0;
  const auto it = r.find(key);
  EXPECT_TRUE(it != r.end() && absl::SimpleAtod(it->second, &v)) << key << " missing";
  return v;
}

// One job to its end: the workers' PS_WORKER_RESULT by rank, the servers'
// weights checksum and the job's AUC.
struct Job {
  std::map<int, Result> workers;
  uint64_t servers_checksum = 0;
  std::string eval_auc;
};

Job RunJob(const std::string& name, int workers, const std::string& mode, bool cache,
           const std::vector<std::string>& flags) {
  Job out;
  SupervisedJob job(testing::ManualJob(name, Config(workers, mode, cache), 2, workers, flags));
  EXPECT_TRUE(job.Start().ok()) << job.Logs();
  auto code = job.WaitScheduler(absl::Minutes(10));
  EXPECT_TRUE(code.ok() && *code == 0) << job.Logs();
  auto results = job.WaitWorkers(absl::Seconds(60));
  EXPECT_TRUE(results.ok()) << results.status();
  if (results.ok()) out.workers = *results;
  EXPECT_EQ(out.workers.size(), static_cast<size_t>(workers)) << job.Logs();
  auto checksum = job.WaitServersChecksum(absl::Seconds(60));
  EXPECT_TRUE(checksum.ok()) << checksum.status();
  if (checksum.ok()) out.servers_checksum = *checksum;
  out.eval_auc = testing::ParseResult(job.SchedulerResult())["eval_auc"];
  return out;
}

class CacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(::testing::TempDir() + "/cache_data", 30000, 3000).ok());
  }
};

// BSP has staleness 0: a cached row could serve no step, and the cache is
// off. The job takes the same steps and ends with the same bits.
TEST_F(CacheTest, BspWithTheCacheIsBitIdenticalToWithout) {
  std::map<bool, Job> jobs;
  for (const bool cache : {false, true}) {
    const std::string name = cache ? "bsp_cache" : "bsp_plain";
    jobs[cache] = RunJob(name, 2, "BSP", cache, {"--max_steps=100", "--checksum"});
  }
  for (int rank = 0; rank < 2; ++rank) {
    Result& plain = jobs[false].workers[rank];
    Result& cached = jobs[true].workers[rank];
    ASSERT_EQ(plain["checksum"].size(), 16u) << rank;
    EXPECT_EQ(cached["checksum"], plain["checksum"]) << "worker " << rank << "'s rows differ";
    EXPECT_EQ(cached["steps"], "100");
    EXPECT_EQ(cached["pull_bytes_sparse"], plain["pull_bytes_sparse"]) << rank;
    EXPECT_EQ(cached.count("cache_hit_rate"), 0u) << "the cache ran in BSP";
  }
  EXPECT_NE(jobs[false].servers_checksum, 0u);
  EXPECT_EQ(jobs[true].servers_checksum, jobs[false].servers_checksum);
  ASSERT_FALSE(jobs[false].eval_auc.empty());
  EXPECT_EQ(jobs[true].eval_auc, jobs[false].eval_auc);
}

// One worker: the job's minimum clock is its own, so its cached rows are
// exactly the servers' (read with their optimizer state, its pushes applied
// with the servers' optimizer). SSP(2) with prefetch and the cache trains
// bit for bit as without the cache, over gRPC with two servers and the
// scheduler's clocks, and pulls fewer embedding rows.
TEST_F(CacheTest, SspWithOneWorkerIsBitIdenticalAndPullsFewerEmbeddingBytes) {
  std::map<bool, Result> results;
  std::map<bool, std::string> losses;
  std::map<bool, uint64_t> servers;
  for (const bool cache : {false, true}) {
    const std::string name = cache ? "ssp1_cache" : "ssp1_plain";
    const std::string loss_log = Dir(name) + "/losses.txt";
    Job job = RunJob(name, 1, "SSP staleness: 2", cache,
                     {"--max_steps=200", "--checksum", "--loss_log=" + loss_log});
    results[cache] = job.workers[0];
    losses[cache] = ReadFile(loss_log);
    servers[cache] = job.servers_checksum;
  }
  Result& plain = results[false];
  Result& cached = results[true];
  std::printf("without the cache:%s\nwith the cache:%s\n", CacheFields(plain).c_str(),
              CacheFields(cached).c_str());
  EXPECT_EQ(cached["steps"], "200");
  ASSERT_FALSE(losses[false].empty());
  EXPECT_EQ(losses[true], losses[false]) << "per-step losses differ";
  ASSERT_EQ(plain["checksum"].size(), 16u);
  EXPECT_EQ(cached["checksum"], plain["checksum"]) << "final weights differ";
  EXPECT_EQ(servers[true], servers[false]);
  EXPECT_EQ(cached["eval_auc"], plain["eval_auc"]);
  // Hits are rows not pulled; the misses carry one float of state more.
  const uint64_t saved = Number(cached, "cache_bytes_saved");
  EXPECT_GT(Number(cached, "cache_rows_saved"), 0u);
  EXPECT_GT(Real(cached, "cache_hit_rate"), 0.05);
  EXPECT_LE(Number(cached, "cache_hit_staleness_max"), 2u);
  EXPECT_LT(Number(cached, "pull_bytes_sparse"), Number(plain, "pull_bytes_sparse"));
  EXPECT_GT(saved, Number(cached, "cache_state_bytes"));
}

// Two workers in SSP(2): every hit is within the bound (a row read when the
// minimum clock was m serves steps <= m + 2), the job ends done.
TEST_F(CacheTest, SspWithTwoWorkersServesHitsWithinTheBound) {
  Job job = RunJob("ssp2_cache", 2, "SSP staleness: 2", true, {"--max_steps=100"});
  ASSERT_FALSE(job.eval_auc.empty());
  for (auto& [rank, r] : job.workers) {
    std::printf("worker %d:%s\n", rank, CacheFields(r).c_str());
    EXPECT_EQ(r["steps"], "100") << rank;
    EXPECT_GT(Number(r, "cache_rows_saved"), 0u) << rank;
    EXPECT_LE(Number(r, "cache_hit_staleness_max"), 2u) << rank;
    EXPECT_LE(Real(r, "cache_hit_staleness_mean"), 2.0) << rank;
  }
}

}  // namespace
}  // namespace shardps
