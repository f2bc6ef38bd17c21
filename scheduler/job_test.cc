#include "scheduler/job.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "common/config.h"
#include "common/generation.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// Records what the coordinator asks of the servers; answers as told.
class FakeServerOps final : public ServerOps {
 public:
  struct Cut {
    uint64_t clock = 0, generation = 0, max_granted = 0;
    Positions positions;
  };
  struct Restored {
    std::optional<uint32_t> index;
    RestorePoint point;
    uint64_t generation = 0;
  };

  explicit FakeServerOps(const JobCoordinator* job = nullptr) : job_(job) {}
  void set_job(const JobCoordinator* job) { job_ = job; }

  absl::Status CopyCut(const PartitionMapProto&, uint64_t generation, uint64_t clock) override {
    MutexLock lock(&mu_);
    copying_ = {clock, generation,
                job_ ? const_cast<JobCoordinator*>(job_)->clock().MaxGranted() : 0, {}};
    return absl::OkStatus();
  }
  absl::Status FinishCut(const PartitionMapProto&, uint64_t, uint64_t clock,
                         const Positions& positions) override {
    MutexLock lock(&mu_);
    if (!write_error_.ok()) return write_error_;
    copying_.positions = positions;
    cuts_.push_back(copying_);
    RestorePoint p;
    p.initial = false;
    p.clock = clock;
    p.dir = "ckpt-" + std::to_string(clock);
    p.positions = positions;
    points_.insert(points_.begin(), p);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<RestorePoint>> RestorePoints() override {
    MutexLock lock(&mu_);
    return points_;
  }
  absl::StatusOr<RestoreStats> Restore(const PartitionMapProto&, std::optional<uint32_t> index,
                                       const RestorePoint& point,
                                       uint64_t generation) override {
    MutexLock lock(&mu_);
    restores_.push_back({index, point, generation});
    RestoreStats stats;
    stats.rows = point.initial ? 0 : 100;
    return stats;
  }

  void AddPoint(RestorePoint p) {
    MutexLock lock(&mu_);
    points_.insert(points_.begin(), std::move(p));
  }
  void FailWrites(absl::Status st) {
    MutexLock lock(&mu_);
    write_error_ = std::move(st);
  }
  std::vector<Cut> cuts() const {
    MutexLock lock(&mu_);
    return cuts_;
  }
  std::vector<Restored> restores() const {
    MutexLock lock(&mu_);
    return restores_;
  }

 private:
  const JobCoordinator* job_;
  mutable Mutex mu_;
  Cut copying_ ABSL_GUARDED_BY(mu_);
  std::vector<Cut> cuts_ ABSL_GUARDED_BY(mu_);
  std::vector<Restored> restores_ ABSL_GUARDED_BY(mu_);
  std::vector<RestorePoint> points_ ABSL_GUARDED_BY(mu_);
  absl::Status write_error_ ABSL_GUARDED_BY(mu_);
};

JobConfig Config(uint64_t every_steps, ConsistencyMode mode = ASP,
                 const std::string& dir = "/unused") {
  JobConfig c;
  auto* t = c.add_tables();
  t->set_id(1);
  t->set_name("emb");
  t->set_dim(4);
  t->mutable_optimizer()->mutable_sgd()->set_learning_rate(1);
  c.mutable_data()->add_train_files("x");
  c.mutable_cluster()->set_num_servers(1);
  c.mutable_cluster()->set_num_workers(2);
  c.mutable_cluster()->set_mode(mode);
  if (mode == SSP) c.mutable_cluster()->set_staleness(1);
  // Short heartbeats: a new process takes a silent slot after 100 ms.
  c.mutable_cluster()->set_heartbeat_ms(50);
  c.mutable_cluster()->set_dead_after_ms(60000);
  c.mutable_checkpoint()->set_dir(dir);
  c.mutable_checkpoint()->set_every_steps(every_steps);
  EXPECT_TRUE(FinalizeJobConfig(&c).ok());
  return c;
}

RegisterRequest Req(const JobConfig& c, Role role, int index, uint64_t incarnation) {
  RegisterRequest r;
  r.set_config_fingerprint(ConfigFingerprint(c));
  r.set_role(role);
  if (role == SERVER) r.set_address("127.0.0.1:" + std::to_string(1000 + incarnation));
  if (index >= 0) r.set_requested_index(index);
  r.set_incarnation(incarnation);
  return r;
}

void RegisterAll(JobCoordinator* job, const JobConfig& c) {
  RegisterResponse resp;
  ASSERT_TRUE(job->Register(Req(c, SERVER, 0, 1), &resp).ok());
  ASSERT_TRUE(job->Register(Req(c, WORKER, 0, 2), &resp).ok());
  ASSERT_TRUE(job->Register(Req(c, WORKER, 1, 3), &resp).ok());
}

absl::StatusOr<WaitStartResponse> StartOf(JobCoordinator* job, uint32_t rank,
                                          std::optional<uint64_t> after = std::nullopt,
                                          uint32_t timeout_ms = 20000) {
  WaitStartRequest request;
  request.set_rank(rank);
  if (after) request.set_after_generation(*after);
  request.set_timeout_ms(timeout_ms);
  WaitStartResponse response;
  absl::Status st = job->WaitStart(request, &response);
  if (!st.ok()) return st;
  return response;
}

// Step t of worker `rank` in `generation`: wait for the clock, tick.
absl::Status Step(JobCoordinator* job, uint32_t rank, uint64_t generation, uint64_t t,
                  uint32_t timeout_ms = 20000) {
  WaitClockRequest w;
  w.set_rank(rank);
  w.set_step(t);
  w.set_timeout_ms(timeout_ms);
  w.set_generation(generation);
  WaitClockResponse wr;
  absl::Status st = job->WaitClock(w, &wr);
  if (!st.ok()) return st;
  TickRequest tick;
  tick.set_rank(rank);
  tick.set_clock(t + 1);
  tick.set_generation(generation);
  tick.set_position("w" + std::to_string(rank) + "@" + std::to_string(t + 1));
  TickResponse tr;
  return job->Tick(tick, &tr);
}

absl::Status Finish(JobCoordinator* job, uint32_t rank, uint64_t generation) {
  MetricsReport done;
  done.set_rank(rank);
  done.set_done(true);
  done.set_final(true);
  done.set_generation(generation);
  return job->ReportMetrics(done);
}

// Runs two workers for `steps` steps, `delay` per step, then reports done.
std::vector<std::thread> RunWorkers(JobCoordinator* job, uint64_t steps, absl::Duration delay) {
  std::vector<std::thread> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    workers.emplace_back([job, r, steps, delay] {
      auto start = StartOf(job, r);
      ASSERT_TRUE(start.ok()) << start.status();
      for (uint64_t t = start->clock(); t < steps; ++t) {
        ASSERT_TRUE(Step(job, r, start->generation(), t).ok()) << t;
        absl::SleepFor(delay * (r + 1));
      }
      ASSERT_TRUE(Finish(job, r, start->generation()).ok());
    });
  }
  return workers;
}

