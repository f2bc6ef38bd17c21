// JobCoordinator: recovery (rollback, a stalled server, partial) and a
// restarted scheduler taking the job over (fake servers).
#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "common/config.h"
#include "common/generation.h"
#include "gtest/gtest.h"
#include "scheduler/job.h"
#include "scheduler/job_test_util.h"
#include "tests/testing/thread_state.h"

namespace shardps {
namespace {

using testing::Config;
using testing::FakeServerOps;
using testing::Finish;
using testing::RegisterAll;
using testing::Req;
using testing::RunWorkers;
using testing::StartOf;
using testing::Step;
using testing::WaitCheckpoints;

// A server replaced by a new process (its state is gone) mid-job: the
// clocks pause, every server restores the last checkpoint in a new
// generation, the old generation's clock waits and ticks are refused, and
// each worker restarts at the checkpoint's clock from its recorded position.
// The recovery report has its phases once both workers restarted.
TEST(JobRecoveryTest, ReplacedServerRollsTheJobBackToTheLastCheckpoint) {
  const JobConfig c = Config(5, SSP);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  ops.set_job(&job);
  RegisterAll(&job, c);
  job.Start();
  auto s0 = StartOf(&job, 0);
  auto s1 = StartOf(&job, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  const uint64_t g0 = s0->generation();
  for (uint64_t t = 0; t < 7; ++t) {
    ASSERT_TRUE(Step(&job, 0, g0, t).ok()) << t;
    ASSERT_TRUE(Step(&job, 1, g0, t).ok()) << t;
  }
  WaitCheckpoints(job, 1);
  ASSERT_EQ(job.Checkpoints(), std::vector<uint64_t>{5});
  // Worker 0 waits for step 7; the server is replaced meanwhile (its last
  // heartbeat is older than two periods).
  testing::BackgroundCall waiter([&] {
    WaitClockRequest w;
    w.set_rank(0);
    w.set_step(9);  // SSP(1): needs worker 1 at 8, which never comes.
    w.set_timeout_ms(20000);
    w.set_generation(g0);
    WaitClockResponse wr;
    return job.WaitClock(w, &wr);
  });
  ASSERT_TRUE(waiter.WaitUntilBlocked().ok()) << "worker 0's clock wait did not block";
  // The old server's silence: a replacement is taken once its last
  // heartbeat is older than two periods (detect_sec reports it below).
  absl::SleepFor(absl::Milliseconds(150));
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, SERVER, 0, 99), &resp).ok());
  const absl::Status waited = waiter.Join();
  EXPECT_TRUE(IsStaleGeneration(waited))
      << "a clock wait of the old generation was not refused: " << waited;
  auto r0 = StartOf(&job, 0, g0);
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_GT(r0->generation(), g0);
  EXPECT_EQ(r0->clock(), 5u);
  EXPECT_EQ(r0->position(), "w0@5");
  const std::vector<FakeServerOps::Restored> restores = ops.restores();
  ASSERT_EQ(restores.size(), 2u);  // Formation, then the rollback.
  EXPECT_FALSE(restores[1].index.has_value()) << "every server restores";
  EXPECT_EQ(restores[1].point.clock, 5u);
  EXPECT_EQ(restores[1].generation, r0->generation());
  // The old generation's tick is refused and changes nothing.
  TickRequest stale;
  stale.set_rank(1);
  stale.set_clock(8);
  stale.set_generation(g0);
  TickResponse tr;
  EXPECT_TRUE(IsStaleGeneration(job.Tick(stale, &tr)));
  EXPECT_EQ(job.clock().Clocks(), (std::vector<uint64_t>{5, 5}));
  JobStatusResponse status;
  job.JobStatus(&status);
  ASSERT_EQ(status.recoveries_size(), 1);
  EXPECT_EQ(status.recoveries(0).kind(), "rollback");
  EXPECT_FALSE(status.recoveries(0).complete()) << "worker 1 has not restarted yet";
  auto r1 = StartOf(&job, 1, g0);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->position(), "w1@5");
  status.Clear();
  job.JobStatus(&status);
  const RecoveryReport& report = status.recoveries(0);
  EXPECT_TRUE(report.complete());
  EXPECT_EQ(report.clock(), 5u);
  EXPECT_GE(report.detect_sec(), 0.1);  // The old server's silence.
  EXPECT_NEAR(report.total_sec(),
              report.detect_sec() + report.wait_sec() + report.restore_sec() + report.rewind_sec(),
              1e-6);
  EXPECT_NE(report.cause().find("server 0 restarted"), std::string::npos) << report.cause();
  // The job goes on in the new generation.
  EXPECT_TRUE(Step(&job, 0, r0->generation(), 5).ok());
}

