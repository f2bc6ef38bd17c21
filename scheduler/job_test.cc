// JobCoordinator: forming the job, checkpoint cuts, lifecycle (fake servers).
#include "scheduler/job.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "common/config.h"
#include "common/generation.h"
#include "gtest/gtest.h"
#include "scheduler/job_test_util.h"

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

// A fresh job forms once its server registered: the server is reset to its
// initial values in a new, time-based generation before any worker may
// start, and workers start at clock 0.
TEST(JobFormTest, FreshJobResetsTheServersIntoANewGenerationFirst) {
  const JobConfig c = Config(0);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  RegisterAll(&job, c);
  auto start = StartOf(&job, 0);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->clock(), 0u);
  EXPECT_EQ(start->position(), "");
  EXPECT_GT(start->generation(), 1700000000000u);  // Unix milliseconds.
  EXPECT_EQ(start->generation(), job.generation());
  ASSERT_EQ(ops.restores().size(), 1u);
  EXPECT_TRUE(ops.restores()[0].point.initial);
  EXPECT_FALSE(ops.restores()[0].index.has_value());
  EXPECT_EQ(ops.restores()[0].generation, start->generation());
  // A request of another generation is refused, naming it.
  EXPECT_TRUE(IsStaleGeneration(Step(&job, 0, start->generation() - 1, 0)));
  JobStatusResponse status;
  job.JobStatus(&status);
  EXPECT_EQ(status.state(), "running");
  EXPECT_EQ(status.recoveries_size(), 0);  // A plain start is not a recovery.
}

// A job started again over a complete checkpoint resumes from it: every
// server restores it, and each worker starts at its clock from the data
// position it recorded.
TEST(JobFormTest, JobStartedAgainResumesFromTheLatestCheckpoint) {
  const JobConfig c = Config(0);
  FakeServerOps ops(c);
  const RestorePoint point = ops.WriteEarlierCheckpoint(12, {{0, "p0"}, {1, "p1"}});
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  RegisterAll(&job, c);
  auto start = StartOf(&job, 1);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->clock(), 12u);
  EXPECT_EQ(start->position(), "p1");
  ASSERT_EQ(ops.restores().size(), 1u);
  EXPECT_EQ(ops.restores()[0].point.dir, point.dir);
  JobStatusResponse status;
  job.JobStatus(&status);
  ASSERT_EQ(status.recoveries_size(), 1);
  EXPECT_EQ(status.recoveries(0).kind(), "resume");
  EXPECT_EQ(status.recoveries(0).clock(), 12u);
}

// Two ASP workers run 10 steps; checkpoints every 4 steps must cut at
// clocks 4 and 8, with nobody past the cut, recording each worker's
// position; the end (10) is the final checkpoint.
TEST(JobCheckpointTest, HoldsEveryModeAtTheCutAndRecordsPositions) {
  const JobConfig c = Config(4);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  ops.set_job(&job);
  RegisterAll(&job, c);
  job.Start();
  std::vector<std::thread> workers = RunWorkers(&job, 10, absl::Milliseconds(2));
  for (auto& w : workers) w.join();
  WaitCheckpoints(job, 3);
  std::vector<FakeServerOps::Cut> cuts = ops.cuts();
  ASSERT_EQ(cuts.size(), 3u);
  EXPECT_EQ(cuts[0].clock, 4u);
  EXPECT_EQ(cuts[1].clock, 8u);
  EXPECT_EQ(cuts[2].clock, 10u);
  cuts.pop_back();  // The final cut: every worker finished.
  for (const auto& cut : cuts) {
    EXPECT_LT(cut.max_granted, cut.clock) << "a worker started a step past the cut";
    EXPECT_EQ(cut.generation, job.generation());
    EXPECT_EQ(cut.positions.at(0), "w0@" + std::to_string(cut.clock));
    EXPECT_EQ(cut.positions.at(1), "w1@" + std::to_string(cut.clock));
  }
  EXPECT_EQ(job.Checkpoints(), (std::vector<uint64_t>{4, 8, 10}));
  EXPECT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(10)).ok());
}

// With checkpoint.version_every_steps the cuts between checkpoints are
// versions once the servers' chain has a base: the first cut (2) is a
// checkpoint, 6 is a version, and with checkpoint.delta every checkpoint
// after the first is a delta on the one before.
TEST(JobCheckpointTest, VersionsGoBetweenCheckpointsOnceTheChainHasABase) {
  JobConfig c = Config(4);
  c.mutable_checkpoint()->set_version_every_steps(2);
  c.mutable_checkpoint()->set_delta(true);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  job.Start();
  std::vector<std::thread> workers = RunWorkers(&job, 10, absl::Milliseconds(2));
  for (auto& w : workers) w.join();
  EXPECT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(job.Checkpoints(), (std::vector<uint64_t>{2, 4, 8, 10}));
  EXPECT_EQ(ops.versions(), std::vector<uint64_t>{6});
  const std::vector<FakeServerOps::Cut> cuts = ops.cuts();
  ASSERT_EQ(cuts.size(), 4u);
  EXPECT_FALSE(cuts[0].delta);
  for (size_t i = 1; i < cuts.size(); ++i) EXPECT_TRUE(cuts[i].delta) << cuts[i].clock;
  JobStatusResponse status;
  job.JobStatus(&status);
  EXPECT_EQ(status.versions(), 1u);
  EXPECT_EQ(status.last_version(), 6u);
}

