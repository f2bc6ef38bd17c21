#include "scheduler/reshard_plan.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

std::vector<uint32_t> Contiguous(uint32_t parts, uint32_t servers) {
  std::vector<uint32_t> owner(parts);
  for (uint32_t p = 0; p < parts; ++p) owner[p] = uint64_t{p} * servers / parts;
  return owner;
}

// The criterion of reshard_plan.h: no server above total / N + w_max.
void ExpectBalanced(const ReshardInput& in, const ReshardPlan& plan) {
  uint64_t total = 0, w_max = 0;
  std::vector<uint64_t> load(in.target_servers, 0);
  for (size_t p = 0; p < in.owner.size(); ++p) {
    const uint64_t w = (in.rows.empty() ? 0 : in.rows[p]) + 1;
    total += w;
    w_max = std::max(w_max, w);
    ASSERT_LT(plan.owner[p], in.target_servers) << "partition " << p;
    load[plan.owner[p]] += w;
  }
  for (uint32_t s = 0; s < in.target_servers; ++s) {
    EXPECT_LE(load[s] * in.target_servers, total + w_max * in.target_servers) << "server " << s;
  }
}

TEST(ReshardPlanTest, GrowTwoToThreeMovesTheFewestEqualPartitions) {
  ReshardInput in;
  in.owner = Contiguous(4096, 2);
  in.target_servers = 3;
  const ReshardPlan plan = *PlanReshard(in);
  ExpectBalanced(in, plan);
  // T = 1365.33: each old server keeps floor(T + 1) = 1366, sheds 682.
  EXPECT_EQ(plan.moves.size(), 2u * (2048 - 1366));
  EXPECT_EQ(plan.server_partitions, (std::vector<uint32_t>{1366, 1366, 1364}));
  for (const MovedPartition& m : plan.moves) {
    EXPECT_EQ(m.to, 2u) << "partition " << m.partition;
    EXPECT_EQ(m.from, in.owner[m.partition]);
  }
  // A server sheds its highest partitions: its kept ones stay a prefix.
  for (uint32_t p = 0; p < 1366; ++p) EXPECT_EQ(plan.owner[p], 0u) << p;
  for (uint32_t p = 2048; p < 2048 + 1366; ++p) EXPECT_EQ(plan.owner[p], 1u) << p;
}

TEST(ReshardPlanTest, ShrinkMovesOnlyTheDrainedServersPartitions) {
  ReshardInput in;
  in.owner = Contiguous(4096, 3);
  in.target_servers = 2;
  const ReshardPlan plan = *PlanReshard(in);
  ExpectBalanced(in, plan);
  uint32_t drained = 0;
  for (uint32_t owner : in.owner) drained += owner == 2;
  EXPECT_EQ(plan.moves.size(), drained);
  for (const MovedPartition& m : plan.moves) EXPECT_EQ(m.from, 2u);
  EXPECT_EQ(plan.server_partitions[0] + plan.server_partitions[1], 4096u);
}

// 4096 partitions on 2 servers with rows(p) = base + (p * 7919) % spread,
// planned to 3 servers and back to 2, both plans checked balanced.
struct UpAndDown {
  ReshardInput in, back;
  ReshardPlan up, down;
};
UpAndDown PlanUpAndDown(uint64_t base, uint64_t spread) {
  UpAndDown r;
  r.in.owner = Contiguous(4096, 2);
  r.in.rows.resize(4096);
  for (uint32_t p = 0; p < 4096; ++p) r.in.rows[p] = base + (p * 7919) % spread;
  r.in.target_servers = 3;
  r.up = *PlanReshard(r.in);
  ExpectBalanced(r.in, r.up);
  r.back = r.in;
  r.back.owner = r.up.owner;
  r.back.target_servers = 2;
  r.down = *PlanReshard(r.back);
  ExpectBalanced(r.back, r.down);
  return r;
}

TEST(ReshardPlanTest, TwoToThreeToTwoEndsBalancedWithEveryPartitionOwned) {
  const UpAndDown plans = PlanUpAndDown(100, 50);
  const ReshardInput& in = plans.in;
  const ReshardPlan& down = plans.down;
  for (const MovedPartition& m : down.moves) EXPECT_EQ(m.from, 2u) << m.partition;
  uint64_t rows = 0;
  for (uint64_t r : down.server_rows) rows += r;
  uint64_t total = 0;
  for (uint64_t r : in.rows) total += r;
  EXPECT_EQ(rows, total);
}