// Waits until `n` checkpoints were written (the final one comes from the
// control thread after the workers finished).
void WaitCheckpoints(const JobCoordinator& job, size_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (job.Checkpoints().size() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// A fresh job forms once its server registered: the server is reset to its
// initial values in a new, time-based generation before any worker may
// start, and workers start at clock 0.
TEST(JobFormTest, FreshJobResetsTheServersIntoANewGenerationFirst) {
  const JobConfig c = Config(0);
  FakeServerOps ops;
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
  FakeServerOps ops;
  RestorePoint point;
  point.initial = false;
  point.clock = 12;
  point.dir = "ckpt-12";
  point.positions = {{0, "p0"}, {1, "p1"}};
  ops.AddPoint(point);
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  RegisterAll(&job, c);
  auto start = StartOf(&job, 1);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->clock(), 12u);
  EXPECT_EQ(start->position(), "p1");
  ASSERT_EQ(ops.restores().size(), 1u);
  EXPECT_EQ(ops.restores()[0].point.dir, "ckpt-12");
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
  FakeServerOps ops;
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

// An on-demand checkpoint in the middle of a run with every_steps = 1000:
// it is cut at a clock nobody had started when asked, well before 1000, and
// the periodic schedule goes on afterwards.
TEST(JobCheckpointTest, CheckpointNowCutsAtTheNextUnstartedClock) {
  const JobConfig c = Config(1000);
  FakeServerOps ops;
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
  FakeServerOps ops;
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
  FakeServerOps ops;
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

// A server replaced by a new process (its state is gone) mid-job: the
// clocks pause, every server restores the last checkpoint in a new
// generation, the old generation's clock waits and ticks are refused, and
// each worker restarts at the checkpoint's clock from its recorded position.
// The recovery report has its phases once both workers restarted.
TEST(JobRecoveryTest, ReplacedServerRollsTheJobBackToTheLastCheckpoint) {
  const JobConfig c = Config(5, SSP);
  FakeServerOps ops;
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
  std::atomic<bool> refused{false};
  std::thread waiter([&] {
    WaitClockRequest w;
    w.set_rank(0);
    w.set_step(9);  // SSP(1): needs worker 1 at 8, which never comes.
    w.set_timeout_ms(20000);
    w.set_generation(g0);
    WaitClockResponse wr;
    refused = IsStaleGeneration(job.WaitClock(w, &wr));
  });
  absl::SleepFor(absl::Milliseconds(150));
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, SERVER, 0, 99), &resp).ok());
  waiter.join();
  EXPECT_TRUE(refused) << "a clock wait of the old generation was not refused";
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
  EXPECT_NEAR(report.total_sec(), report.detect_sec() + report.wait_sec() +
                                      report.restore_sec() + report.rewind_sec(), 1e-6);
  EXPECT_NE(report.cause().find("server 0 restarted"), std::string::npos) << report.cause();
  // The job goes on in the new generation.
  EXPECT_TRUE(Step(&job, 0, r0->generation(), 5).ok());
}