// An on-demand checkpoint in the middle of a run with every_steps = 1000:
// it is cut at a clock nobody had started when asked, well before 1000, and
// the periodic schedule goes on afterwards.
TEST(JobCheckpointTest, CheckpointNowCutsAtTheNextUnstartedClock) {
  const JobConfig c = Config(1000);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  ops.set_job(&job);
  RegisterAll(&job, c);
  job.Start();
  std::vector<std::thread> workers = RunWorkers(&job, 200, absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(100));
  const uint64_t asked_at = job.clock().MaxGranted();
  auto clock = job.CheckpointNow(absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_GT(*clock, asked_at);
  EXPECT_LT(*clock, 200u);
  for (auto& w : workers) w.join();
  WaitCheckpoints(job, 2);
  const std::vector<FakeServerOps::Cut> cuts = ops.cuts();
  ASSERT_EQ(cuts.size(), 2u);  // 1000 is never reached; 200 is the final cut.
  EXPECT_EQ(cuts[0].clock, *clock);
  EXPECT_EQ(cuts[1].clock, 200u);
  EXPECT_LT(cuts[0].max_granted, cuts[0].clock) << "a worker started a step past the cut";
  ASSERT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(10)).ok());
  // After the job ended there is nothing left to cut.
  auto after = job.CheckpointNow(absl::Now() + absl::Seconds(5));
  EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition) << after.status();
}

TEST(JobCheckpointTest, CheckpointNowWithoutCheckpointDirIsRefused) {
  const JobConfig c = Config(0, ASP, "");
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  job.Start();
  auto clock = job.CheckpointNow(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(clock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(clock.status().message().find("checkpoint.dir"), std::string::npos);
}

// A write error reaches the caller; the job goes on.
TEST(JobCheckpointTest, CheckpointNowReportsTheWriteError) {
  const JobConfig c = Config(0);
  FakeServerOps ops(c);
  ops.FailWrites(absl::InternalError("disk full"));
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  job.Start();
  std::vector<std::thread> workers = RunWorkers(&job, 100, absl::Milliseconds(2));
  auto clock = job.CheckpointNow(absl::Now() + absl::Seconds(20));
  EXPECT_EQ(clock.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(clock.status().message().find("disk full"), std::string::npos);
  for (auto& w : workers) w.join();  // Released after the failed cut.
}

// Every worker failed (here: reported an error it cannot recover from) and
// none came back: the job fails, naming each and why.
// With on_worker_loss DROP the job fails only once every worker is dead
// (job_worker_loss_test: WAIT and REASSIGN fail at the first lost worker).
TEST(JobLifecycleTest, EveryWorkerDeadFailsTheJobWithTheirReasons) {
  JobConfig c = Config(0, ASP, "");
  c.mutable_cluster()->set_worker_deadline_ms(300);
  c.mutable_cluster()->set_on_worker_loss(ClusterConfig::DROP);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  job.Start();
  ASSERT_TRUE(StartOf(&job, 0).ok());
  for (uint32_t r = 0; r < 2; ++r) {
    MetricsReport failed;
    failed.set_rank(r);
    failed.set_error("cannot open /data/part-" + std::to_string(r));
    ASSERT_TRUE(job.ReportMetrics(failed).ok());
  }
  const absl::Status st = job.WaitDone(absl::Now() + absl::Seconds(20));
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_NE(st.message().find("every worker died"), std::string::npos) << st;
  EXPECT_NE(st.message().find("cannot open /data/part-1"), std::string::npos) << st;
  // A report from a rank that never registered is refused.
  MetricsReport stranger;
  stranger.set_rank(7);
  EXPECT_EQ(job.ReportMetrics(stranger).code(), absl::StatusCode::kFailedPrecondition);
}

// A live process holding an index refuses a second one; a new process takes
// a slot whose holder has been silent for two heartbeat periods.
TEST(JobLifecycleTest, NewProcessTakesASilentSlotOnly) {
  const JobConfig c = Config(0);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  RegisterResponse resp;
  HeartbeatRequest hb;
  hb.set_job_id(ConfigFingerprint(c));
  hb.set_role(WORKER);
  hb.set_index(1);
  hb.set_incarnation(3);
  HeartbeatResponse hr;
  ASSERT_TRUE(job.Heartbeat(hb, &hr).ok());
  EXPECT_EQ(job.Register(Req(c, WORKER, 1, 50), &resp).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(job.Register(Req(c, WORKER, 1, 3), &resp).ok()) << "the holder's retry";
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_TRUE(job.Register(Req(c, WORKER, 1, 50), &resp).ok());
  // The old process is told it was replaced.
  EXPECT_EQ(job.Heartbeat(hb, &hr).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardps
