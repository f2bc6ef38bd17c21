// A job that failed at start, against the real binaries: a worker started
// after the failure (its servers never came, start_deadline_ms passed) is
// told so when it registers, and exits non-zero naming the failure, instead
// of retrying an address nobody answers until its own start_deadline_ms.
// And a second job pointed at a checkpoint directory in use is refused at
// start, naming the scheduler that holds it; a bad --testing_stall_at stops
// either binary at start.
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;

// The config of a BSP job of one server and one worker on synthetic data
// under `dir`, named `name`, with `extra` appended: written to
// <dir>/job.pbtxt, whose path it returns.
std::string OneServerJob(const std::string& dir, const std::string& name,
                         const std::string& extra) {
  const std::string config = dir + "/job.pbtxt";
  std::ofstream(config) << "name: \"" << name << "\"\n"
                        << R"pb(
        training { batch_size: 64 epochs: 1 intra_op_threads: 1 }
        cluster { num_servers: 1 num_workers: 1 num_partitions: 16 mode: BSP }
      )pb" << testing::kSmallDlrmTables
                        << "data { format: CRITEO synthetic_dir: \"" << dir << "/data\" }\n"
                        << extra;
  return config;
}

TEST(StartFailureTest, AWorkerStartedAfterTheJobFailedAtStartExitsSaying) {
  const std::string dir = testing::TestDir("start_failure");
  ASSERT_TRUE(testing::MakeSyntheticData(dir + "/data", 2000, 200).ok());
  const std::string config = dir + "/job.pbtxt";
  std::ofstream(config) << R"pb(
        name: "start-failure"
        training { batch_size: 64 epochs: 1 intra_op_threads: 1 }
        cluster {
          num_servers: 2
          num_workers: 2
          num_partitions: 16
          mode: SSP
          staleness: 2
          start_deadline_ms: 1000
          dead_after_ms: 60000
        }
      )pb" << testing::kSmallDlrmTables
                        << "data { format: CRITEO synthetic_dir: \"" << dir << "/data\" }\n";
  Subprocess scheduler;
  ASSERT_TRUE(scheduler
                  .Start({RunfilePath("scheduler/ps_scheduler"), "--config=" + config},
                         dir + "/scheduler.log")
                  .ok());
  auto address = scheduler.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
  ASSERT_TRUE(address.ok()) << address.status();
  // No server comes: the job fails once start_deadline_ms has passed. The
  // failed scheduler answers late members for 3 x dead_after_ms (180 s here:
  // longer than the worker below may take to start on a slow machine).
  auto failed = testing::WaitForJob(
      *address, "the job to fail at start", [](const JobStatusResponse&) { return false; },
      absl::Seconds(60));
  ASSERT_TRUE(absl::IsFailedPrecondition(failed.status())) << failed.status();
  ASSERT_TRUE(absl::StrContains(failed.status().message(), "failed")) << failed.status();

  Subprocess worker;
  ASSERT_TRUE(worker
                  .Start({RunfilePath("worker/ps_worker"), "--config=" + config,
                          "--scheduler=" + *address, "--rank=0"},
                         dir + "/worker.log")
                  .ok());
  const absl::StatusOr<int> code = worker.Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << "the late worker did not exit: " << code.status();
  EXPECT_NE(*code, 0);
  const std::string log = testing::ReadFile(dir + "/worker.log");
  EXPECT_TRUE(absl::StrContains(log, "the job failed: servers [0,1] did not register within"))
      << log;
  scheduler.Signal(SIGKILL);
}

TEST(StartFailureTest, ASecondSchedulerOnACheckpointDirInUseExitsNamingTheHolder) {
  const std::string dir = testing::TestDir("dir_in_use");
  const std::string config =
      OneServerJob(dir, "dir-owner", absl::StrCat("checkpoint { dir: \"", dir, "/ckpt\" }\n"));
  auto start = [&](Subprocess& s, const std::string& log) {
    return s.Start(
        {RunfilePath("scheduler/ps_scheduler"), "--config=" + config, "--checkpoint_lock_wait=1s"},
        dir + "/" + log);
  };
  Subprocess first;
  ASSERT_TRUE(start(first, "first.log").ok());
  auto address = first.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
  ASSERT_TRUE(address.ok()) << address.status();
  // The first holds the directory once the lock file names it (written
  // after the lock is taken).
  const std::string holder = "job dir-owner, pid " + std::to_string(first.pid());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!absl::StrContains(testing::ReadFile(dir + "/ckpt/LOCK"), holder)) {
    ASSERT_LT(absl::Now(), deadline) << "the first scheduler never took " << dir << "/ckpt/LOCK\n"
                                     << testing::ReadFile(dir + "/first.log");
    absl::SleepFor(absl::Milliseconds(20));
  }

  Subprocess second;
  ASSERT_TRUE(start(second, "second.log").ok());
  const absl::StatusOr<int> code = second.Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << "the second scheduler did not exit: " << code.status();
  EXPECT_EQ(*code, 2);
  const std::string log = testing::ReadFile(dir + "/second.log");
  EXPECT_TRUE(absl::StrContains(log, "is in use by another scheduler (" + holder)) << log;

  // The holder killed: a scheduler started again takes the directory.
  first.Signal(SIGKILL);
  ASSERT_TRUE(first.Wait(absl::Seconds(30)).ok());
  Subprocess again;
  ASSERT_TRUE(start(again, "again.log").ok());
  auto again_address = again.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
  ASSERT_TRUE(again_address.ok()) << again_address.status();
  auto again_waiting = testing::WaitForJob(
      *again_address, "the restarted scheduler to wait for its members",
      [](const JobStatusResponse& s) { return s.state() == "waiting"; }, absl::Seconds(60));
  EXPECT_TRUE(again_waiting.ok()) << again_waiting.status()
                                  << testing::ReadFile(dir + "/again.log");
  again.Signal(SIGKILL);
}

// A fault-test hook named wrongly (--testing_stall_at, common/testing_stall.h)
// stops either binary at start with exit 2, naming the entry and the points
// it knows, before it serves or joins anything.
TEST(StartFailureTest, ABadTestingStallFlagExitsTwoNamingIt) {
  const std::string dir = testing::TestDir("bad_stall_flag");
  const std::string config = OneServerJob(dir, "bad-stall", "");
  struct Case {
    const char* binary;
    const char* flag;   // A point of the other binary's.
    const char* known;  // Named in the refusal.
    const char* log;
  };
  for (const Case& c :
       {Case{"scheduler/ps_scheduler", "partitions_added:", "reshard_added, reshard_switching",
             "scheduler.log"},
        Case{"server/ps_server", "reshard_added:", "partitions_added, caught_up, switching_map",
             "server.log"}}) {
    const std::string log = dir + "/" + c.log;
    Subprocess s;
    ASSERT_TRUE(s.Start({RunfilePath(c.binary), "--config=" + config,
                         absl::StrCat("--testing_stall_at=", c.flag, dir, "/marker")},
                        log)
                    .ok());
    const absl::StatusOr<int> code = s.Wait(absl::Seconds(60));
    ASSERT_TRUE(code.ok()) << c.binary << " did not exit: " << code.status();
    EXPECT_EQ(*code, 2) << c.binary;
    const std::string text = testing::ReadFile(log);
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("--testing_stall_at: \"", c.flag)))
        << c.binary << ": " << text;
    EXPECT_TRUE(absl::StrContains(text, c.known)) << c.binary << ": " << text;
  }
}

}  // namespace
}  // namespace shardps
