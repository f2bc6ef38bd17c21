// JobState: the transitions on the scheduler's job state through its verbs,
// with real membership and clocks; threads only where a verb waits.
#include "scheduler/job_state.h"

#include <thread>

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
  void RegisterAll() {
    Register(SERVER, 0);
    Register(WORKER, 0);
    Register(WORKER, 1);
  }
  // Forms the job at `clock` (the initial values if 0) in generation 7,
  // each worker resuming from "p<rank>" there.
  void Form(uint64_t at = 0) {
    RestorePoint point;
    point.initial = at == 0;
    point.clock = at;
    point.positions = {{0, "p0"}, {1, "p1"}};
    RecoveryReport report;
    state.Rewound(point, 7, &report, /*record=*/false, {});
  }
  MetricsReport Final(uint32_t rank, bool done) const {
    MetricsReport r;
    r.set_rank(rank);
    r.set_final(true);
    r.set_done(done);
    r.set_generation(state.generation());
    return r;
  }
  std::string StateName() const {
    JobStatusResponse status;
    state.FillStatus(&status);
    return status.state();
  }

  const JobConfig config;
  Membership members;
  ClockService clock;
  JobState state;
};

TEST(JobStateTest, FailKeepsTheFirstReasonAndAbortsTheClocks) {
  Parts p(Config(0));
  p.state.Fail("server 0 dead");
  p.state.Fail("a later reason");
  EXPECT_TRUE(p.state.Ended());
  const absl::Status ended = p.state.WaitEnded(absl::Now());
  EXPECT_EQ(ended.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ended.message(), "job failed: server 0 dead");
  HeartbeatResponse hb;
  p.state.AnswerHeartbeat(&hb);
  EXPECT_TRUE(hb.stop());
  EXPECT_EQ(hb.failure(), "server 0 dead");
  auto start = p.clock.WaitToStart(0, 0, absl::Now() + absl::Seconds(5));
  ASSERT_FALSE(start.ok());
  EXPECT_NE(start.status().message().find("server 0 dead"), std::string::npos) << start.status();
}

TEST(JobStateTest, RunsOnceFormedAndEveryMemberRegistered) {
  Parts p(Config(0));
  p.Register(SERVER, 0);
  p.Register(WORKER, 0);
  p.state.MembersSwept({}, absl::Now());
  EXPECT_EQ(p.state.phase(), JobState::Phase::kWaiting);  // Not formed.
  p.Form();
  EXPECT_TRUE(p.state.formed());
  EXPECT_EQ(p.state.generation(), 7u);
  EXPECT_EQ(p.state.phase(), JobState::Phase::kWaiting);  // Worker 1 is missing.
  p.Register(WORKER, 1);
  p.state.MembersSwept({}, absl::Now());
  EXPECT_EQ(p.state.phase(), JobState::Phase::kRunning);
  EXPECT_EQ(p.StateName(), "running");
}

// Without checkpoints the job is done once every worker sent its final
// report, and not while a recovery runs.
TEST(JobStateTest, DoneWhenEveryWorkerReportedFinalAndNoRecoveryRuns) {
  Parts p(Config(0, ASP, ""));
  p.RegisterAll();
  p.Form();
  const absl::Time now = absl::Now();
  p.state.ServerFailed(0, "server 0 restarted", now, now, /*lost=*/true);
  ASSERT_TRUE(p.state.Reported(p.Final(0, true), now).ok());
  ASSERT_TRUE(p.state.Reported(p.Final(1, true), now).ok());
  EXPECT_EQ(p.state.phase(), JobState::Phase::kRunning);
  EXPECT_EQ(p.StateName(), "recovering");
  const std::optional<RecoveryBook::Pending> pending = p.state.TakeUpRecovery();
  ASSERT_TRUE(pending.has_value());
  uint64_t generation = 0;
  EXPECT_EQ(p.state.BeginPartialRecovery(*pending, &generation), std::set<uint32_t>{0});
  EXPECT_EQ(generation, 7u);
  EXPECT_EQ(p.state.phase(), JobState::Phase::kRunning) << "the recovery still runs";
  RecoveryReport report;
  report.set_kind("partial");
  p.state.EndPartialRecovery(report);
  EXPECT_EQ(p.state.phase(), JobState::Phase::kDone);
  EXPECT_TRUE(p.state.WaitEnded(absl::Now()).ok());
}

// A failure pends a recovery and pauses the clocks; a server first silent,
// then lost, counts as lost only.
TEST(JobStateTest, ServerFailurePausesTheClocksAndSortsLostFromSilent) {
  Parts p(Config(0));
  ASSERT_TRUE(p.clock.WaitToStart(0, 0, absl::Now() + absl::Seconds(5)).ok());
  const absl::Time now = absl::Now();
  p.state.ServerFailed(0, "silent", now, now, /*lost=*/false);
  std::optional<RecoveryBook::Pending> pending = p.state.TakeUpRecovery();
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->silent.count(0), 1u);
  p.state.ServerFailed(0, "restarted", now, now, /*lost=*/true);
  pending = p.state.TakeUpRecovery();
  EXPECT_EQ(pending->lost.count(0), 1u);
  EXPECT_EQ(pending->silent.count(0), 0u);
  EXPECT_EQ(pending->cause, "silent; restarted");
  auto start = p.clock.WaitToStart(1, 0, absl::Now() + absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(start.status())) << start.status();
}

TEST(JobStateTest, ALostWorkerLeavesTheClocksOnlyWhenThePolicySays) {
  JobConfig wait = Config(0, BSP);
  wait.mutable_cluster()->set_on_worker_loss(ClusterConfig::WAIT);
  JobConfig drop = Config(0, BSP);
  drop.mutable_cluster()->set_on_worker_loss(ClusterConfig::DROP);
  Parts w(wait), d(drop);
  EXPECT_FALSE(w.state.WorkerFailed(1));
  EXPECT_EQ(w.clock.States()[1], ClockService::WorkerState::kLive);
  EXPECT_TRUE(d.state.WorkerFailed(1));
  EXPECT_EQ(d.clock.States()[1], ClockService::WorkerState::kDead);
}

TEST(JobStateTest, SummaryNamesADeadWorkersUnfinishedShard) {
  Parts p(Config(0));
  p.RegisterAll();
  p.members.MarkDead(WORKER, 1, "missed heartbeats", absl::Now());
  ASSERT_TRUE(p.state.Reported(p.Final(0, /*done=*/false), absl::Now()).ok());
  JobStatusResponse status;
  p.state.FillStatus(&status);
  EXPECT_NE(status.summary().find("worker 0: finished"), std::string::npos) << status.summary();
  EXPECT_NE(status.summary().find("worker 1: DEAD, data unfinished"), std::string::npos)
      << status.summary();
  EXPECT_NE(status.summary().find("missed heartbeats"), std::string::npos) << status.summary();
}

// A tick and its data position go together: a cut finds each worker's
// latest; a tick the clocks refuse records nothing; a rollback brings the
// restore point's positions back, which WaitStart hands out at its clock.
TEST(JobStateTest, TicksRecordPositionsAndARollbackRewindsThem) {
  Parts p(Config(0));
  p.RegisterAll();
  p.Form();
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(p.clock.WaitToStart(rank, 0, absl::Now() + absl::Seconds(5), 7).ok());
    ASSERT_TRUE(p.state.Ticked(rank, 1, 7, "w" + std::to_string(rank) + "@1", 10).ok());
  }
  EXPECT_FALSE(p.state.Ticked(0, 2, /*generation=*/6, "stale", 20).ok());
  JobState::CutInput cut = p.state.BeginCut();
  EXPECT_EQ(cut.generation, 7u);
  EXPECT_EQ(cut.positions, (Positions{{0, "w0@1"}, {1, "w1@1"}}));
  JobStatusResponse status;
  p.state.FillStatus(&status);
  EXPECT_EQ(status.total_samples(), 20u);

  p.Form(/*at=*/1);  // A rollback to clock 1 in generation 7.
  cut = p.state.BeginCut();
  EXPECT_EQ(cut.positions, (Positions{{0, "p0"}, {1, "p1"}}));
  WaitStartResponse start;
  ASSERT_TRUE(p.state.WaitStart(1, std::nullopt, absl::Now() + absl::Seconds(5), &start).ok());
  EXPECT_EQ(start.clock(), 1u);
  EXPECT_EQ(start.position(), "p1");
  EXPECT_EQ(start.generation(), 7u);
}

// A cut request is answered by the next cut that completes: its clock, or
// its error; the wait ends at its deadline, or when the job ends.
TEST(JobStateTest, ACutRequestWaitsForTheNextCut) {
  Parts p(Config(0));
  const uint64_t first = p.state.RequestCut();
  auto timed_out = p.state.WaitCut(first, absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(timed_out.status())) << timed_out.status();
  std::thread cutter([&p, first] {
    p.state.CutEnded(12, absl::OkStatus(), first, absl::Milliseconds(1), absl::Milliseconds(2),
                     absl::Now(), /*final=*/false);
  });
  auto clock = p.state.WaitCut(first, absl::Now() + absl::Seconds(20));
  cutter.join();
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, 12u);
  EXPECT_EQ(p.state.CheckpointsWritten(), std::vector<uint64_t>{12});

  const uint64_t second = p.state.RequestCut();
  p.state.CutEnded(14, absl::InternalError("disk full"), second, absl::ZeroDuration(),
                   absl::ZeroDuration(), absl::Now(), false);
  EXPECT_EQ(p.state.WaitCut(second, absl::Now()).status().message(), "disk full");

  const uint64_t third = p.state.RequestCut();
  p.state.Fail("server 0 dead");
  EXPECT_EQ(p.state.WaitCut(third, absl::Now() + absl::Seconds(20)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A move request is answered once a step serves it; a failed step whose
// server was unreachable is tried again instead.
TEST(JobStateTest, AMoveRequestIsAnsweredWhenAStepServesIt) {
  Parts p(Config(0));
  const uint64_t seq = p.state.RequestMove(2);
  JobState::MoveStep s = p.state.BeginMoveStep(10);
  EXPECT_EQ(s.target, 2u);
  EXPECT_EQ(s.requested, seq);
  PartitionMove::Step step;
  step.clock = 10;
  step.answers = s.requested;
  step.status = absl::UnavailableError("server 1 unreachable");
  uint64_t next = 0;
  EXPECT_TRUE(p.state.MoveStepEnded(step, absl::Now(), &next)) << "tried again";
  EXPECT_TRUE(absl::IsDeadlineExceeded(p.state.WaitMove(seq, 2, absl::Now()).status()));
  std::thread mover([&p, step]() mutable {
    step.status = absl::OkStatus();
    step.moved = 3;
    uint64_t next = 0;
    p.state.MoveStepEnded(step, absl::Now(), &next);
  });
  auto answer = p.state.WaitMove(seq, 2, absl::Now() + absl::Seconds(20));
  mover.join();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->moved, 3u);
  EXPECT_EQ(answer->clock, 10u);
  JobStatusResponse status;
  p.state.FillStatus(&status);
  EXPECT_EQ(status.reshards(), 1u);
  EXPECT_EQ(status.partitions_moved(), 3u);

  const uint64_t again = p.state.RequestMove(3);
  p.state.EndMoves("every worker has finished");
  EXPECT_EQ(p.state.WaitMove(again, 3, absl::Now()).status().message(),
            "reshard: every worker has finished");
}

// A barrier lets its workers go once every one entered it; a rollback
// (before or while one waits) refuses it with the generation's error.
TEST(JobStateTest, ABarrierWaitsForEveryWorkerOrARollback) {
  Parts p(Config(0));
  p.RegisterAll();
  p.Form();
  absl::Status first;
  std::thread rank0([&p, &first] {
    BarrierResponse response;
    first = p.state.EnterBarrier(0, "eval", 7, absl::Now() + absl::Seconds(20), &response);
  });
  BarrierResponse response;
  EXPECT_TRUE(p.state.EnterBarrier(1, "eval", 7, absl::Now() + absl::Seconds(20), &response).ok());
  rank0.join();
  EXPECT_TRUE(first.ok()) << first;

  std::thread rollback([&p] {
    RestorePoint point;
    point.initial = false;
    point.clock = 3;
    RecoveryReport report;
    p.state.Rewound(point, 8, &report, false, {});
  });
  const absl::Status refused =
      p.state.EnterBarrier(0, "next", 7, absl::Now() + absl::Seconds(20), &response);
  rollback.join();
  EXPECT_NE(refused.message().find("stale generation"), std::string::npos) << refused;
}

}  // namespace
}  // namespace shardps
