#include "scheduler/clock.h"

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/thread_state.h"

namespace shardps {
namespace {

absl::Time Soon() { return absl::Now() + absl::Milliseconds(30); }
absl::Time Later() { return absl::Now() + absl::Seconds(30); }

TEST(ClockTest, BspWaitsForEveryWorker) {
  ClockService clock(2, 0);
  ASSERT_TRUE(clock.WaitToStart(0, 0, Soon()).ok());
  ASSERT_TRUE(clock.Tick(0, 1).ok());
  // Worker 0 may not start step 1 while worker 1 has completed 0 steps.
  EXPECT_EQ(clock.WaitToStart(0, 1, Soon()).status().code(), absl::StatusCode::kDeadlineExceeded);
  clock.NoteGranted(0, 1);  // Worker 1 started step 0 (not asked here).
  testing::BackgroundCall waiter([&] { return clock.WaitToStart(0, 1, Later()).status(); });
  ASSERT_TRUE(waiter.WaitUntilBlocked().ok()) << "worker 0 did not wait for worker 1";
  ASSERT_TRUE(clock.Tick(1, 1).ok());
  EXPECT_TRUE(waiter.Join().ok());
}

TEST(ClockTest, SspAllowsExactlySStepsOfLead) {
  ClockService clock(2, 2);
  for (uint64_t c = 1; c <= 3; ++c) {
    ASSERT_TRUE(clock.WaitToStart(0, c - 1, Soon()).ok()) << c;
    ASSERT_TRUE(clock.Tick(0, c).ok());
  }
  // min = 0: step 2 was allowed (0 >= 2 - 2), step 3 is not.
  EXPECT_EQ(clock.WaitToStart(0, 3, Soon()).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(clock.MaxSpread(), 3u);  // = s + 1, the bound
}

TEST(ClockTest, AspNeverWaits) {
  ClockService clock(2, ClockService::kUnbounded);
  for (uint64_t c = 1; c <= 100; ++c) {
    ASSERT_TRUE(clock.WaitToStart(0, c - 1, absl::Now()).ok());
    ASSERT_TRUE(clock.Tick(0, c).ok());
  }
  EXPECT_EQ(clock.MaxSpread(), 100u);
}

TEST(ClockTest, DeadAndFinishedWorkersLeaveTheMinimum) {
  ClockService clock(3, 1);
  clock.NoteGranted(1, 0);
  ASSERT_TRUE(clock.Tick(0, 1).ok());
  ASSERT_TRUE(clock.Tick(0, 2).ok());
  EXPECT_FALSE(clock.WaitToStart(0, 2, Soon()).ok());
  clock.MarkDead(1);
  EXPECT_FALSE(clock.WaitToStart(0, 2, Soon()).ok());  // worker 2 at 0
  clock.MarkFinished(2);
  EXPECT_TRUE(clock.WaitToStart(0, 2, Soon()).ok());
  EXPECT_EQ(clock.WaitToStart(1, 0, Soon()).status().code(), absl::StatusCode::kFailedPrecondition);
  clock.Revive(1, 0);
  EXPECT_FALSE(clock.WaitToStart(0, 2, Soon()).ok());  // 1 is back at 0
}

TEST(ClockTest, TicksAdvanceByOne) {
  ClockService clock(1, 0);
  clock.NoteGranted(5, 0);
  EXPECT_TRUE(clock.Tick(0, 1).ok());
  EXPECT_TRUE(clock.Tick(0, 1).ok());  // retry is idempotent
  EXPECT_EQ(clock.Tick(0, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(clock.Tick(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(clock.Tick(5, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(clock.WaitToStart(9, 0, Soon()).status().code(), absl::StatusCode::kInvalidArgument);
}

// A worker completes only steps it was allowed to start: a tick beyond its
// largest grant + 1 is refused, naming the worker and what it was granted;
// Revive and Rewind take the grants back to the clock they set.
TEST(ClockTest, TickBeyondTheGrantedStepIsRefused) {
  ClockService clock(2, ClockService::kUnbounded);
  auto refused = clock.Tick(1, 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("worker 1 ticked to clock 1"), std::string::npos)
      << refused.status();
  ASSERT_TRUE(clock.WaitToStart(1, 0, Soon()).ok());
  EXPECT_TRUE(clock.Tick(1, 1).ok());
  EXPECT_EQ(clock.Tick(1, 2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(clock.Tick(1, 1).ok()) << "a repeated tick stays idempotent";
  // A prefetch grant of step 2 allows ticks up to 3, one at a time.
  ASSERT_TRUE(clock.WaitToStart(1, 2, Soon()).ok());
  EXPECT_TRUE(clock.Tick(1, 2).ok());
  EXPECT_TRUE(clock.Tick(1, 3).ok());
  EXPECT_EQ(clock.Tick(1, 4).status().code(), absl::StatusCode::kFailedPrecondition);
  clock.Revive(1, 3);
  EXPECT_EQ(clock.Tick(1, 4).status().code(), absl::StatusCode::kFailedPrecondition);
  clock.NoteGranted(3, 1);  // A rejoining process reports its grant.
  EXPECT_TRUE(clock.Tick(1, 4).ok());
  clock.Rewind(7, 2, {true, true});
  EXPECT_EQ(clock.Tick(1, 3, 7).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ClockTest, HoldBlocksEveryModeUntilRelease) {
  ClockService clock(2, ClockService::kUnbounded);
  clock.Hold(2);
  clock.NoteGranted(1, 0);
  clock.NoteGranted(1, 1);
  ASSERT_TRUE(clock.Tick(0, 1).ok());
  ASSERT_TRUE(clock.Tick(0, 2).ok());
  EXPECT_FALSE(clock.WaitToStart(0, 2, Soon()).ok());
  EXPECT_FALSE(clock.AllReachedHold());
  ASSERT_TRUE(clock.Tick(1, 1).ok());
  ASSERT_TRUE(clock.Tick(1, 2).ok());
  EXPECT_TRUE(clock.AllReachedHold());
  clock.Release();
  EXPECT_TRUE(clock.WaitToStart(0, 2, Soon()).ok());
}

TEST(ClockTest, StopEndsTrainingAtTheFirstUnstartedClock) {
  ClockService clock(2, 1);
  ASSERT_TRUE(clock.WaitToStart(0, 0, Soon()).ok());
  ASSERT_TRUE(clock.Tick(0, 1).ok());
  ASSERT_TRUE(clock.WaitToStart(0, 1, Soon()).ok());  // SSP(1): step 1 started.
  // The first clock nobody started: 2 (worker 1 may still train to it).
  EXPECT_EQ(clock.StopAtFirstUnstarted("early stopping"), 2u);
  EXPECT_TRUE(clock.WaitToStart(1, 0, Soon()).ok());
  ASSERT_TRUE(clock.Tick(1, 1).ok());
  EXPECT_TRUE(clock.WaitToStart(1, 1, Soon()).ok());
  ASSERT_TRUE(clock.Tick(0, 2).ok());
  const absl::Status st = clock.WaitToStart(0, 2, Later()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(), "training stopped at clock 2: early stopping");
  EXPECT_EQ(clock.StopClock(), 2u);
  clock.StopAt(5, "later");  // An earlier stop is kept.
  EXPECT_EQ(clock.StopClock(), 2u);
  clock.Rewind(7, 1, {true, true});  // A rollback lifts it.
  EXPECT_FALSE(clock.StopClock().has_value());
  EXPECT_TRUE(clock.WaitToStart(0, 1, Soon(), 7).ok());
}

TEST(ClockTest, StopWakesAWaiter) {
  ClockService clock(2, 0);
  clock.NoteGranted(0, 0);
  ASSERT_TRUE(clock.Tick(0, 1).ok());
  testing::BackgroundCall waiter([&] { return clock.WaitToStart(0, 1, Later()).status(); });
  ASSERT_TRUE(waiter.WaitUntilBlocked().ok());
  clock.StopAt(1, "early stopping");
  EXPECT_EQ(waiter.Join().code(), absl::StatusCode::kOutOfRange);
}

TEST(ClockTest, AbortWakesWaiters) {
  ClockService clock(2, 0);
  clock.NoteGranted(0, 0);
  ASSERT_TRUE(clock.Tick(0, 1).ok());
  testing::BackgroundCall waiter([&] { return clock.WaitToStart(0, 1, Later()).status(); });
  ASSERT_TRUE(waiter.WaitUntilBlocked().ok());
  clock.Abort("server 1 dead past its deadline");
  const absl::Status st = waiter.Join();
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(st.message(), "server 1 dead past its deadline");
}

// Many workers at random speeds: whenever a worker starts step t, every live
// worker has completed >= t - s steps, and the spread stays <= s + 1.
void RunRandomWorkers(uint32_t staleness) {
  constexpr int kWorkers = 4, kSteps = 150;
  ClockService clock(kWorkers, staleness);
  std::vector<std::atomic<uint64_t>> done(kWorkers);
  std::atomic<int> violations{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(r);
      for (uint64_t t = 0; t < kSteps; ++t) {
        ASSERT_TRUE(clock.WaitToStart(r, t, Later()).ok());
        for (int o = 0; o < kWorkers; ++o) {
          if (done[o].load() + staleness < t) violations++;
        }
        if (rng() % 4 == 0) absl::SleepFor(absl::Microseconds(rng() % 300 * (r + 1)));
        done[r].store(t + 1);
        ASSERT_TRUE(clock.Tick(r, t + 1).ok());
      }
      clock.MarkFinished(r);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_LE(clock.MaxSpread(), staleness + 1);
}

TEST(ClockTest, StalenessBoundHoldsUnderRandomSpeedsBsp) { RunRandomWorkers(0); }
TEST(ClockTest, StalenessBoundHoldsUnderRandomSpeedsSsp2) { RunRandomWorkers(2); }

}  // namespace
}  // namespace shardps
