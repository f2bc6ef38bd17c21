// Evaluation cadence in epochs with real processes: a 1-server/2-worker job
// on 20000 generated lines, batch 128, with training.eval_every_epochs 0.25
// and no clock-based cadence. An epoch is ceil(20000 / (2 x 128)) = 79
// clocks (common/eval_cadence.h), so the scheduler evaluates every
// round(0.25 x 79) = 20 clocks: checkpoints 20, 40, 60 and the final one
// are evaluated, and rank 0 does not evaluate the final state on its own
// (periodic evaluation replaces it).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

constexpr char kJob[] = R"pb(
name: "eval_epochs"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 eval_every_epochs: 0.25 }
cluster {
  num_servers: 1 num_workers: 2 num_partitions: 256 mode: SSP staleness: 2
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000
}
checkpoint { dir: "@CKPT@" keep: 1 }
)pb";

// The clocks <ckpt>/EVALUATIONS has records of, in file order.
std::vector<uint64_t> EvaluatedClocks(const std::string& ckpt) {
  std::vector<uint64_t> clocks;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile(ckpt + "/EVALUATIONS"), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "eval ")) continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    uint64_t clock = 0;
    EXPECT_TRUE(f.size() > 1 && absl::SimpleAtoi(f[1], &clock)) << line;
    clocks.push_back(clock);
  }
  return clocks;
}

TEST(EvalEpochsTest, AQuarterEpochIsEvaluatedEveryQuarterOfTheEpochsClocks) {
  const std::string data = ::testing::TempDir() + "/eval_epochs_data";
  ASSERT_TRUE(testing::MakeSyntheticData(data, 20000, 2000).ok());
  const std::string ckpt = testing::TestDir("eval_epochs_ckpt");
  testing::SupervisedJob cluster(testing::ManualJob(
      "eval_epochs_job",
      testing::kSmallDlrmTables + absl::StrReplaceAll(kJob, {{"@DATA@", data}, {"@CKPT@", ckpt}}),
      1, 2));
  ASSERT_TRUE(cluster.Start().ok()) << cluster.Logs();
  auto code = cluster.WaitScheduler(absl::Minutes(10));
  ASSERT_TRUE(code.ok() && *code == 0) << cluster.Logs();
  auto workers = cluster.WaitWorkers(absl::Seconds(60));
  ASSERT_TRUE(workers.ok()) << workers.status();
  std::map<std::string, std::string> job = testing::ParseResult(cluster.SchedulerResult());
  std::printf("%s\n", cluster.SchedulerResult().c_str());

  EXPECT_TRUE(absl::StrContains(cluster.SchedulerLog(),
                                "an epoch is 79 clocks, so a checkpoint is evaluated every 20"))
      << cluster.LogTail("scheduler");
  // Each worker reads about half the lines: about 79 steps.
  uint64_t fewest = UINT64_MAX, most = 0;
  for (const auto& [rank, r] : *workers) {
    uint64_t steps = 0;
    ASSERT_TRUE(r.count("steps") && absl::SimpleAtoi(r.at("steps"), &steps)) << rank;
    fewest = std::min(fewest, steps);
    most = std::max(most, steps);
  }
  ASSERT_GT(fewest, 60u);
  std::vector<uint64_t> clocks = EvaluatedClocks(ckpt);  // Evaluators finish in any order.
  std::sort(clocks.begin(), clocks.end());
  ASSERT_EQ(clocks.size(), 4u) << testing::ReadFile(ckpt + "/EVALUATIONS");
  EXPECT_EQ(std::vector<uint64_t>(clocks.begin(), clocks.begin() + 3),
            (std::vector<uint64_t>{20, 40, 60}));
  EXPECT_GE(clocks[3], fewest);  // The final checkpoint.
  EXPECT_LE(clocks[3], most);
  EXPECT_EQ(job["evaluations"], "4");
}

}  // namespace
}  // namespace shardps
