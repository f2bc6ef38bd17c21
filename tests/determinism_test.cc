// Exactness: PS training in BSP is bit-for-bit the single-machine baseline
// (1 worker, 1 server), a 2x2 BSP job is bit-reproducible, and a 1-worker
// SSP job with prefetch is bit-for-bit the same job without prefetch
// (read-your-own-writes prefetch, worker/trainer_split_pull.h).
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::ManualJob;
using testing::ReadFile;
using testing::SupervisedJob;
constexpr auto Dir = testing::TestDir;

// The job's tables and model: testing::kSmallDlrmTables with its own sparse
// optimizer, its own dense optimizer.
std::string Tables() {
  testing::SmallDlrm t;
  t.sparse_optimizer = "adam { learning_rate: 0.01 }";
  t.dense_optimizer = "sgd { learning_rate: 0.05 momentum: 0.5 }";
  return testing::SmallDlrmTables(t);
}

constexpr char kConfig[] = R"pb(
name: "exact"
data { format: CRITEO synthetic_dir: "@DATA@" }
training {
  batch_size: 128 epochs: 2 shuffle_seed: 7 intra_op_threads: 1 prefetch: @PREFETCH@
  lr_schedule { warmup_steps: 20 decay: COSINE min_scale: 0.1 }
}
cluster {
  num_servers: @SERVERS@ num_workers: @WORKERS@ num_partitions: 256 mode: @MODE@
  heartbeat_ms: 200 dead_after_ms: 3000
}
)pb";

// `mode`: the cluster's mode field and what follows it (e.g. a staleness).
std::string Config(int servers, int workers, const std::string& mode = "BSP",
                   bool prefetch = true) {
  return Tables() + absl::StrReplaceAll(kConfig, {{"@DATA@", ::testing::TempDir() + "/exact_data"},
                                                  {"@SERVERS@", absl::StrCat(servers)},
                                                  {"@WORKERS@", absl::StrCat(workers)},
                                                  {"@MODE@", mode},
                                                  {"@PREFETCH@", prefetch ? "true" : "false"}});
}

class DeterminismTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(::testing::TempDir() + "/exact_data", 30000, 3000).ok());
  }
};

TEST_F(DeterminismTest, PsBspWithOneWorkerIsBitIdenticalToLocalMode) {
  const std::string config = Dir("parity") + "/local.pbtxt";
  std::ofstream(config) << Config(1, 1);
  const std::string local_losses = Dir("parity") + "/local_losses.txt";
  auto local =
      testing::RunLocal(config, {"--max_steps=220", "--checksum", "--loss_log=" + local_losses},
                        Dir("parity") + "/local.log");
  ASSERT_TRUE(local.ok()) << local.status();

  const std::string ps_losses = Dir("parity") + "/ps_losses.txt";
  SupervisedJob job(ManualJob("parity", Config(1, 1), 1, 1,
                              {"--max_steps=220", "--checksum", "--loss_log=" + ps_losses}));
  ASSERT_TRUE(job.Start().ok());
  auto code = job.WaitScheduler(absl::Minutes(10));
  ASSERT_TRUE(code.ok() && *code == 0) << job.Logs();
  auto workers = job.WaitWorkers(absl::Seconds(60));
  ASSERT_TRUE(workers.ok()) << workers.status();
  auto& ps = workers->at(0);

  EXPECT_EQ(ps["steps"], "220");
  EXPECT_EQ((*local)["steps"], "220");
  const std::string a = ReadFile(local_losses), b = ReadFile(ps_losses);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b) << "per-step losses differ between local and PS mode";
  ASSERT_EQ((*local)["checksum"].size(), 16u);
  EXPECT_EQ((*local)["checksum"], ps["checksum"]) << "final weights differ";
  EXPECT_EQ((*local)["eval_auc"], ps["eval_auc"]);
}

TEST_F(DeterminismTest, TwoBspJobsEndWithBitIdenticalWeights) {
  std::map<int, std::string> first;
  std::string first_auc;
  for (int run = 0; run < 2; ++run) {
    const std::string name = absl::StrCat("bsp_run", run);
    SupervisedJob job(ManualJob(name, Config(2, 2), 2, 2, {"--max_steps=120", "--checksum"}));
    ASSERT_TRUE(job.Start().ok());
    auto code = job.WaitScheduler(absl::Minutes(10));
    ASSERT_TRUE(code.ok() && *code == 0) << job.Logs();
    auto workers = job.WaitWorkers(absl::Seconds(60));
    ASSERT_TRUE(workers.ok()) << workers.status();
    ASSERT_EQ(workers->size(), 2u) << job.Logs();
    for (auto& [rank, result] : *workers) {
      ASSERT_NE(result["checksum"], "") << rank;
      if (run == 0) {
        first[rank] = result["checksum"];
      } else {
        EXPECT_EQ(result["checksum"], first[rank]) << "worker " << rank << "'s rows differ";
      }
    }
    const std::string auc = testing::ParseResult(job.SchedulerResult())["eval_auc"];
    if (run == 0)
      first_auc = auc;
    else
      EXPECT_EQ(auc, first_auc);
  }
}

// One worker's only staleness is its own: with read-your-own-writes
// prefetch every step sees all its earlier pushes, so SSP with prefetch
// (pulls split around each push, pushes asynchronous, two servers) trains
// exactly as without it.
TEST_F(DeterminismTest, SspPrefetchWithOneWorkerIsBitIdenticalToNoPrefetch) {
  std::map<bool, std::map<std::string, std::string>> results;
  std::map<bool, std::string> losses;
  for (const bool prefetch : {false, true}) {
    const std::string name = prefetch ? "ssp_prefetch" : "ssp_sync";
    const std::string loss_log = Dir(name) + "/losses.txt";
    SupervisedJob job(ManualJob(name, Config(2, 1, "SSP staleness: 2", prefetch), 2, 1,
                                {"--max_steps=220", "--checksum", "--loss_log=" + loss_log}));
    ASSERT_TRUE(job.Start().ok());
    auto code = job.WaitScheduler(absl::Minutes(10));
    ASSERT_TRUE(code.ok() && *code == 0) << job.Logs();
    auto workers = job.WaitWorkers(absl::Seconds(60));
    ASSERT_TRUE(workers.ok()) << workers.status();
    ASSERT_EQ(workers->size(), 1u) << job.Logs();
    results[prefetch] = (*workers)[0];
    losses[prefetch] = ReadFile(loss_log);
  }
  EXPECT_EQ(results[true]["steps"], "220");
  ASSERT_FALSE(losses[false].empty());
  EXPECT_EQ(losses[true], losses[false]) << "per-step losses differ";
  ASSERT_EQ(results[false]["checksum"].size(), 16u);
  EXPECT_EQ(results[true]["checksum"], results[false]["checksum"]) << "final weights differ";
  EXPECT_EQ(results[true]["eval_auc"], results[false]["eval_auc"]);
}

}  // namespace
}  // namespace shardps
