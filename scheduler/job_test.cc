#include "scheduler/job.h"

#include <thread>

#include "absl/time/clock.h"
#include "common/config.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

JobConfig Config(uint64_t every_steps) {
  JobConfig c;
  auto* t = c.add_tables();
  t->set_id(1);
  t->set_name("emb");
  t->set_dim(4);
  t->mutable_optimizer()->mutable_sgd()->set_learning_rate(1);
  c.mutable_data()->add_train_files("x");
  c.mutable_cluster()->set_num_servers(1);
  c.mutable_cluster()->set_num_workers(2);
  c.mutable_cluster()->set_mode(ASP);
  c.mutable_checkpoint()->set_dir("/unused");
  c.mutable_checkpoint()->set_every_steps(every_steps);
  EXPECT_TRUE(FinalizeJobConfig(&c).ok());
  return c;
}

// Waits until `n` checkpoints were written (the final one comes from the
// checkpoint thread after the workers finished).
void WaitCheckpoints(const JobCoordinator& job, size_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (job.Checkpoints().size() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void RegisterAll(JobCoordinator* job, const JobConfig& c) {
  RegisterRequest r;
  r.set_config_fingerprint(ConfigFingerprint(c));
  RegisterResponse resp;
  r.set_role(SERVER);
  r.set_address("127.0.0.1:1");
  ASSERT_TRUE(job->Register(r, &resp).ok());
  r.set_role(WORKER);
  r.clear_address();
  ASSERT_TRUE(job->Register(r, &resp).ok());
  ASSERT_TRUE(job->Register(r, &resp).ok());
}

// Two ASP workers run 10 steps; checkpoints every 4 steps must cut at
// clocks 4 and 8, with nobody past the cut, recording each worker's position;
// the end (10) is the final checkpoint.
TEST(JobCheckpointTest, HoldsEveryModeAtTheCutAndRecordsPositions) {
  const JobConfig c = Config(4);
  JobCoordinator job(c, nullptr);
  struct Cut {
    uint64_t clock, max_granted;
    std::map<uint32_t, std::string> positions;
  };
  std::vector<Cut> cuts;
  job.SetCheckpointer([&](uint64_t clock, const std::map<uint32_t, std::string>& pos) {
    cuts.push_back({clock, job.clock().MaxGranted(), pos});
    return absl::OkStatus();
  });
  RegisterAll(&job, c);
  job.Start();
  std::vector<std::thread> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    workers.emplace_back([&job, r] {
      for (uint64_t t = 0; t < 10; ++t) {
        WaitClockRequest w;
        w.set_rank(r);
        w.set_step(t);
        w.set_timeout_ms(20000);
        WaitClockResponse wr;
        ASSERT_TRUE(job.WaitClock(w, &wr).ok()) << t;
        if (r == 1) absl::SleepFor(absl::Milliseconds(3));  // a slower worker
        TickRequest tick;
        tick.set_rank(r);
        tick.set_clock(t + 1);
        tick.set_position("w" + std::to_string(r) + "@" + std::to_string(t + 1));
        TickResponse tr;
        ASSERT_TRUE(job.Tick(tick, &tr).ok());
      }
      MetricsReport done;
      done.set_rank(r);
      done.set_done(true);
      done.set_final(true);
      ASSERT_TRUE(job.ReportMetrics(done).ok());
    });
  }
  for (auto& w : workers) w.join();
  WaitCheckpoints(job, 3);
  ASSERT_EQ(cuts.size(), 3u);
  EXPECT_EQ(cuts[0].clock, 4u);
  EXPECT_EQ(cuts[1].clock, 8u);
  EXPECT_EQ(cuts[2].clock, 10u);
  cuts.pop_back();  // The final cut: every worker finished.
  for (const Cut& cut : cuts) {
    EXPECT_LT(cut.max_granted, cut.clock) << "a worker started a step past the cut";
    EXPECT_EQ(cut.positions.at(0), "w0@" + std::to_string(cut.clock));
    EXPECT_EQ(cut.positions.at(1), "w1@" + std::to_string(cut.clock));
  }
  EXPECT_EQ(job.Checkpoints(), (std::vector<uint64_t>{4, 8, 10}));
}

// Runs two ASP workers for `steps` steps, `delay` per step, then reports done.
std::vector<std::thread> RunWorkers(JobCoordinator* job, uint64_t steps,
                                    absl::Duration delay) {
  std::vector<std::thread> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    workers.emplace_back([job, r, steps, delay] {
      for (uint64_t t = 0; t < steps; ++t) {
        WaitClockRequest w;
        w.set_rank(r);
        w.set_step(t);
        w.set_timeout_ms(20000);
        WaitClockResponse wr;
        ASSERT_TRUE(job->WaitClock(w, &wr).ok()) << t;
        absl::SleepFor(delay);
        TickRequest tick;
        tick.set_rank(r);
        tick.set_clock(t + 1);
        tick.set_position("w" + std::to_string(r) + "@" + std::to_string(t + 1));
        TickResponse tr;
        ASSERT_TRUE(job->Tick(tick, &tr).ok());
      }
      MetricsReport done;
      done.set_rank(r);
      done.set_done(true);
      done.set_final(true);
      ASSERT_TRUE(job->ReportMetrics(done).ok());
    });
  }
  return workers;
}

