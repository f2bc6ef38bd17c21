// The trainer against a fake job clock and in-process tables
// (trainer_test_harness.h): the order of clock waits, pulls, pushes and
// ticks of each step pipeline, refused prefetches and metrics reports.
#include "worker/trainer.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/trainer_test_harness.h"

namespace shardps {
namespace {

using testing::CheckProtocol;
using testing::Config;
using testing::Event;
using testing::EventLog;
using testing::FakeClock;
using testing::kBatch;
using testing::kLinesPerFile;
using testing::kSteps;
using testing::LossSteps;
using testing::Range;
using testing::ToString;
using testing::TrainerTest;
using testing::TrainRun;

TEST_F(TrainerTest, BspWaitsPullsPushesAndTicksEachStepInOrder) {
  EventLog log;
  FakeClock clock(&log);
  const TrainRun run = Train(Config(BSP, /*prefetch=*/true), &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  EXPECT_EQ(run.summary.samples, kSteps * kBatch);
  std::vector<std::string> want;
  for (uint64_t t = 0; t < kSteps; ++t) {
    for (const std::string& e : {absl::StrCat("wait ", t), absl::StrCat("pull ", t),
                                 absl::StrCat("push ", t), absl::StrCat("tick ", t + 1)}) {
      want.push_back(e);
    }
  }
  std::vector<std::string> got;
  for (const Event& e : run.events) got.push_back(ToString(e));
  EXPECT_EQ(got, want);
  CheckProtocol(run, 0);
  // Each tick carries the data position after its step: all different.
  std::set<std::string> positions;
  for (const Event& e : run.Only(Event::kTick)) positions.insert(e.position);
  EXPECT_EQ(positions.size(), kSteps);
  EXPECT_EQ(LossSteps(run), Range(0, kSteps));
  EXPECT_EQ(run.ranks, std::set<uint32_t>{0});
}

TEST_F(TrainerTest, LocalModeTakesTheSameStepsAsAnOpenClock) {
  const JobConfig config = Config(BSP, true);
  EventLog local_log;
  const TrainRun local = Train(config, nullptr, &local_log);
  ASSERT_TRUE(local.status.ok()) << local.status;
  EventLog log;
  FakeClock clock(&log);
  const TrainRun ps = Train(config, &clock, &log);
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  EXPECT_EQ(local.summary.steps, kSteps);
  ASSERT_EQ(local.losses.size(), kSteps);
  EXPECT_EQ(local.losses, ps.losses);  // Bit for bit (%.17g).
  EXPECT_EQ(local.Only(Event::kPush).size(), kSteps);
}

TEST_F(TrainerTest, LocalPrefetchPullsTheNextStepBeforePushing) {
  EventLog log;
  const TrainRun run = Train(Config(SSP, true), nullptr, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  EXPECT_EQ(LossSteps(run), Range(0, kSteps));
  for (uint64_t t = 0; t + 1 < kSteps; ++t) {
    EXPECT_LT(run.IndexOf(Event::kPull, t + 1), run.IndexOf(Event::kPush, t))
        << "step " << t + 1 << " was not prefetched:\n"
        << ToString(run.events);
  }
  // Steps 1 on pull in two parts (read-your-own-writes prefetch).
  EXPECT_EQ(run.Only(Event::kPull).size(), 2 * kSteps - 1);
}

TEST_F(TrainerTest, SspPrefetchProbesAndPullsTheNextStepBeforeTicking) {
  EventLog log;
  FakeClock clock(&log);
  const TrainRun run = Train(Config(SSP, true), &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  CheckProtocol(run, 0);
  EXPECT_EQ(run.Only(Event::kTick).size(), kSteps);
  EXPECT_EQ(run.Only(Event::kPull).size(), 2 * kSteps - 1);
  // Step t + 1 is probed (not waited for) and its rows that step t does not
  // push are pulled once step t - 1's push is acknowledged: before step t's
  // push is issued, and so before clock t + 1 is ticked. The rest of step
  // t + 1 is pulled after step t's push. Only step 0 waits for the clock.
  for (uint64_t t = 0; t + 1 < kSteps; ++t) {
    const int probe = run.IndexOf(Event::kProbe, t + 1);
    ASSERT_GE(probe, 0) << "no probe for step " << t + 1 << ":\n" << ToString(run.events);
    EXPECT_LT(probe, run.IndexOf(Event::kTick, t + 1)) << ToString(run.events);
    EXPECT_LT(run.IndexOf(Event::kPull, t + 1), run.IndexOf(Event::kPush, t))
        << ToString(run.events);
  }
  for (const Event& e : run.Only(Event::kWait)) EXPECT_EQ(e.n, 0u) << ToString(run.events);
  EXPECT_EQ(LossSteps(run), Range(0, kSteps));
}

TEST_F(TrainerTest, RefusedPrefetchesFallBackToTheSynchronousStep) {
  // The clock never allows a step early: each step waits for the clock
  // after the previous step's tick, and so trains exactly like SSP without
  // prefetch.
  EventLog log;
  FakeClock clock(&log);
  clock.allow_probes = false;
  const TrainRun run = Train(Config(SSP, true), &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  CheckProtocol(run, 0);
  for (uint64_t t = 1; t < kSteps; ++t) {
    const int wait = run.IndexOf(Event::kWait, t);
    ASSERT_GE(wait, 0) << ToString(run.events);
    EXPECT_LT(run.IndexOf(Event::kTick, t), wait) << ToString(run.events);
    EXPECT_LT(wait, run.IndexOf(Event::kPull, t)) << ToString(run.events);
  }

  EventLog sync_log;
  FakeClock sync_clock(&sync_log);
  const TrainRun sync = Train(Config(SSP, false), &sync_clock, &sync_log);
  ASSERT_TRUE(sync.status.ok()) << sync.status;
  ASSERT_EQ(sync.losses.size(), kSteps);
  EXPECT_EQ(run.losses, sync.losses);
}

TEST_F(TrainerTest, ReportsCarryRankAndStep) {
  EventLog log;
  FakeClock clock(&log);
  TrainerOptions o = Options();
  o.rank = 1;
  // Rank 1 of 2 is dealt whole files (worker/data/shard_plan.h): one of the
  // 3 in epoch 0, two in epoch 1.
  o.num_workers = 2;
  o.report_every = absl::ZeroDuration();
  o.start_step = 5;
  const TrainRun run = Train(Config(SSP, true), &clock, &log, o);
  ASSERT_TRUE(run.status.ok()) << run.status;  // Failing reports do not stop training.
  const uint64_t steps = 3 * kLinesPerFile / kBatch;
  EXPECT_EQ(run.summary.steps, steps);
  EXPECT_EQ(run.ranks, std::set<uint32_t>{1});
  ASSERT_EQ(run.reports.size(), steps);
  for (uint64_t i = 0; i < steps; ++i) {
    EXPECT_EQ(run.reports[i].rank(), 1u);
    EXPECT_EQ(run.reports[i].step(), 5 + i + 1);
    EXPECT_EQ(run.reports[i].samples(), (i + 1) * kBatch);
    EXPECT_GT(run.reports[i].train_loss(), 0);
    EXPECT_FALSE(run.reports[i].done());
  }
}

}  // namespace
}  // namespace shardps