// Runs of moves with consecutive partitions and the same source and
// destination.
int MoveRuns(const ReshardPlan& plan) {
  int runs = 0;
  for (size_t i = 0; i < plan.moves.size(); ++i) {
    const MovedPartition& m = plan.moves[i];
    if (i == 0 || m.partition != plan.moves[i - 1].partition + 1 ||
        m.from != plan.moves[i - 1].from || m.to != plan.moves[i - 1].to) {
      ++runs;
    }
  }
  return runs;
}

// With rows that differ per partition (as hashing spreads them), what moves
// is one contiguous range per source and destination, so a destination
// reads only the checkpoint files of what it takes.
TEST(ReshardPlanTest, MovesStayInContiguousRanges) {
  const UpAndDown plans = PlanUpAndDown(2400, 97);
  EXPECT_EQ(MoveRuns(plans.up), 2);  // The top of each old server's range.
  const ReshardPlan& down = plans.down;
  // Server 2's partitions form two runs; each destination takes a run from
  // the start of one of them or the end of one before switching over.
  EXPECT_LE(MoveRuns(down), 3);
  for (uint32_t to : {0u, 1u}) {
    EXPECT_TRUE(std::any_of(down.moves.begin(), down.moves.end(),
                            [to](const MovedPartition& m) { return m.to == to; }))
        << "server " << to << " takes part of the drained server's rows";
  }
}

TEST(ReshardPlanTest, BalancesByRowsNotByPartitionCount) {
  // Server 0 holds two heavy partitions, server 1 many light ones.
  ReshardInput in;
  in.owner = {0, 0, 1, 1, 1, 1, 1, 1};
  in.rows = {1000, 1000, 10, 10, 10, 10, 10, 10};
  in.bytes = {8000, 8000, 80, 80, 80, 80, 80, 80};
  in.target_servers = 3;
  const ReshardPlan plan = *PlanReshard(in);
  ExpectBalanced(in, plan);
  // One heavy partition moves to the new server; nothing else has to.
  ASSERT_EQ(plan.moves.size(), 1u);
  EXPECT_EQ(plan.moves[0].to, 2u);
  EXPECT_EQ(plan.moves[0].rows, 1000u);
  EXPECT_EQ(plan.bytes_moved, 8000u);
  EXPECT_EQ(plan.server_rows, (std::vector<uint64_t>{1000, 60, 1000}));
}

TEST(ReshardPlanTest, SameCountBalancedMovesNothing) {
  ReshardInput in;
  in.owner = Contiguous(64, 4);
  in.target_servers = 4;
  const ReshardPlan plan = *PlanReshard(in);
  EXPECT_TRUE(plan.moves.empty());
  EXPECT_EQ(plan.owner, in.owner);
}

TEST(ReshardPlanTest, SameCountUnbalancedRebalances) {
  ReshardInput in;
  in.owner = {0, 0, 0, 0, 0, 0, 1, 1};
  in.target_servers = 2;
  const ReshardPlan plan = *PlanReshard(in);
  ExpectBalanced(in, plan);
  // T = 4, w_max = 1: server 0 goes from 6 to 5.
  EXPECT_EQ(plan.moves.size(), 1u);
  EXPECT_EQ(plan.moves[0].partition, 5u);
}

TEST(ReshardPlanTest, PlanIsAFunctionOfItsInput) {
  ReshardInput in;
  in.owner = Contiguous(4096, 2);
  in.rows.assign(4096, 5);
  in.target_servers = 5;
  const ReshardPlan a = *PlanReshard(in);
  const ReshardPlan b = *PlanReshard(in);
  EXPECT_EQ(a.owner, b.owner);
  ExpectBalanced(in, a);
}

TEST(ReshardPlanTest, RefusesBadInput) {
  ReshardInput in;
  in.target_servers = 1;
  EXPECT_EQ(PlanReshard(in).status().code(), absl::StatusCode::kInvalidArgument);
  in.owner = {0, 0, 1};
  in.target_servers = 0;
  EXPECT_EQ(PlanReshard(in).status().code(), absl::StatusCode::kInvalidArgument);
  in.target_servers = 4;  // More servers than partitions.
  EXPECT_EQ(PlanReshard(in).status().code(), absl::StatusCode::kInvalidArgument);
  in.target_servers = 2;
  in.rows = {1, 2};
  EXPECT_EQ(PlanReshard(in).status().code(), absl::StatusCode::kInvalidArgument);
  in.rows.clear();
  in.bytes = {1};
  EXPECT_EQ(PlanReshard(in).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps
