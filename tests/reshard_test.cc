// Resharding with the real binaries (docs/design.md, "Resharding"): a BSP
// job on 2 servers, with a spare third one registered (cluster.max_servers
// 3), is moved to 3 servers and back to 2 while it trains (the Reshard RPC,
// as ps_status --servers does), and ends with weights bit-identical to the
// same job that never moved. The moves are placed by the job's clock (each
// worker step takes >= kStepDelayMs), not by time.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::JobOutcome;
using testing::SupervisedJob;

// The moves are asked for at clocks 60 and about 130; each lands some tens of
// clocks after it is asked for. 600 steps of at least kStepDelayMs each leave
// the second move over 400 clocks (8 s or more) to land while the job trains.
constexpr uint64_t kSteps = 600;
constexpr int kStepDelayMs = 20;

constexpr char kCluster[] = R"pb(
name: "reshard"
data { format: CRITEO @DATA@ }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 max_servers: 3 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 4000 server_deadline_ms: 30000 worker_deadline_ms: 8000
}
checkpoint { dir: "@CKPT@" every_steps: 1000 keep: 3 }
)pb";

SupervisedJob::Options JobOptions(const std::string& name, int servers) {
  SupervisedJob::Options o;
  o.name = name;
  o.config =
      absl::StrCat(testing::kSmallDlrmTables,
                   absl::StrReplaceAll(
                       kCluster, {{"@DATA@", absl::StrCat("synthetic_dir: \"", ::testing::TempDir(),
                                                          "/reshard_data\"")}}));
  o.servers = servers;
  o.worker_flags = {absl::StrCat("--max_steps=", kSteps),
                    absl::StrCat("--step_delay_ms=", kStepDelayMs)};
  o.supervisor = {0, absl::Seconds(1)};
  o.job_secret = false;
  return o;
}

// Waits until every worker has completed `clock` steps; false (the test
// failed, naming what it saw) if the job ended first.
bool WaitForClock(SupervisedJob& job, uint64_t clock) {
  auto status = testing::WaitForJob(
      job.address(), absl::StrCat("every worker at clock ", clock),
      [clock](const JobStatusResponse& s) {
        return s.state() == "running" && s.min_clock() >= clock;
      },
      absl::Minutes(3));
  EXPECT_TRUE(status.ok()) << status.status() << "\n" << job.Logs();
  return status.ok();
}

class ReshardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(
        testing::MakeSyntheticData(::testing::TempDir() + "/reshard_data", 80000, 10000, 4).ok());
  }
};

TEST_F(ReshardTest, BspTwoToThreeToTwoEndsBitIdentical) {
  JobOutcome still;
  {
    SupervisedJob job(JobOptions("reshard_still", 2));
    ASSERT_TRUE(job.Start().ok());
    still = job.Finish(absl::Minutes(10), /*trained=*/true);
  }
  ASSERT_EQ(still.code, 0) << still.result;

  SupervisedJob job(JobOptions("reshard_moved", 3));  // Server 2 is a spare.
  ASSERT_TRUE(job.Start().ok());
  SchedulerClient client(job.address());
  ASSERT_TRUE(WaitForClock(job, 60));
  auto up = client.Reshard(3, absl::Minutes(2));
  ASSERT_TRUE(up.ok()) << up.status() << "\n" << job.Logs();
  EXPECT_GT(up->partitions_moved(), 0u);
  ASSERT_TRUE(WaitForClock(job, up->clock() + 20));
  auto down = client.Reshard(2, absl::Minutes(2));
  ASSERT_TRUE(down.ok()) << down.status() << "\n" << job.Logs();
  EXPECT_GT(down->partitions_moved(), 0u);
  EXPECT_LT(down->clock(), kSteps) << "the second move must happen while the job trains";
  auto status = client.JobStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->reshards(), 2u);
  EXPECT_EQ(status->map_servers(), 2u);
  const JobOutcome moved = job.Finish(absl::Minutes(10), /*trained=*/true);
  EXPECT_EQ(moved.code, 0) << moved.result;
  EXPECT_NE(still.checksum, 0u);
  EXPECT_EQ(moved.checksum, still.checksum) << "weights differ after the moves\n" << job.Logs();
  EXPECT_EQ(moved.auc, still.auc);
  std::printf("BSP: weights %016llx unmoved, %016llx moved 2 -> 3 -> 2 at clocks %llu, %llu\n",
              static_cast<unsigned long long>(still.checksum),
              static_cast<unsigned long long>(moved.checksum),
              static_cast<unsigned long long>(up->clock()),
              static_cast<unsigned long long>(down->clock()));
}

}  // namespace
}  // namespace shardps
