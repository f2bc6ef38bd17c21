// PartitionMove: the scheduler's book of partition moves (resharding,
// ReshardRequest; docs/design.md "Resharding" has the protocol and
// job_control.h the control thread that runs it), kept apart from the job's
// other state:
//
//   - the requests: the server count asked for (the last request's), the
//     requests so far and those answered (a move done, nothing to move, or
//     an error), and the answer of the last one served;
//   - a move in flight between its two steps (InFlight): the pre-copy's
//     checkpoint, generation, map and target, the new owners, which server
//     adds and drops which partitions, and what the pre-copy read. It is
//     forgotten when the move ends either way, and is stale once the job
//     generation, the map or the target changed (a recovery, another
//     request: the move starts again);
//   - retries: a move that failed before its switch because a server of it
//     was gone or unreachable is tried again, not before a backoff (two
//     heartbeat periods, doubling up to 5 s) and once every server of it is
//     registered and alive again, until cluster.server_deadline_ms after the
//     first failure; then the request is answered with the failure;
//   - what the moves did, for the job's status: moves, partitions, rows and
//     bytes moved, the last move's duration.
//
// The book decides nothing about servers or clocks: the request side asks
// and waits, the control thread runs each step and tells the book how it
// ended.
//
// Not thread-safe: JobState (job_state.h) holds it under its lock.
#ifndef SHARDPS_SCHEDULER_PARTITION_MOVE_H_
#define SHARDPS_SCHEDULER_PARTITION_MOVE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/server_ops.h"

namespace shardps {

class PartitionMove {
 public:
  // A move between its two steps: what the pre-copy did, for the catch-up
  // and the switch.
  struct InFlight {
    uint64_t clock = 0;  // Of the pre-copy's checkpoint.
    uint64_t generation = 0;
    uint64_t map_version = 0;
    uint32_t target = 0;
    uint32_t servers = 0;         // Of the map before the move.
    std::vector<uint32_t> owner;  // After the move (ReshardPlan::owner).
    PartitionMapProto addressed;  // Every server of the move, by index.
    std::map<uint32_t, std::vector<uint32_t>> added, dropped;  // By server.
    RestoreStats stats;                                        // Of the pre-copy.
    absl::Time start;

    // Still the move asked for: the same job generation, map and target.
    bool Current(uint64_t generation_now, uint32_t target_now, uint64_t map_version_now) const {
      return generation == generation_now && target == target_now && map_version == map_version_now;
    }
  };

  // How a control-thread step of a move ended.
  struct Step {
    uint64_t clock = 0;        // Where the workers were held.
    uint64_t answers = 0;      // The requests made when the step began.
    absl::Status status;       // Its error, if any.
    bool cut_retried = false;  // Its cut failed and is tried again (CutBook).
    bool first_done = false;   // The pre-copy is done; the second step follows.
    uint32_t moved = 0;        // Partitions switched (0: the old map holds).
    RestoreStats stats;        // Both steps' reads.
    absl::Time start;          // Of the move (its first step).
  };

  // What a served request is answered (ReshardResponse without the map).
  struct Answer {
    uint64_t clock = 0;  // Of the last move that moved partitions.
    uint32_t moved = 0;  // Partitions moved by the request.
  };

  // Reads cluster.heartbeat_ms (the retry backoff) and server_deadline_ms
  // (how long retries go on).
  explicit PartitionMove(const ClusterConfig& cluster);

  // ---- Requests (the request side) ----
  // Asks for the job to run on `servers` servers; numbers the request.
  uint64_t Request(uint32_t servers);
  // Request `seq` was served (a move done, nothing to move, or an error).
  bool Served(uint64_t seq) const { return served_ >= seq; }
  // The answer to the last request served: FAILED_PRECONDITION
  // ("reshard: <why>") if it failed.
  absl::StatusOr<Answer> LastAnswer() const;

  // ---- The control thread ----
  // A request waits to be served.
  bool Wanted() const { return requested_ > served_; }
  uint32_t target() const { return target_; }
  uint64_t requested() const { return requested_; }
  // A failed move waits to be tried again.
  bool RetryWaiting() const { return retry_until_.has_value(); }
  // The servers a move to the target involves when the map has
  // `map_servers`: [0, the larger of the two).
  uint32_t Involved(uint32_t map_servers) const { return std::max(map_servers, target_); }
  // Whether a wanted move may start at `now`: true unless a retry waits for
  // the backoff or for `missing` (the servers of the move not registered
  // and alive) to be back. Past the retries' deadline the request is
  // answered with the failure (logged) and false returned.
  bool MayStart(absl::Time now, const std::vector<uint32_t>& missing);
  // Answers every request with `why` (nobody trains any more: nothing to
  // move for).
  void AnswerAll(const std::string& why);
  // The first step pre-copied `move`; the second follows.
  void Precopied(InFlight move) { in_flight_ = std::move(move); }
  const std::optional<InFlight>& in_flight() const { return in_flight_; }
  // The move in flight is out of date: it starts again.
  void Forget() { in_flight_.reset(); }
  // A step ended at `now`. A step that failed before the switch because a
  // server was unreachable (and whose cut is not retried already) waits to
  // be tried again, within the retries' deadline; otherwise, unless its
  // first step is done, the requests up to `step.answers` are served and the
  // move's figures counted. The move in flight is forgotten unless its first
  // step is done. Returns whether the move is tried again.
  bool StepEnded(const Step& step, absl::Time now);

  // ---- What the moves did ----
  // JobStatusResponse's reshards, partitions_moved, reshard_rows_moved,
  // reshard_bytes_moved and last_reshard_sec.
  void FillStatus(JobStatusResponse* response) const;

 private:
  const absl::Duration heartbeat_;
  const uint32_t server_deadline_ms_;

  uint32_t target_ = 0;  // 0: none asked for.
  uint64_t requested_ = 0;
  uint64_t served_ = 0;
  std::string error_;        // Of the last request served; empty: it succeeded.
  uint32_t last_moved_ = 0;  // Partitions of the last request served.

  std::optional<InFlight> in_flight_;

  // Unset: no retry is waiting.
  std::optional<absl::Time> retry_until_;
  absl::Time retry_after_;
  uint32_t retries_ = 0;
  std::string retry_cause_;  // The failure that is retried.

  uint64_t clock_ = 0;  // Of the last move.
  uint32_t moves_ = 0;  // Reshards that moved partitions.
  uint64_t partitions_moved_ = 0;
  uint64_t rows_moved_ = 0;   // Of the moving partitions, at their pre-copies.
  uint64_t bytes_moved_ = 0;  // Checkpoint bytes the destinations read (both steps).
  double last_sec_ = 0;       // The last move, from its cut to its switch.
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_PARTITION_MOVE_H_
