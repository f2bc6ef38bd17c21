// JobCoordinator against requests it must not believe: ranks
// that never registered or died, ticks beyond the granted step, absurd
// metrics, heartbeats of another job or process; and checkpoint faults: an
// unusable directory, a corrupt newest checkpoint, cuts that keep failing.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "scheduler/job.h"
#include "scheduler/job_test_util.h"

namespace shardps {
namespace {

namespace fs = std::filesystem;
using testing::Config;
using testing::FakeServerOps;
using testing::Finish;
using testing::Req;
using testing::RunWorkers;
using testing::StartOf;
using testing::Step;

void ExpectRefused(const absl::Status& st, absl::StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st;
  EXPECT_NE(st.message().find(needle), std::string::npos) << st;
}

// Server 0 and worker 0 register; worker 1 never does.
class WorkerRequestsTest : public ::testing::Test {
 protected:
  WorkerRequestsTest() : c_(Config(0)), ops_(c_), job_(c_, nullptr, &ops_) {
    job_.Start();
    RegisterResponse r;
    EXPECT_TRUE(job_.Register(Req(c_, SERVER, 0, 1), &r).ok());
    EXPECT_TRUE(job_.Register(Req(c_, WORKER, 0, 2), &r).ok());
    auto start = StartOf(&job_, 0);
    EXPECT_TRUE(start.ok()) << start.status();
    generation_ = start.ok() ? start->generation() : 0;
  }