// A server declared dead that comes back with its state (the same
// incarnation: it was stalled, not gone) needs no rollback.
TEST(JobRecoveryTest, StalledServerThatComesBackIsNotRolledBack) {
  JobConfig c = Config(0, ASP);
  c.mutable_cluster()->set_dead_after_ms(300);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  std::atomic<bool> beat{true}, server_beats{true};
  std::thread beater([&] {  // The workers heartbeat; the server stalls.
    while (beat) {
      for (uint32_t r = 0; r < 2; ++r) {
        HeartbeatRequest hb;
        hb.set_job_id(ConfigFingerprint(c));
        hb.set_role(WORKER);
        hb.set_index(r);
        hb.set_incarnation(2 + r);
        HeartbeatResponse resp;
        (void)job.Heartbeat(hb, &resp);
      }
      if (server_beats) {
        HeartbeatRequest hb;
        hb.set_job_id(ConfigFingerprint(c));
        hb.set_role(SERVER);
        hb.set_incarnation(1);
        HeartbeatResponse resp;
        (void)job.Heartbeat(hb, &resp);
      }
      absl::SleepFor(absl::Milliseconds(30));
    }
  });
  job.Start();
  auto s0 = StartOf(&job, 0);
  ASSERT_TRUE(s0.ok());
  ASSERT_TRUE(Step(&job, 0, s0->generation(), 0).ok());
  server_beats = false;
  // Declared dead after dead_after_ms (300): the job pauses.
  JobStatusResponse status;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    absl::SleepFor(absl::Milliseconds(10));  // Polls; bounded by `deadline`.
    status.Clear();
    job.JobStatus(&status);
  } while (status.state() != "recovering" && absl::Now() < deadline);
  EXPECT_EQ(status.state(), "recovering");
  EXPECT_EQ(Step(&job, 0, s0->generation(), 1, 100).code(),
            absl::StatusCode::kDeadlineExceeded);  // Paused.
  // Its next heartbeat is told to rejoin; it does, with its state.
  HeartbeatRequest hb;
  hb.set_job_id(ConfigFingerprint(c));
  hb.set_role(SERVER);
  hb.set_incarnation(1);
  HeartbeatResponse hr;
  ASSERT_TRUE(job.Heartbeat(hb, &hr).ok());
  EXPECT_TRUE(hr.rejoin());
  RegisterRequest back = Req(c, SERVER, 0, 1);
  back.mutable_rejoin()->set_generation(s0->generation());
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(back, &resp).ok());
  server_beats = true;
  EXPECT_TRUE(Step(&job, 0, s0->generation(), 1).ok()) << "the clocks did not resume";
  status.Clear();
  job.JobStatus(&status);
  ASSERT_EQ(status.recoveries_size(), 1);
  EXPECT_EQ(status.recoveries(0).kind(), "rejoin");
  EXPECT_EQ(ops.restores().size(), 1u) << "only the formation restored";
  EXPECT_EQ(job.generation(), s0->generation());
  beat = false;
  beater.join();
}

// checkpoint.recovery PARTIAL (SSP): only the replaced server restores the
// latest checkpoint, in the current generation; the workers go on.
TEST(JobRecoveryTest, PartialRecoveryRestoresOnlyTheReplacedServer) {
  JobConfig c = Config(0, SSP);
  c.mutable_checkpoint()->set_recovery(CheckpointConfig::PARTIAL);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  job.Start();
  auto s0 = StartOf(&job, 0);
  ASSERT_TRUE(s0.ok());
  const RestorePoint point = ops.WriteEarlierCheckpoint(3, {});
  absl::SleepFor(absl::Milliseconds(150));
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, SERVER, 0, 77), &resp).ok());
  EXPECT_TRUE(Step(&job, 0, s0->generation(), 0).ok()) << "the clocks did not resume";
  const std::vector<FakeServerOps::Restored> restores = ops.restores();
  ASSERT_EQ(restores.size(), 2u);
  EXPECT_EQ(restores[1].index, std::optional<uint32_t>(0));
  EXPECT_EQ(restores[1].point.dir, point.dir);
  EXPECT_EQ(restores[1].generation, s0->generation());
  EXPECT_EQ(job.generation(), s0->generation());
}

