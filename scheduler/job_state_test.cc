// JobState: the transitions on the scheduler's job state, with real
// membership and clocks and no threads.
#include "scheduler/job_state.h"

#include "absl/time/clock.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "scheduler/job_test_util.h"

namespace shardps {
namespace {

using testing::Config;
using testing::Req;

// The parts a JobState works on, for one job config.
struct Parts {
  explicit Parts(JobConfig c)
      : config(std::move(c)),
        members(config, ConfigFingerprint(config)),
        clock(config.cluster().num_workers(), ClockService::kUnbounded),
        state(config, &members, &clock, nullptr, absl::Now()) {}

  void Register(Role role, int index) {
    ASSERT_TRUE(
        members.Register(Req(config, role, index, 10 + index + 5 * role), absl::Now()).ok());
  }

  const JobConfig config;
  Membership members;
  ClockService clock;
  JobState state;
};

TEST(JobStateTest, FailKeepsTheFirstReasonAndAbortsTheClocks) {
  Parts p(Config(0));
  {
    MutexLock lock(&p.state.mu);
    p.state.Fail("server 0 dead");
    p.state.Fail("a later reason");
    EXPECT_TRUE(p.state.Ended());
    EXPECT_EQ(p.state.failure, "server 0 dead");
  }
  auto start = p.clock.WaitToStart(0, 0, absl::Now() + absl::Seconds(5));
  ASSERT_FALSE(start.ok());
  EXPECT_NE(start.status().message().find("server 0 dead"), std::string::npos) << start.status();
}

TEST(JobStateTest, RunsOnceFormedAndEveryMemberRegistered) {
  Parts p(Config(0));
  p.Register(SERVER, 0);
  p.Register(WORKER, 0);
  MutexLock lock(&p.state.mu);
  p.state.Update();
  EXPECT_EQ(p.state.phase, JobState::Phase::kWaiting);  // Not formed.
  p.state.formed = true;
  p.state.Update();
  EXPECT_EQ(p.state.phase, JobState::Phase::kWaiting);  // Worker 1 is missing.
  ASSERT_TRUE(p.members.Register(Req(p.config, WORKER, 1, 40), absl::Now()).ok());
  p.state.Update();
  EXPECT_EQ(p.state.phase, JobState::Phase::kRunning);
}

// Without checkpoints the job is done once every worker sent its final
// report, and not while a recovery is pending.
TEST(JobStateTest, DoneWhenEveryWorkerReportedFinalAndNoRecoveryPends) {
  Parts p(Config(0, ASP, ""));
  p.Register(SERVER, 0);
  p.Register(WORKER, 0);
  p.Register(WORKER, 1);
  MutexLock lock(&p.state.mu);
  p.state.formed = true;
  p.state.reported_final = {true, true};
  const absl::Time now = absl::Now();
  p.state.ServerFailed(0, "server 0 restarted", now, now, /*lost=*/true);
  p.state.Update();
  EXPECT_EQ(p.state.phase, JobState::Phase::kRunning);
  p.state.recovery.ClearPending();
  p.state.Update();
  EXPECT_EQ(p.state.phase, JobState::Phase::kDone);
}

// A failure pends a recovery and pauses the clocks; a server first silent,
// then lost, counts as lost only.
TEST(JobStateTest, ServerFailurePausesTheClocksAndSortsLostFromSilent) {
  Parts p(Config(0));
  ASSERT_TRUE(p.clock.WaitToStart(0, 0, absl::Now() + absl::Seconds(5)).ok());
  MutexLock lock(&p.state.mu);
  const absl::Time now = absl::Now();
  p.state.ServerFailed(0, "silent", now, now, /*lost=*/false);
  ASSERT_NE(p.state.recovery.pending(), nullptr);
  EXPECT_EQ(p.state.recovery.pending()->silent.count(0), 1u);
  p.state.ServerFailed(0, "restarted", now, now, /*lost=*/true);
  EXPECT_EQ(p.state.recovery.pending()->lost.count(0), 1u);
  EXPECT_EQ(p.state.recovery.pending()->silent.count(0), 0u);
  auto start = p.clock.WaitToStart(1, 0, absl::Now() + absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(start.status())) << start.status();
}

TEST(JobStateTest, ALostWorkerLeavesTheClocksOnlyWhenThePolicySays) {
  JobConfig wait = Config(0, BSP);
  wait.mutable_cluster()->set_on_worker_loss(ClusterConfig::WAIT);
  JobConfig drop = Config(0, BSP);
  drop.mutable_cluster()->set_on_worker_loss(ClusterConfig::DROP);
  Parts w(wait), d(drop);
  {
    MutexLock lock(&w.state.mu);
    EXPECT_FALSE(w.state.WorkerLost(1));
  }
  EXPECT_EQ(w.clock.States()[1], ClockService::WorkerState::kLive);
  {
    MutexLock lock(&d.state.mu);
    EXPECT_TRUE(d.state.WorkerLost(1));
  }
  EXPECT_EQ(d.clock.States()[1], ClockService::WorkerState::kDead);
}

TEST(JobStateTest, SummaryNamesADeadWorkersUnfinishedShard) {
  Parts p(Config(0));
  p.Register(SERVER, 0);
  p.Register(WORKER, 0);
  p.Register(WORKER, 1);
  p.members.MarkDead(WORKER, 1, "missed heartbeats", absl::Now());
  MutexLock lock(&p.state.mu);
  p.state.reported_final[0] = true;
  const std::string summary = p.state.Summary();
  EXPECT_NE(summary.find("worker 0: finished"), std::string::npos) << summary;
  EXPECT_NE(summary.find("worker 1: DEAD, data unfinished"), std::string::npos) << summary;
  EXPECT_NE(summary.find("missed heartbeats"), std::string::npos) << summary;
}

}  // namespace
}  // namespace shardps
