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
// clocks 4 and 8, with nobody past the cut, recording each worker's position.
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
  ASSERT_EQ(cuts.size(), 2u);
  EXPECT_EQ(cuts[0].clock, 4u);
  EXPECT_EQ(cuts[1].clock, 8u);
  for (const Cut& cut : cuts) {
    EXPECT_LT(cut.max_granted, cut.clock) << "a worker started a step past the cut";
    EXPECT_EQ(cut.positions.at(0), "w0@" + std::to_string(cut.clock));
    EXPECT_EQ(cut.positions.at(1), "w1@" + std::to_string(cut.clock));
  }
  EXPECT_EQ(job.Checkpoints(), (std::vector<uint64_t>{4, 8}));
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

}  // namespace
}  // namespace shardps
