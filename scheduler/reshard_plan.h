// ReshardPlan: which partitions move when a job's server count changes
// (docs/design.md, "Resharding"). Pure: no clocks, no servers, no I/O.
//
// Input: the current owner of every partition, its rows and bytes (the
// servers' counts at the last cut; zero when unknown) and the target server
// count N. Servers [N, old count) are drained: all their partitions move.
// Output: the new owner vector, the moves, and what they carry.
//
// Weight. A partition weighs w(p) = rows(p) + 1: rows balance the memory and
// work; the +1 makes empty partitions (a job before its first rows, dense
// tables) spread by count, so the rows that later hash into them spread
// too. Bytes are carried through to the moves' totals; within one job the
// bytes of a partition are its rows times the mix of tables' row sizes,
// which hashing keeps about equal across partitions, so balancing rows
// balances bytes.
//
// Balance criterion. With T = total weight / N and w_max the largest
// partition weight: no server ends above T + w_max. (A server may end below
// T only by what the others hold above T: at most (N - 1) * w_max in all.)
//
// Fewest moves. A partition moves only if (a) its server is drained, or (b)
// its server holds more than T + w_max, and then only until it is back
// within [T, T + w_max], highest index first, skipping any heavier than the
// excess over T. The partitions that move go, in index order, to the server
// that holds the least below T (lowest index on a tie), which takes them
// until it reaches T; then the next one does. So every receiving server
// ends below T + w_max, and what moves stays in contiguous ranges: a
// destination's pre-copy reads the checkpoint files of its own partitions
// only (a file holds a server's share of 64 partitions), where scattered
// picks made it read every file of its sources, 2 to 3 times the bytes it
// kept. On equal weights (all partitions alike) this is the least number of
// moves any assignment meeting the criterion needs: growing S -> N moves
// sum over servers of max(0, load - floor(T + 1)) partitions, shrinking
// moves exactly the drained servers' partitions; on skewed weights a
// server may shed a few more, lighter partitions than the fewest that
// would do. Ties and order go by partition index, so the plan is a
// function of its input.
//
// Thread-safety: free functions, no state.
#ifndef SHARDPS_SCHEDULER_RESHARD_PLAN_H_
#define SHARDPS_SCHEDULER_RESHARD_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace shardps {

struct ReshardInput {
  // owner[p]: the server of partition p now; the job's servers are
  // [0, max(owner) + 1).
  std::vector<uint32_t> owner;
  // Per partition (same size as owner), or empty = all zero.
  std::vector<uint64_t> rows;
  std::vector<uint64_t> bytes;
  uint32_t target_servers = 0;  // N > 0.
};

struct MovedPartition {
  uint32_t partition = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  uint64_t rows = 0;
  uint64_t bytes = 0;
};

struct ReshardPlan {
  std::vector<uint32_t> owner;        // The new owner of every partition.
  std::vector<MovedPartition> moves;  // In partition order.
  uint64_t rows_moved = 0;
  uint64_t bytes_moved = 0;
  // Per server (size N): rows and partitions it holds after the moves.
  std::vector<uint64_t> server_rows;
  std::vector<uint32_t> server_partitions;
};

// INVALID_ARGUMENT if owner is empty, rows or bytes is neither empty nor of
// owner's size, target_servers is 0 or above the number of partitions.
// A target equal to the current count returns the owners as they are when
// they already meet the criterion (no moves).
absl::StatusOr<ReshardPlan> PlanReshard(const ReshardInput& input);

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_RESHARD_PLAN_H_