// A restarted scheduler learns the job from the processes that rejoin: it
// asks unknown heartbeaters to rejoin, takes their clocks, builds a map newer
// than any version they hold, and goes on in their generation without
// restoring anything.
TEST(JobTakeoverTest, LiveProcessesRejoinWithTheirClocksAndMapVersions) {
  const JobConfig c = Config(0);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  HeartbeatRequest hb;
  hb.set_job_id(ConfigFingerprint(c));
  hb.set_role(WORKER);
  hb.set_index(1);
  hb.set_incarnation(3);
  HeartbeatResponse hr;
  ASSERT_TRUE(job.Heartbeat(hb, &hr).ok());
  EXPECT_TRUE(hr.rejoin());
  auto rejoin = [&](Role role, uint32_t index, uint64_t incarnation, uint64_t clock,
                    uint64_t map_version) {
    RegisterRequest r = Req(c, role, index, incarnation);
    r.mutable_rejoin()->set_clock(clock);
    r.mutable_rejoin()->set_position("p" + std::to_string(clock));
    r.mutable_rejoin()->set_map_version(map_version);
    r.mutable_rejoin()->set_generation(4242);
    RegisterResponse resp;
    return job.Register(r, &resp);
  };
  ASSERT_TRUE(rejoin(SERVER, 0, 1, 0, 3).ok());
  ASSERT_TRUE(rejoin(WORKER, 0, 2, 7, 3).ok());
  ASSERT_TRUE(rejoin(WORKER, 1, 3, 8, 4).ok());
  auto start = StartOf(&job, 1);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->generation(), 4242u);
  EXPECT_EQ(start->clock(), 8u);
  EXPECT_EQ(start->position(), "p8");
  EXPECT_EQ(job.clock().Clocks(), (std::vector<uint64_t>{7, 8}));
  ASSERT_TRUE(job.Map().has_value());
  EXPECT_GT(job.Map()->version(), 4u);
  EXPECT_EQ(ops.restores().size(), 0u) << "nothing was lost: nothing restored";
  JobStatusResponse status;
  job.JobStatus(&status);
  EXPECT_EQ(status.state(), "running");
  EXPECT_TRUE(Step(&job, 1, 4242, 8).ok());  // ASP: rank 1 goes on at step 8.
  HeartbeatResponse known;
  ASSERT_TRUE(job.Heartbeat(hb, &known).ok());
  EXPECT_FALSE(known.rejoin());
  // A rejoin needs the index it held.
  RegisterRequest no_index = Req(c, WORKER, -1, 5);
  no_index.mutable_rejoin()->set_clock(1);
  RegisterResponse resp;
  EXPECT_EQ(job.Register(no_index, &resp).code(), absl::StatusCode::kInvalidArgument);
}

// The scheduler and the server died together: the workers rejoin with their
// state, but the new server has none, so taking over needs a rollback.
TEST(JobTakeoverTest, TakeoverWithALostServerRollsBack) {
  const JobConfig c = Config(0);
  FakeServerOps ops(c);
  const RestorePoint point = ops.WriteEarlierCheckpoint(4, {{0, "a"}, {1, "b"}});
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  RegisterResponse resp;
  for (uint32_t r = 0; r < 2; ++r) {
    RegisterRequest w = Req(c, WORKER, r, 10 + r);
    w.mutable_rejoin()->set_clock(9);
    w.mutable_rejoin()->set_generation(4242);
    ASSERT_TRUE(job.Register(w, &resp).ok());
  }
  ASSERT_TRUE(job.Register(Req(c, SERVER, 0, 1), &resp).ok());  // New, empty.
  auto start = StartOf(&job, 0, 4242);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_GT(start->generation(), 4242u);
  EXPECT_EQ(start->clock(), 4u);
  EXPECT_EQ(start->position(), "a");
  ASSERT_EQ(ops.restores().size(), 1u);
  EXPECT_EQ(ops.restores()[0].point.dir, point.dir);
  JobStatusResponse status;
  job.JobStatus(&status);
  ASSERT_EQ(status.recoveries_size(), 1);
  EXPECT_EQ(status.recoveries(0).kind(), "rollback");
  EXPECT_NE(status.recoveries(0).cause().find("server 0 registered without"), std::string::npos)
      << status.recoveries(0).cause();
}

}  // namespace
}  // namespace shardps