// A server declared dead that comes back with its state (the same
// incarnation: it was stalled, not gone) needs no rollback.
TEST(JobRecoveryTest, StalledServerThatComesBackIsNotRolledBack) {
  JobConfig c = Config(0, ASP);
  c.mutable_cluster()->set_dead_after_ms(300);
  FakeServerOps ops;
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  std::atomic<bool> beat{true}, server_beats{true};
  std::thread beater([&] {  // The workers heartbeat; the server stalls.
    while (beat) {
      for (uint32_t r = 0; r < 2; ++r) {
        HeartbeatRequest hb;
        hb.set_role(WORKER);
        hb.set_index(r);
        hb.set_incarnation(2 + r);
        HeartbeatResponse resp;
        (void)job.Heartbeat(hb, &resp);
      }
      if (server_beats) {
        HeartbeatRequest hb;
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
  absl::SleepFor(absl::Milliseconds(600));  // Declared dead.
  JobStatusResponse status;
  job.JobStatus(&status);
  EXPECT_EQ(status.state(), "recovering");
  EXPECT_EQ(Step(&job, 0, s0->generation(), 1, 100).code(),
            absl::StatusCode::kDeadlineExceeded);  // Paused.
  // Its next heartbeat is told to rejoin; it does, with its state.
  HeartbeatRequest hb;
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
  FakeServerOps ops;
  RestorePoint point;
  point.initial = false;
  point.clock = 3;
  point.dir = "ckpt-3";
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  job.Start();
  auto s0 = StartOf(&job, 0);
  ASSERT_TRUE(s0.ok());
  ops.AddPoint(point);
  absl::SleepFor(absl::Milliseconds(150));
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, SERVER, 0, 77), &resp).ok());
  EXPECT_TRUE(Step(&job, 0, s0->generation(), 0).ok()) << "the clocks did not resume";
  const std::vector<FakeServerOps::Restored> restores = ops.restores();
  ASSERT_EQ(restores.size(), 2u);
  EXPECT_EQ(restores[1].index, std::optional<uint32_t>(0));
  EXPECT_EQ(restores[1].point.dir, "ckpt-3");
  EXPECT_EQ(restores[1].generation, s0->generation());
  EXPECT_EQ(job.generation(), s0->generation());
}

// A restarted scheduler learns the job from the processes that rejoin: it
// asks unknown heartbeaters to rejoin, takes their clocks, builds a map newer
// than any version they hold, and goes on in their generation without
// restoring anything.
TEST(JobTakeoverTest, LiveProcessesRejoinWithTheirClocksAndMapVersions) {
  const JobConfig c = Config(0);
  FakeServerOps ops;
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  HeartbeatRequest hb;
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
  FakeServerOps ops;
  RestorePoint point;
  point.initial = false;
  point.clock = 4;
  point.dir = "ckpt-4";
  point.positions = {{0, "a"}, {1, "b"}};
  ops.AddPoint(point);
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
  EXPECT_EQ(ops.restores()[0].point.dir, "ckpt-4");
  JobStatusResponse status;
  job.JobStatus(&status);
  ASSERT_EQ(status.recoveries_size(), 1);
  EXPECT_EQ(status.recoveries(0).kind(), "rollback");
  EXPECT_NE(status.recoveries(0).cause().find("server 0 registered without"),
            std::string::npos)
      << status.recoveries(0).cause();
}

// Every worker failed (here: reported an error it cannot recover from) and
// none came back: the job fails, naming each and why.
TEST(JobLifecycleTest, EveryWorkerDeadFailsTheJobWithTheirReasons) {
  JobConfig c = Config(0, ASP, "");
  c.mutable_cluster()->set_worker_deadline_ms(300);
  FakeServerOps ops;
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
  FakeServerOps ops;
  JobCoordinator job(c, nullptr, &ops);
  RegisterAll(&job, c);
  RegisterResponse resp;
  HeartbeatRequest hb;
  hb.set_role(WORKER);
  hb.set_index(1);
  hb.set_incarnation(3);
  HeartbeatResponse hr;
  ASSERT_TRUE(job.Heartbeat(hb, &hr).ok());
  EXPECT_EQ(job.Register(Req(c, WORKER, 1, 50), &resp).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(job.Register(Req(c, WORKER, 1, 3), &resp).ok()) << "the holder's retry";
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_TRUE(job.Register(Req(c, WORKER, 1, 50), &resp).ok());
  // The old process is told it was replaced.
  EXPECT_EQ(job.Heartbeat(hb, &hr).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardps
