// Whole jobs of real processes: scheduler, 2 servers, 2 workers on
// 127.0.0.1, on generated Criteo-format data, in every consistency mode.
#include <sys/stat.h>

#include <csignal>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::SupervisedJob;

// Small enough for 2 cores, big enough that AUC means something.
constexpr uint64_t kTrainLines = 40000;
constexpr uint64_t kEvalLines = 10000;

// The job's tables and model (tests/testing/job_util.h).
std::string Tables() { return testing::WideSmallDlrmTables(); }

constexpr char kConfig[] = R"pb(
name: "e2e"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 256 epochs: 2 shuffle_seed: 7 prefetch: @PREFETCH@ intra_op_threads: 1 }
cluster {
  num_servers: @SERVERS@ num_workers: @WORKERS@ num_partitions: 256
  @MODE@
  heartbeat_ms: 200 dead_after_ms: 1500 server_deadline_ms: 20000
}
)pb";

std::string DataDir() { return ::testing::TempDir() + "/e2e_data"; }

std::string Config(const std::string& mode, int servers, int workers, bool prefetch = true) {
  return Tables() + absl::StrReplaceAll(kConfig, {{"@DATA@", DataDir()},
                                                  {"@MODE@", mode},
                                                  {"@SERVERS@", absl::StrCat(servers)},
                                                  {"@WORKERS@", absl::StrCat(workers)},
                                                  {"@PREFETCH@", prefetch ? "true" : "false"}});
}

class E2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), kTrainLines, kEvalLines).ok());
    // The single-machine baseline on the same data.
    const std::string config = ::testing::TempDir() + "/local.pbtxt";
    std::ofstream(config) << Config("mode: BSP", 1, 1);
    auto local = testing::RunLocal(config, {}, ::testing::TempDir() + "/local.log");
    ASSERT_TRUE(local.ok()) << local.status();
    local_auc_ = std::stod((*local)["eval_auc"]);
    ASSERT_GT(local_auc_, 0.70) << "local mode did not learn";
  }

  // Runs a 2x2 job; returns the scheduler's PS_JOB_RESULT fields.
  std::map<std::string, std::string> RunJob(const std::string& name, const std::string& mode,
                                            std::map<int, std::vector<std::string>> per_worker = {},
                                            std::function<void(SupervisedJob&)> during = nullptr,
                                            bool prefetch = true) {
    SupervisedJob::Options o = testing::ManualJob(name, Config(mode, 2, 2, prefetch), 2, 2);
    o.per_worker = std::move(per_worker);
    SupervisedJob job(std::move(o));
    EXPECT_TRUE(job.Start().ok());
    if (during) during(job);
    auto code = job.WaitScheduler(absl::Minutes(10));
    EXPECT_TRUE(code.ok() && *code == 0) << job.Logs();
    (void)job.WaitWorkers(absl::Seconds(30));
    auto result = testing::ParseResult(job.SchedulerResult());
    if (result["state"] != "done") ADD_FAILURE() << job.Logs();
    return result;
  }

  static double local_auc_;
};

double E2eTest::local_auc_ = 0;

TEST_F(E2eTest, BspJobMatchesLocalAuc) {
  auto r = RunJob("bsp", "mode: BSP");
  EXPECT_EQ(r["state"], "done");
  EXPECT_NEAR(std::stod(r["eval_auc"]), local_auc_, 0.02);
  EXPECT_EQ(r["max_spread"], "1");  // BSP: completed clocks differ by <= 1.
}

TEST_F(E2eTest, Ssp2JobMatchesLocalAucAndKeepsTheBound) {
  // Worker 1 is slowed down: worker 0 must wait for it at the bound.
  // With prefetch (read-your-own-writes: no staleness of a worker's own).
  auto r = RunJob("ssp", "mode: SSP staleness: 2", {{1, {"--step_delay_ms=15"}}});
  EXPECT_EQ(r["state"], "done");
  EXPECT_NEAR(std::stod(r["eval_auc"]), local_auc_, 0.02);
  EXPECT_LE(std::stoi(r["max_spread"]), 3);  // s + 1
  EXPECT_GE(std::stoi(r["max_spread"]), 2);  // ...and the fast worker did run ahead.
}

// With prefetch. Before read-your-own-writes prefetch, a prefetched step
// missed the worker's own previous push, and this job ended more than 0.02
// AUC below local in 4 of 9 runs (lowest 0.697 against 0.748).
TEST_F(E2eTest, AspJobMatchesLocalAucAndNeverWaits) {
  auto r = RunJob("asp", "mode: ASP", {{1, {"--step_delay_ms=15"}}});
  EXPECT_EQ(r["state"], "done");
  EXPECT_NEAR(std::stod(r["eval_auc"]), local_auc_, 0.02);
  EXPECT_GT(std::stoi(r["max_spread"]), 3);  // The fast worker was not held back.
}

// cluster.on_worker_loss DROP: worker 1 is SIGKILLed and not restarted.
// Worker 1 steps slowly (--step_delay_ms, over its ~156 steps), so that the
// kill lands mid-job on any machine: it comes once the scheduler has seen
// worker 1 complete kKillAt steps. The SIGKILL must find it running (exit by
// the signal, not a worker that had already finished), the scheduler must
// declare it dead, and worker 0 must then train past the SSP(1) bound
// around worker 1's last clock (k + s + 1), which it could not were the dead
// worker still in the minimum; the job ends done, saying what it left
// untrained.
TEST_F(E2eTest, KilledWorkerLeavesTheMinimumAndTheJobFinishes) {
  constexpr uint64_t kKillAt = 20;
  uint64_t killed_at = 0;
  auto r = RunJob(
      "kill", "mode: SSP staleness: 1 on_worker_loss: DROP", {{1, {"--step_delay_ms=40"}}},
      [&killed_at](SupervisedJob& c) {
        auto status = c.WaitFor(
            absl::StrCat("worker 1 to complete ", kKillAt, " steps"),
            [](const JobStatusResponse& s) { return testing::WorkerClock(s, 1) >= kKillAt; },
            absl::Minutes(3));
        ASSERT_TRUE(status.ok()) << status.status() << "\n" << c.Logs();
        c.sup().Signal(c.worker(1), SIGKILL);
        auto code = c.sup().WaitFinal(c.worker(1), absl::Seconds(30));
        ASSERT_TRUE(code.ok()) << code.status();
        ASSERT_EQ(*code, 128 + SIGKILL) << "worker 1 was not running at the kill\n" << c.Logs();
        auto dead = c.WaitFor(
            "worker 1 declared dead",
            [](const JobStatusResponse& s) {
              for (const MemberStatus& m : s.members()) {
                if (m.role() == WORKER && m.index() == 1) return m.state() == DEAD;
              }
              return false;
            },
            absl::Minutes(1));
        ASSERT_TRUE(dead.ok()) << dead.status() << "\n" << c.Logs();
        killed_at = testing::WorkerClock(*dead, 1);
      });
  EXPECT_EQ(r["state"], "done");
  ASSERT_GE(killed_at, kKillAt);
  ASSERT_FALSE(r["max_clock"].empty());
  EXPECT_GT(std::stoull(r["max_clock"]), killed_at + 2)
      << "worker 0 did not get past the bound around the dead worker's clock " << killed_at;
  ASSERT_FALSE(r["untrained_samples"].empty()) << "no untrained_samples in PS_JOB_RESULT";
  EXPECT_GT(std::stoull(r["untrained_samples"]), 0u);
}

}  // namespace
}  // namespace shardps