  const JobConfig c_;
  FakeServerOps ops_;
  JobCoordinator job_;
  uint64_t generation_ = 0;
};

TEST_F(WorkerRequestsTest, RanksThatNeverRegisteredAreRefusedByName) {
  TickRequest tick;
  tick.set_rank(1);
  tick.set_clock(1);
  tick.set_generation(generation_);
  TickResponse tr;
  ExpectRefused(job_.Tick(tick, &tr), absl::StatusCode::kFailedPrecondition,
                "Tick: worker 1 has not registered with this scheduler");
  WaitClockRequest wait;
  wait.set_rank(1);
  wait.set_generation(generation_);
  WaitClockResponse wr;
  ExpectRefused(job_.WaitClock(wait, &wr), absl::StatusCode::kFailedPrecondition,
                "WaitClock: worker 1 has not registered");
  BarrierRequest barrier;
  barrier.set_role(WORKER);
  barrier.set_index(1);
  barrier.set_name("trained");
  barrier.set_generation(generation_);
  BarrierResponse barrier_response;
  ExpectRefused(job_.Barrier(barrier, &barrier_response), absl::StatusCode::kFailedPrecondition,
                "Barrier: worker 1 has not registered");
  MetricsReport done;
  done.set_rank(1);
  done.set_done(true);
  done.set_final(true);
  done.set_generation(generation_);
  ExpectRefused(job_.ReportMetrics(done), absl::StatusCode::kFailedPrecondition,
                "worker 1 has not registered");
  tick.set_rank(9);
  ExpectRefused(job_.Tick(tick, &tr), absl::StatusCode::kInvalidArgument,
                "worker rank 9 out of range");
  // Nothing of it counted: worker 1 is not finished, the job runs.
  JobStatusResponse status;
  job_.JobStatus(&status);
  EXPECT_EQ(status.state(), "waiting");
  EXPECT_EQ(job_.clock().Clocks()[1], 0u);
}

TEST_F(WorkerRequestsTest, ATickBeyondTheGrantedStepIsRefused) {
  TickRequest tick;
  tick.set_rank(0);
  tick.set_clock(1);
  tick.set_generation(generation_);
  TickResponse tr;
  ExpectRefused(job_.Tick(tick, &tr), absl::StatusCode::kFailedPrecondition,
                "worker 0 ticked to clock 1 but was allowed to start steps < 0 only");
  ASSERT_TRUE(Step(&job_, 0, generation_, 0).ok());
  EXPECT_EQ(job_.clock().Clocks()[0], 1u);
}

TEST_F(WorkerRequestsTest, AbsurdMetricsAreRefusedAndTheTotalStaysTrue) {
  for (uint64_t t = 0; t < 3; ++t) ASSERT_TRUE(Step(&job_, 0, generation_, t).ok());
  MetricsReport r;
  r.set_rank(0);
  r.set_step(3);
  r.set_generation(generation_);
  r.set_samples(UINT64_MAX);
  r.set_done(true);
  ExpectRefused(job_.ReportMetrics(r), absl::StatusCode::kInvalidArgument,
                "metrics of worker 0: samples is 18446744073709551615: more than step (3) x "
                "training.batch_size (256)");
  r.set_samples(3 * 256 + 1);
  ExpectRefused(job_.ReportMetrics(r), absl::StatusCode::kInvalidArgument, "samples is 769");
  r.set_samples(3 * 256);
  r.set_step(4);
  ExpectRefused(job_.ReportMetrics(r), absl::StatusCode::kInvalidArgument,
                "step is 4 but the worker was allowed to start steps < 3 only");
  r.set_step(3);
  r.set_train_loss(std::nan(""));
  ExpectRefused(job_.ReportMetrics(r), absl::StatusCode::kInvalidArgument, "train_loss is nan");
  r.set_train_loss(0.5);
  r.set_samples_per_sec(INFINITY);
  ExpectRefused(job_.ReportMetrics(r), absl::StatusCode::kInvalidArgument,
                "samples_per_sec is inf");
  r.set_samples_per_sec(100);
  r.set_eval_auc(2);
  ExpectRefused(job_.ReportMetrics(r), absl::StatusCode::kInvalidArgument, "eval_auc is 2");
  r.set_eval_auc(0.7);
  ASSERT_TRUE(job_.ReportMetrics(r).ok());
  JobStatusResponse status;
  job_.JobStatus(&status);
  EXPECT_EQ(status.total_samples(), 768u);
}

TEST_F(WorkerRequestsTest, ADeadWorkerIsToldToRejoinFirst) {
  MetricsReport failed;
  failed.set_rank(0);
  failed.set_error("cannot open /data/x");
  ASSERT_TRUE(job_.ReportMetrics(failed).ok());
  WaitClockRequest wait;
  wait.set_rank(0);
  wait.set_generation(generation_);
  WaitClockResponse wr;
  ExpectRefused(job_.WaitClock(wait, &wr), absl::StatusCode::kUnavailable,
                "WaitClock: worker 0 was declared dead (failed: cannot open /data/x)");
}

TEST(JobHeartbeatTest, OnlyTheHoldersHeartbeatOfThisJobCounts) {
  JobConfig c = Config(0);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  RegisterResponse r;
  ASSERT_TRUE(job.Register(Req(c, SERVER, 0, 11), &r).ok());
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  hb.set_index(0);
  hb.set_incarnation(11);
  hb.set_job_id(r.job_id() ^ 1);
  HeartbeatResponse hr;
  ExpectRefused(job.Heartbeat(hb, &hr), absl::StatusCode::kFailedPrecondition,
                "heartbeat: server 0 names job");
  hb.set_job_id(r.job_id());
  hb.set_incarnation(0);
  ExpectRefused(job.Heartbeat(hb, &hr), absl::StatusCode::kInvalidArgument,
                "server 0 sent no incarnation");
  hb.set_incarnation(12);
  ExpectRefused(job.Heartbeat(hb, &hr), absl::StatusCode::kFailedPrecondition,
                "replaced by a newer process");
  hb.set_incarnation(11);
  EXPECT_TRUE(job.Heartbeat(hb, &hr).ok());
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/trust_" + name;
  fs::remove_all(dir);
  return dir;
}

TEST(JobCheckpointFaultTest, AnUnusableDirectoryFailsTheJobAtStart) {
  const std::string file = FreshDir("file");
  std::ofstream(file) << "a file, not a directory";
  const JobConfig c = Config(0, ASP, file);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  const absl::Status st = job.CheckCheckpointDir();
  ExpectRefused(
      st, absl::StatusCode::kFailedPrecondition,
      "checkpoint.dir " + file + " is unusable: " + file + " exists and is not a directory");
  ExpectRefused(job.WaitDone(absl::Now()), absl::StatusCode::kAborted, "is unusable");
}

// ckpt-20 has a MANIFEST that does not load; ckpt-10 is complete.
void WriteCorruptNewest(const std::string& dir, FakeServerOps* ops) {
  ops->WriteEarlierCheckpoint(10, {});
  fs::create_directories(dir + "/ckpt-000000000020");
  std::ofstream(dir + "/ckpt-000000000020/MANIFEST") << "torn";
}

TEST(JobCheckpointFaultTest, ACorruptNewestCheckpointFailsTheStartByDefault) {
  const std::string dir = FreshDir("corrupt_fail");
  const JobConfig c = Config(0, ASP, dir);
  FakeServerOps ops(c);
  WriteCorruptNewest(dir, &ops);
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  testing::RegisterAll(&job, c);
  ExpectRefused(job.WaitDone(absl::Now() + absl::Seconds(20)), absl::StatusCode::kAborted,
                "checkpoint " + dir + "/ckpt-000000000020 is corrupt: ");
  EXPECT_TRUE(ops.restores().empty()) << "nothing may be restored";
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000000020/MANIFEST")) << "left as it was";
}

TEST(JobCheckpointFaultTest, FallBackSetsTheCorruptOneAsideAndRestoresTheOneBefore) {
  const std::string dir = FreshDir("corrupt_fall_back");
  JobConfig c = Config(0, ASP, dir);
  c.mutable_checkpoint()->set_on_corrupt(CheckpointConfig::FALL_BACK);
  FakeServerOps ops(c);
  WriteCorruptNewest(dir, &ops);
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  testing::RegisterAll(&job, c);
  auto start = StartOf(&job, 0);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->clock(), 10u);
  ASSERT_EQ(ops.restores().size(), 1u);
  EXPECT_EQ(ops.restores()[0].point.clock, 10u);
  EXPECT_FALSE(fs::exists(dir + "/ckpt-000000000020"));
  bool aside = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    aside |= e.path().filename().string().rfind("ckpt-000000000020.corrupt-", 0) == 0;
  }
  EXPECT_TRUE(aside) << "the corrupt checkpoint was not kept aside";
}

