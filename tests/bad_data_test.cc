// Data a job cannot train on is found before training, with the file named:
// a missing eval file fails the job at start (not after the whole training
// ran), and train files that are all empty fail it too (not "done,
// samples=0").
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;
using testing::SupervisedJob;
constexpr auto Dir = testing::TestDir;

constexpr char kJob[] = R"pb(
name: "bad-data"
training { batch_size: 128 epochs: 1 intra_op_threads: 1 }
cluster { num_servers: 1 num_workers: 1 num_partitions: 16 mode: BSP worker_deadline_ms: 3000 }
)pb";

// A job whose eval file does not exist fails before any step, naming it.
TEST(BadDataTest, AMissingEvalFileFailsTheJobBeforeTraining) {
  const std::string dir = Dir("bad_eval");
  ASSERT_TRUE(testing::MakeSyntheticData(dir + "/data", 20000, 1000).ok());
  const std::string config =
      absl::StrCat(kJob, testing::kSmallDlrmTables, "data { format: CRITEO synthetic_dir: \"", dir,
                   "/data\" eval_files: \"", dir, "/data/no-such-eval.tsv\" }\n");
  SupervisedJob job(testing::ManualJob("bad_eval", config, 1, 1));
  ASSERT_TRUE(job.Start().ok()) << job.Logs();
  auto code = job.WaitScheduler(absl::Minutes(3));
  ASSERT_TRUE(code.ok()) << code.status() << job.Logs();
  EXPECT_EQ(*code, 1) << job.SchedulerResult();
  const std::string log = job.LogTail("scheduler", 200);
  EXPECT_NE(log.find("eval file " + dir + "/data/no-such-eval.tsv cannot be read"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("after 0 steps"), std::string::npos) << "it trained first: " << log;
}

// Local mode: train files that are all empty are an error at start (exit 2).
TEST(BadDataTest, EmptyTrainFilesAreAnErrorNotADoneJob) {
  const std::string dir = Dir("bad_empty");
  const std::string config = dir + "/job.pbtxt";
  std::ofstream(dir + "/empty.tsv");
  std::ofstream(config) << kJob << testing::kSmallDlrmTables
                        << "data { format: CRITEO train_files: \"" << dir << "/empty.tsv\" }\n";
  Subprocess worker;
  ASSERT_TRUE(worker
                  .Start({RunfilePath("worker/ps_worker"), "--config=" + config, "--local"},
                         dir + "/worker.log")
                  .ok());
  EXPECT_EQ(worker.Wait(absl::Minutes(2)).value_or(-1), 2);
  const std::string log = testing::ReadFile(dir + "/worker.log");
  EXPECT_NE(log.find("every train file is empty"), std::string::npos) << log;
}

}  // namespace
}  // namespace shardps