// An on-demand checkpoint in the middle of a run with every_steps = 1000:
// it is cut at a clock nobody had started when asked, well before 1000, and
// the periodic schedule goes on afterwards.
TEST(JobCheckpointTest, CheckpointNowCutsAtTheNextUnstartedClock) {
  const JobConfig c = Config(1000);
  JobCoordinator job(c, nullptr);
  std::vector<std::pair<uint64_t, uint64_t>> cuts;  // (clock, max granted)
  job.SetCheckpointer([&](uint64_t clock, const std::map<uint32_t, std::string>& pos) {
    cuts.push_back({clock, job.clock().MaxGranted()});
    EXPECT_EQ(pos.at(0), "w0@" + std::to_string(clock));
    EXPECT_EQ(pos.at(1), "w1@" + std::to_string(clock));
    return absl::OkStatus();
  });
  RegisterAll(&job, c);
  job.Start();
  std::vector<std::thread> workers = RunWorkers(&job, 200, absl::Milliseconds(2));
  absl::SleepFor(absl::Milliseconds(100));
  const uint64_t asked_at = job.clock().MaxGranted();
  auto clock = job.CheckpointNow(absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_GT(*clock, asked_at);
  EXPECT_LT(*clock, 200u);
  for (auto& w : workers) w.join();
  WaitCheckpoints(job, 2);
  ASSERT_EQ(cuts.size(), 2u);  // 1000 is never reached; 200 is the final cut.
  EXPECT_EQ(cuts[0].first, *clock);
  EXPECT_EQ(cuts[1].first, 200u);
  EXPECT_LT(cuts[0].second, cuts[0].first) << "a worker started a step past the cut";
  // After the job ended there is nothing left to cut.
  auto after = job.CheckpointNow(absl::Now() + absl::Seconds(5));
  EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition) << after.status();
}