TEST(JobCheckpointFaultTest, CutsThatKeepFailingFailTheJobWithTheReason) {
  const std::string dir = FreshDir("cut_fails");
  const JobConfig c = Config(2, ASP, dir);
  FakeServerOps ops(c);
  ops.FailWrites(absl::ResourceExhaustedError("write part-0003.shard: No space left on device"));
  JobCoordinator job(c, nullptr, &ops);
  ops.set_job(&job);
  job.Start();
  testing::RegisterAll(&job, c);
  std::vector<std::thread> workers;
  std::atomic<bool> stop{false};
  for (uint32_t r = 0; r < 2; ++r) {
    workers.emplace_back([&job, &stop, r] {
      auto start = StartOf(&job, r);
      if (!start.ok()) return;
      for (uint64_t t = 0; !stop && t < 100000; ++t) {
        if (!Step(&job, r, start->generation(), t, 5000).ok()) return;
        absl::SleepFor(absl::Milliseconds(5));
      }
    });
  }
  const absl::Status st = job.WaitDone(absl::Now() + absl::Seconds(30));
  stop = true;
  for (auto& w : workers) w.join();
  ExpectRefused(st, absl::StatusCode::kAborted, "failed 3 times in a row");
  EXPECT_NE(st.message().find("No space left on device"), std::string::npos) << st;
}

}  // namespace
}  // namespace shardps
