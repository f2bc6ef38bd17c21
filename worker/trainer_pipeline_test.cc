// Each step pipeline that runs with a clock (synchronous in BSP and in SSP
// without prefetch, prefetching in SSP with prefetch): refusals of the
// clock end training, resuming at a start step and position, max_steps and
// a stop by the clock.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/generation.h"
#include "gtest/gtest.h"
#include "worker/trainer.h"
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

// The same for each pipeline that runs with a clock: synchronous in BSP and
// in SSP without prefetch, prefetching in SSP with prefetch.
struct Pipeline {
  const char* name;
  ConsistencyMode mode;
  bool prefetch;
};

class TrainerPipelineTest : public TrainerTest, public ::testing::WithParamInterface<Pipeline> {
 protected:
  JobConfig PipelineConfig() { return Config(GetParam().mode, GetParam().prefetch); }
};

TEST_P(TrainerPipelineTest, RefusedClockWaitEndsTraining) {
  for (uint64_t at : {0, 5}) {
    SCOPED_TRACE(at);
    EventLog log;
    FakeClock clock(&log);
    clock.refuse_wait_at = at;
    const TrainRun run = Train(PipelineConfig(), &clock, &log);
    EXPECT_TRUE(IsStaleGeneration(run.status)) << run.status;
    CheckProtocol(run, 0);
    for (const Event& e : run.events) {
      if (e.kind == Event::kPush || e.kind == Event::kPull) {
        EXPECT_LT(e.n, at) << ToString(run.events);
      }
    }
    // Refused once: no asking again.
    EXPECT_EQ(
        std::count_if(run.events.begin(), run.events.end(), [](const Event& e) { return !e.ok; }),
        1)
        << ToString(run.events);
    // The steps before: all logged (but step at - 1 of the async push,
    // whose chain made the refused probe).
    EXPECT_EQ(LossSteps(run), Range(0, run.losses.size()));
    EXPECT_LE(run.losses.size(), at);
    EXPECT_GE(run.losses.size() + 1, at);
  }
}

TEST_P(TrainerPipelineTest, RefusedTickEndsTraining) {
  EventLog log;
  FakeClock clock(&log);
  clock.refuse_tick_at = 4;
  clock.refusal = absl::FailedPreconditionError("refused");
  const TrainRun run = Train(PipelineConfig(), &clock, &log);
  EXPECT_EQ(run.status, clock.refusal);
  CheckProtocol(run, 0);
  const std::vector<Event> pushes = run.Only(Event::kPush);
  ASSERT_FALSE(pushes.empty());
  EXPECT_EQ(pushes.back().n, 3u) << "pushed after the refused tick:\n" << ToString(run.events);
  EXPECT_EQ(run.Only(Event::kTick).size(), 3u);
}

TEST_P(TrainerPipelineTest, ResumesAtStartStepAndPosition) {
  EventLog full_log;
  FakeClock full_clock(&full_log);
  const TrainRun full = Train(PipelineConfig(), &full_clock, &full_log);
  ASSERT_TRUE(full.status.ok()) << full.status;
  const std::vector<Event> full_ticks = full.Only(Event::kTick);
  ASSERT_EQ(full_ticks.size(), kSteps);

  constexpr uint64_t kStart = 7;
  EventLog log;
  FakeClock clock(&log);
  TrainerOptions o = Options();
  o.start_step = kStart;
  o.start_position = full_ticks[kStart - 1].position;  // Clock kStart's.
  const TrainRun run = Train(PipelineConfig(), &clock, &log, o);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps - kStart);
  CheckProtocol(run, kStart);
  ASSERT_FALSE(run.events.empty());
  EXPECT_EQ(ToString(run.events[0]), absl::StrCat("wait ", kStart));
  // The same clocks with the same data positions as the uninterrupted run.
  const std::vector<Event> ticks = run.Only(Event::kTick);
  ASSERT_EQ(ticks.size(), kSteps - kStart);
  for (size_t i = 0; i < ticks.size(); ++i) {
    EXPECT_EQ(ticks[i].n, full_ticks[kStart + i].n);
    EXPECT_EQ(ticks[i].position, full_ticks[kStart + i].position) << "clock " << ticks[i].n;
  }
  EXPECT_EQ(LossSteps(run), Range(kStart, kSteps));
  // The job's samples of this share count those before the start too.
  EXPECT_EQ(run.summary.samples, (kSteps - kStart) * kBatch);
  EXPECT_EQ(run.summary.job_samples, kSteps * kBatch);
  EXPECT_EQ(full.summary.job_samples, kSteps * kBatch);
}

// max_steps 7, or the clock refusing step 7 (early stopping): same steps.
TEST_P(TrainerPipelineTest, HonoursMaxStepsAndAStopByTheClock) {
  for (const bool by_clock : {false, true}) {
    for (uint64_t start : {0, 3}) {
      SCOPED_TRACE(absl::StrCat("start ", start, by_clock ? ", stopped by the clock" : ""));
      EventLog log;
      FakeClock clock(&log);
      TrainerOptions o = Options();
      if (by_clock) clock.refuse_wait_at = 7;
      if (by_clock) clock.refusal = absl::OutOfRangeError("training stopped at clock 7");
      if (!by_clock) o.max_steps = 7;  // A clock: the last step is 6.
      o.start_step = start;
      const TrainRun run = Train(PipelineConfig(), &clock, &log, o);
      ASSERT_TRUE(run.status.ok()) << run.status;
      EXPECT_EQ(run.summary.steps, 7 - start);
      CheckProtocol(run, start);
      for (const Event& e : run.events) {
        if (e.kind == Event::kTick) {
          EXPECT_LE(e.n, 7u);
        } else if (e.ok) {
          EXPECT_LT(e.n, 7u) << ToString(run.events);
        }
      }
      EXPECT_EQ(run.Only(Event::kTick).back().n, 7u);
      EXPECT_EQ(LossSteps(run), Range(start, 7));
    }
  }
}

TEST_P(TrainerPipelineTest, HonoursMaxStepsFromTheConfig) {
  JobConfig config = PipelineConfig();
  config.mutable_training()->set_max_steps(5);
  EventLog log;
  FakeClock clock(&log);
  const TrainRun run = Train(config, &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, 5u);
  EXPECT_EQ(run.Only(Event::kPush).size(), 5u);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, TrainerPipelineTest,
                         ::testing::Values(Pipeline{"BspSynchronous", BSP, true},
                                           Pipeline{"SspSynchronous", SSP, false},
                                           Pipeline{"SspPrefetching", SSP, true}),
                         [](const ::testing::TestParamInfo<Pipeline>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace shardps
