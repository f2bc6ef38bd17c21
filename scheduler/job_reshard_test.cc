// Resharding through the coordinator (JobCoordinator::Reshard, the control
// thread's move, docs/design.md "Resharding") against fake servers: a
// 2 -> 3 -> 2 move pre-copies from one cut, then catches up and switches at
// a later cut (a delta on the first) no worker has started, with the clocks
// held through the catch-up and the switch; the joining spare is restored
// to the first cut; each moved partition is pre-copied and caught up on its
// destination and dropped by its source in the switch to the next map
// version; a move that needs a server that has not registered is refused
// and changes nothing.
#include <algorithm>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/job.h"
#include "scheduler/job_test_util.h"

namespace shardps {
namespace {

using testing::FakeServerOps;
using testing::Req;

constexpr uint32_t kParts = 64;

JobConfig GrowableConfig() {
  JobConfig c = testing::Config(1000, BSP);
  c.mutable_cluster()->set_num_servers(2);
  c.mutable_cluster()->set_max_servers(3);
  c.mutable_cluster()->set_num_partitions(kParts);
  return c;
}

std::vector<uint32_t> Owners(const JobCoordinator& job) {
  const std::optional<PartitionMapProto> map = job.Map();
  if (!map) return {};
  return std::vector<uint32_t>(map->owner().begin(), map->owner().end());
}

void RegisterJob(JobCoordinator* job, const JobConfig& c, bool spare) {
  RegisterResponse resp;
  ASSERT_TRUE(job->Register(Req(c, SERVER, 0, 1), &resp).ok());
  ASSERT_TRUE(job->Register(Req(c, SERVER, 1, 2), &resp).ok());
  if (spare) {
    ASSERT_TRUE(job->Register(Req(c, SERVER, 2, 3), &resp).ok());
  }
  ASSERT_TRUE(job->Register(Req(c, WORKER, 0, 4), &resp).ok());
  ASSERT_TRUE(job->Register(Req(c, WORKER, 1, 5), &resp).ok());
}

// A coordinator over fake servers: servers 0 and 1 (and the spare 2 with
// `spare`) registered and two workers stepping `steps` clocks; the
// destructor waits for the workers and for the job to end.
class RunningJob {
 public:
  RunningJob(bool spare, uint64_t steps)
      : config_(GrowableConfig()), ops_(config_), job_(config_, nullptr, &ops_) {
    ops_.set_job(&job_);
    RegisterJob(&job_, config_, spare);
    job_.Start();
    workers_ = testing::RunWorkers(&job_, steps, absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(50));
  }
  ~RunningJob() {
    for (auto& w : workers_) w.join();
    EXPECT_TRUE(job_.WaitDone(absl::Now() + absl::Seconds(20)).ok());
  }
  FakeServerOps& ops() { return ops_; }
  JobCoordinator& job() { return job_; }

