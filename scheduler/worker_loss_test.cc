// WorkerLoss (worker_loss.h): the policy's answers, DROP's estimate, the
// leases of lost shares, and the rewind wait after a rollback.
#include "scheduler/worker_loss.h"

#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(WorkerLossTest, ThePolicySaysWhoLeavesTheClock) {
  EXPECT_FALSE(WorkerLoss(ClusterConfig::WAIT).LeavesClock());
  EXPECT_TRUE(WorkerLoss(ClusterConfig::REASSIGN).LeavesClock());
  EXPECT_TRUE(WorkerLoss(ClusterConfig::REASSIGN).reassigns());
  EXPECT_TRUE(WorkerLoss(ClusterConfig::DROP).LeavesClock());
  EXPECT_TRUE(WorkerLoss(ClusterConfig::DROP).drops());
  EXPECT_EQ(WorkerLoss(ClusterConfig::DROP).policy_name(), "DROP");
}

// DROP counts, per lost rank, the steps the longest finished worker trained
// beyond the lost one's clock; other policies never end without a share.
TEST(WorkerLossTest, DropEstimatesTheUntrainedSamples) {
  const std::vector<uint64_t> clocks = {300, 120, 290};
  EXPECT_EQ(WorkerLoss(ClusterConfig::DROP).UntrainedSamples(300, clocks, {1}, 128),
            (300 - 120) * 128u);
  EXPECT_EQ(WorkerLoss(ClusterConfig::DROP).UntrainedSamples(300, clocks, {1, 2}, 128),
            (180 + 10) * 128u);
  EXPECT_EQ(WorkerLoss(ClusterConfig::DROP).UntrainedSamples(100, clocks, {1}, 128), 0u)
      << "a lost worker ahead of every finished one left nothing";
  EXPECT_EQ(WorkerLoss(ClusterConfig::REASSIGN).UntrainedSamples(300, clocks, {1}, 128), 0u);
}

// A lost share goes to one taker at a time: not offered again within the
// hold, offered again after it (the taker never registered).
TEST(WorkerLossTest, ALeaseHoldsAShareForOneTaker) {
  WorkerLoss loss(ClusterConfig::REASSIGN);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Duration hold = absl::Seconds(4);
  EXPECT_TRUE(loss.TakeLease(1, t0, hold));
  EXPECT_FALSE(loss.TakeLease(1, t0 + absl::Seconds(3), hold));
  EXPECT_TRUE(loss.TakeLease(2, t0 + absl::Seconds(3), hold)) << "another share is free";
  EXPECT_TRUE(loss.TakeLease(1, t0 + absl::Seconds(4), hold));
}

// After a rollback every worker must start again; the last one to start
// completes the recovery; the clocks are held until then or the deadline.
TEST(WorkerLossTest, TheRewindWaitsForEveryWorkerOrItsDeadline) {
  WorkerLoss loss(ClusterConfig::WAIT);
  loss.RecordTick(0, 512);
  loss.BeginRewind({0, 1, 2});
  EXPECT_TRUE(loss.tick_samples().empty()) << "the old generation's ticks are forgotten";
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  loss.HoldClocks(t0);
  EXPECT_TRUE(loss.clocks_held());
  EXPECT_FALSE(loss.HoldExpired(t0 + absl::Seconds(10), absl::Seconds(10)));
  EXPECT_TRUE(loss.HoldExpired(t0 + absl::Seconds(11), absl::Seconds(10)));
  EXPECT_FALSE(loss.Started(1));
  EXPECT_FALSE(loss.Started(1)) << "a second start of the same worker";
  EXPECT_FALSE(loss.Started(7)) << "never awaited";
  loss.StopAwaiting(2);
  EXPECT_EQ(loss.Awaited(), std::vector<uint32_t>{0});
  EXPECT_TRUE(loss.Started(0)) << "the last one awaited";
  EXPECT_FALSE(loss.Started(0));
  loss.ReleaseClocks(/*forget_awaited=*/true);
  EXPECT_FALSE(loss.clocks_held());
  EXPECT_FALSE(loss.HoldExpired(t0 + absl::Hours(1), absl::Seconds(10)));
  // A job's first start: nothing held, and nothing to complete.
  loss.BeginRewind({0, 1});
  loss.ReleaseClocks(/*forget_awaited=*/true);
  EXPECT_TRUE(loss.Awaited().empty());
  EXPECT_FALSE(loss.Started(0));
}

}  // namespace
}  // namespace shardps