TEST(JobCheckpointTest, CheckpointNowWithoutCheckpointDirIsRefused) {
  const JobConfig c = Config(0);
  JobCoordinator job(c, nullptr);
  RegisterAll(&job, c);
  job.Start();
  auto clock = job.CheckpointNow(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(clock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(clock.status().message().find("checkpoint.dir"), std::string::npos);
}

// A checkpointer error reaches the caller; the job goes on.
TEST(JobCheckpointTest, CheckpointNowReportsTheWriteError) {
  const JobConfig c = Config(0);
  JobCoordinator job(c, nullptr);
  job.SetCheckpointer([](uint64_t, const std::map<uint32_t, std::string>&) {
    return absl::InternalError("disk full");
  });
  RegisterAll(&job, c);
  job.Start();
  std::vector<std::thread> workers = RunWorkers(&job, 100, absl::Milliseconds(2));
  auto clock = job.CheckpointNow(absl::Now() + absl::Seconds(20));
  EXPECT_EQ(clock.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(clock.status().message().find("disk full"), std::string::npos);
  for (auto& w : workers) w.join();  // Released after the failed cut.
}

TEST(JobCheckpointTest, ResumeRestoresServersBeforeWorkersGetTheMap) {
  const JobConfig c = Config(0);
  JobCoordinator job(c, nullptr);
  std::atomic<int> restores{0};
  JobCoordinator::Resume resume;
  resume.clock = 12;
  resume.positions = {{0, "p0"}, {1, "p1"}};
  resume.restore = [&] {
    absl::SleepFor(absl::Milliseconds(50));
    restores++;
    return absl::OkStatus();
  };
  job.SetResume(resume);
  job.Start();
  RegisterRequest r;
  r.set_config_fingerprint(ConfigFingerprint(c));
  r.set_role(SERVER);
  r.set_address("127.0.0.1:1");
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(r, &resp).ok());
  r.set_role(WORKER);
  r.clear_address();
  r.set_requested_index(1);
  ASSERT_TRUE(job.Register(r, &resp).ok());
  EXPECT_EQ(resp.resume_clock(), 12u);
  EXPECT_EQ(resp.resume_position(), "p1");
  GetPartitionMapRequest get;
  get.set_timeout_ms(10000);
  PartitionMapProto map;
  ASSERT_TRUE(job.GetPartitionMap(get, &map).ok());
  EXPECT_EQ(restores.load(), 1);  // The map came only after the restore.
}

RegisterRequest Rejoining(const JobConfig& c, Role role, uint32_t index, uint64_t clock,
                          uint64_t map_version) {
  RegisterRequest r;
  r.set_config_fingerprint(ConfigFingerprint(c));
  r.set_role(role);
  if (role == SERVER) r.set_address("127.0.0.1:1");
  r.set_requested_index(index);
  r.mutable_rejoin()->set_clock(clock);
  r.mutable_rejoin()->set_position("p" + std::to_string(clock));
  r.mutable_rejoin()->set_map_version(map_version);
  return r;
}

TEST(JobRecoverTest, RejoinIsRefusedWithoutRecoverModeOrAnIndex) {
  const JobConfig c = Config(0);
  JobCoordinator normal(c, nullptr);
  RegisterResponse resp;
  absl::Status st = normal.Register(Rejoining(c, WORKER, 0, 5, 1), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("--recover"), std::string::npos) << st;

  JobCoordinator recovering(c, nullptr);
  recovering.SetRecover(0);
  RegisterRequest no_index = Rejoining(c, WORKER, 0, 5, 1);
  no_index.clear_requested_index();
  st = recovering.Register(no_index, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("requested_index"), std::string::npos) << st;
}

// A restarted scheduler learns the job from the processes that rejoin: it
// asks unknown heartbeaters to rejoin, refuses clock calls (UNAVAILABLE,
// retried) until they have, takes their clocks, and builds a map newer than
// any version they hold.
TEST(JobRecoverTest, LiveProcessesRejoinWithTheirClocksAndMapVersions) {
  const JobConfig c = Config(0);
  JobCoordinator job(c, nullptr);
  job.SetRecover(0);
  job.Start();
  HeartbeatRequest hb;
  hb.set_role(WORKER);
  hb.set_index(1);
  HeartbeatResponse hr;
  ASSERT_TRUE(job.Heartbeat(hb, &hr).ok());
  EXPECT_TRUE(hr.rejoin());
  WaitClockRequest w;
  w.set_rank(1);
  w.set_step(8);
  WaitClockResponse wr;
  EXPECT_EQ(job.WaitClock(w, &wr).code(), absl::StatusCode::kUnavailable);

  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Rejoining(c, SERVER, 0, 0, 3), &resp).ok());
  ASSERT_TRUE(job.Register(Rejoining(c, WORKER, 0, 7, 3), &resp).ok());
  ASSERT_TRUE(job.Register(Rejoining(c, WORKER, 1, 8, 4), &resp).ok());
  EXPECT_EQ(job.clock().Clocks(), (std::vector<uint64_t>{7, 8}));
  ASSERT_TRUE(job.Map().has_value());
  EXPECT_GT(job.Map()->version(), 4u);
  JobStatusResponse status;
  job.JobStatus(&status);
  EXPECT_EQ(status.state(), "running");
  w.set_timeout_ms(5000);
  EXPECT_TRUE(job.WaitClock(w, &wr).ok());  // ASP: rank 1 goes on at step 8.
  HeartbeatResponse known;
  ASSERT_TRUE(job.Heartbeat(hb, &known).ok());
  EXPECT_FALSE(known.rejoin());
}

}  // namespace
}  // namespace shardps