 private:
  const JobConfig config_;
  FakeServerOps ops_;
  JobCoordinator job_;
  std::vector<std::thread> workers_;
};

// The switches of map `version`: one per server, each dropping exactly the
// partitions it owned before and not after; every partition has one owner.
void CheckSwitch(const std::vector<FakeServerOps::Switched>& switched, uint64_t version,
                 const std::vector<uint32_t>& before, uint64_t clock, uint32_t servers) {
  std::set<uint32_t> seen;
  for (const FakeServerOps::Switched& s : switched) {
    if (s.version != version) continue;
    EXPECT_TRUE(seen.insert(s.index).second) << "server " << s.index << " switched twice";
    EXPECT_LT(s.max_granted, clock) << "a worker started a step past the move";
    std::vector<uint32_t> expected_drop;
    for (uint32_t p = 0; p < kParts; ++p) {
      if (before[p] == s.index && s.owner[p] != s.index) expected_drop.push_back(p);
    }
    EXPECT_EQ(s.drop, expected_drop) << "server " << s.index;
    for (uint32_t owner : s.owner) EXPECT_LT(owner, servers);
  }
  EXPECT_EQ(seen.size(), 3u) << "every server of the move gets the map";
}

TEST(JobReshardTest, TwoToThreeToTwoMovesAtHeldClocks) {
  RunningJob run(/*spare=*/true, /*steps=*/2000);
  FakeServerOps& ops = run.ops();
  JobCoordinator& job = run.job();
  const std::vector<uint32_t> two = Owners(job);

  auto up = job.Reshard(3, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->map_version(), 2u);
  EXPECT_GT(up->partitions_moved(), 0u);
  const std::vector<uint32_t> three = Owners(job);
  EXPECT_EQ(job.Map()->server_addresses_size(), 3);
  // Two steps: a pre-copy from an earlier cut P, then the catch-up from P at
  // the switch's cut, with the clocks held.
  const std::vector<FakeServerOps::Added> adds = ops.added();
  ASSERT_FALSE(adds.empty());
  ASSERT_TRUE(adds.front().step.precopy);
  const uint64_t precopied = adds.front().clock;
  EXPECT_LT(precopied, up->clock());
  // The spare was restored to the pre-copy's cut (a full restore: it owned
  // nothing).
  bool joined = false;
  for (const FakeServerOps::Restored& r : ops.restores()) {
    joined |= r.index == 2u && !r.point.initial && r.point.clock == precopied;
  }
  EXPECT_TRUE(joined);
  // Each destination got exactly the partitions the map gave it, pre-copied
  // then caught up.
  uint32_t added = 0, caught_up = 0;
  for (const FakeServerOps::Added& a : adds) {
    if (a.step.precopy) {
      EXPECT_EQ(a.clock, precopied);
      EXPECT_FALSE(a.step.catch_up_from.has_value());
    } else {
      EXPECT_EQ(a.clock, up->clock());
      EXPECT_EQ(a.step.catch_up_from, std::optional<uint64_t>(precopied));
      EXPECT_LT(a.max_granted, up->clock()) << "a worker started a step past the catch-up's cut";
    }
    for (uint32_t p : a.partitions) {
      EXPECT_EQ(three[p], a.index) << "partition " << p;
      EXPECT_NE(two[p], a.index) << "partition " << p;
      ++(a.step.precopy ? added : caught_up);
    }
  }
  EXPECT_EQ(caught_up, added);
  // The catch-up's cut is a delta on the pre-copy's.
  for (const FakeServerOps::Cut& cut : ops.cuts()) {
    if (cut.clock == up->clock()) {
      EXPECT_TRUE(cut.delta_on_last);
    }
    if (cut.clock == precopied) {
      EXPECT_FALSE(cut.delta_on_last);
    }
  }
  EXPECT_EQ(added, up->partitions_moved());
  CheckSwitch(ops.switched(), 2, two, up->clock(), 3);

  auto down = job.Reshard(2, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->map_version(), 3u);
  EXPECT_GT(down->clock(), up->clock());
  CheckSwitch(ops.switched(), 3, three, down->clock(), 2);
  EXPECT_EQ(job.Map()->server_addresses_size(), 2);

  // The cuts of the moves are checkpoints like any other.
  std::set<uint64_t> cut_clocks;
  for (const FakeServerOps::Cut& cut : ops.cuts()) cut_clocks.insert(cut.clock);
  EXPECT_TRUE(cut_clocks.count(up->clock()) && cut_clocks.count(down->clock()));
  JobStatusResponse status;
  job.JobStatus(&status);
  EXPECT_EQ(status.map_version(), 3u);
  EXPECT_EQ(status.map_servers(), 2u);
  EXPECT_EQ(status.reshards(), 2u);
  EXPECT_EQ(status.partitions_moved(), up->partitions_moved() + down->partitions_moved());
  // Already on two: nothing moves.
  auto same = job.Reshard(2, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->partitions_moved(), 0u);
  EXPECT_EQ(same->map_version(), 3u);
}

// The move plans by the rows of the cut it pre-copies from: with server
// 1's partitions ten times as heavy as server 0's, 2 -> 3 moves rows off
// server 1 until no server holds more than its share plus the heaviest
// partition (ReshardPlan's bound), which a plan by partition count (equal
// counts) would break.
TEST(JobReshardTest, TheMovePlansByTheCutsRows) {
  RunningJob run(/*spare=*/true, /*steps=*/2000);
  FakeServerOps& ops = run.ops();
  JobCoordinator& job = run.job();
  ServerOps::PartitionSizes sizes;
  for (uint32_t p = 0; p < kParts; ++p) {
    sizes.rows.push_back(p < kParts / 2 ? 10 : 100);
    sizes.bytes.push_back(sizes.rows.back() * 64);
  }
  ops.SetCopySizes(sizes);
  auto up = job.Reshard(3, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(up.ok()) << up.status();
  const std::vector<uint32_t> three = Owners(job);
  std::vector<uint64_t> weight(3, 0);
  uint64_t total = 0, heaviest = 0;
  for (uint32_t p = 0; p < kParts; ++p) {
    weight[three[p]] += sizes.rows[p] + 1;
    total += sizes.rows[p] + 1;
    heaviest = std::max<uint64_t>(heaviest, sizes.rows[p] + 1);
  }
  for (uint32_t s = 0; s < 3; ++s) {
    EXPECT_LE(weight[s], total / 3 + heaviest) << "server " << s;
  }
  // By count, server 0 would keep its 32 light partitions and server 1
  // shed a third of its 64: far above the bound.
  EXPECT_LT(weight[1], 32 * 101u);
}

// A move right after a checkpoint of the same map pre-copies from it: no
// second cut before the pre-copy (the workers are not held for one), the
// joining spare restored to it, the catch-up a delta on it.
TEST(JobReshardTest, AMoveAfterACheckpointPreCopiesFromIt) {
  RunningJob run(/*spare=*/true, /*steps=*/2000);
  FakeServerOps& ops = run.ops();
  JobCoordinator& job = run.job();
  auto checkpoint = job.CheckpointNow(absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  auto up = job.Reshard(3, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(up.ok()) << up.status();
  const std::vector<FakeServerOps::Added> adds = ops.added();
  ASSERT_FALSE(adds.empty());
  EXPECT_TRUE(adds.front().step.precopy);
  EXPECT_EQ(adds.front().clock, *checkpoint) << "pre-copied from the checkpoint";
  std::vector<uint64_t> cut_clocks;
  for (const FakeServerOps::Cut& cut : ops.cuts()) cut_clocks.push_back(cut.clock);
  EXPECT_EQ(cut_clocks, (std::vector<uint64_t>{*checkpoint, up->clock()}))
      << "one cut for the move: its catch-up's";
  EXPECT_TRUE(ops.cuts().back().delta_on_last);
  bool joined = false;
  for (const FakeServerOps::Restored& r : ops.restores()) {
    joined |= r.index == 2u && r.point.clock == *checkpoint;
  }
  EXPECT_TRUE(joined);
}

// A destination that lost its pre-copy (restarted between the steps)
// refuses the catch-up (ABORTED): the destinations drop what they added,
// the old map stays, and the move starts again from a new pre-copy.
TEST(JobReshardTest, ACatchUpRefusedPreCopiesAgain) {
  RunningJob run(/*spare=*/true, /*steps=*/2000);
  FakeServerOps& ops = run.ops();
  JobCoordinator& job = run.job();
  ops.FailCatchUps(1, absl::AbortedError("server 2 did not pre-copy partition 43"));
  const std::vector<uint32_t> two = Owners(job);

  auto up = job.Reshard(3, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->map_version(), 2u);
  std::set<uint64_t> precopies;
  uint32_t caught_up = 0;
  for (const FakeServerOps::Added& a : ops.added()) {
    if (a.step.precopy) precopies.insert(a.clock);
    if (!a.step.precopy) {
      ++caught_up;
      EXPECT_EQ(a.step.catch_up_from, std::optional<uint64_t>(*precopies.rbegin()))
          << "the catch-up follows the newest pre-copy";
    }
  }
  EXPECT_EQ(precopies.size(), 2u) << "pre-copied again after the refused catch-up";
  EXPECT_GT(caught_up, 0u);
  // The refused move's destinations dropped what they added, under the old
  // map (version 1).
  bool dropped = false;
  for (const FakeServerOps::Switched& s : ops.switched()) {
    dropped |= s.version == 1 && s.index == 2 && !s.drop.empty();
  }
  EXPECT_TRUE(dropped);
  CheckSwitch(ops.switched(), 2, two, up->clock(), 3);
}

TEST(JobReshardTest, AMoveToAServerThatIsNotThereIsRefusedAndChangesNothing) {
  RunningJob run(/*spare=*/false, /*steps=*/1000);
  FakeServerOps& ops = run.ops();
  JobCoordinator& job = run.job();
  auto up = job.Reshard(3, absl::Now() + absl::Seconds(20));
  EXPECT_EQ(up.status().code(), absl::StatusCode::kFailedPrecondition) << up.status();
  EXPECT_NE(up.status().message().find("server 2"), std::string::npos) << up.status();
  EXPECT_EQ(job.Map()->version(), 1u);
  EXPECT_TRUE(ops.added().empty());
  EXPECT_TRUE(ops.switched().empty());
  EXPECT_EQ(job.Reshard(4, absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);  // Beyond max_servers.
  EXPECT_EQ(job.Reshard(0, absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps
