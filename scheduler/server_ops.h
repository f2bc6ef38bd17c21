// ServerOps: what the job coordinator asks the parameter servers to do with
// their state: write a checkpoint at a cut (in two phases) and restore one.
// The coordinator (job.h) decides when; an implementation does it, over gRPC
// in the binary (checkpoint_client.h MakeGrpcServerOps) and in memory in
// tests. Every call names the job generation (common/generation.h) the
// servers must be in; a restore moves them into a new one.
//
// Implementations may block for as long as the disk takes; each call has a
// deadline of its own. Errors name the server (index and address) or the
// file. Called from the coordinator's control thread only, one call at a
// time.
#ifndef SHARDPS_SCHEDULER_SERVER_OPS_H_
#define SHARDPS_SCHEDULER_SERVER_OPS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"

namespace shardps {

// Worker rank -> data position after step clock-1 (worker/data
// EncodePosition).
using Positions = std::map<uint32_t, std::string>;

// A state the job can roll back to: a complete checkpoint, or (initial) the
// beginning, where every row is its initial value again (rows are a function
// of their table's seed and key, so this is exact too).
struct RestorePoint {
  bool initial = true;
  uint64_t clock = 0;   // 0 when initial.
  std::string dir;      // The checkpoint's directory (ckpt-<clock>).
  Positions positions;  // Recorded in its manifest.
  // The checkpoint ids restoring it applies (its manifest's chain): a delta
  // written after a restore extends it.
  std::vector<std::string> chain;
};

struct RestoreStats {
  uint64_t rows = 0;
  uint64_t bytes = 0;  // Checkpoint file bytes read (0 for initial).
  uint64_t files = 0;
  absl::Duration paced;  // A pre-copy's sleeps (cluster.move_mb_per_s).
};

// A ServerOps call that failed because a server is gone or unreachable
// (or restarted: it refuses the generation as stale), rather than for a
// reason of its own: the recovery that follows handles it.
inline bool ServerUnreachable(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) || absl::IsCancelled(st) ||
         absl::IsAborted(st) || st.message().find("stale generation") != absl::string_view::npos;
}

class ServerOps {
 public:
  virtual ~ServerOps() = default;

  // Phase one of a cut at `clock`: every server of `map` copies its
  // partitions into memory and answers; the files are written in the
  // background. Every worker is held at `clock` meanwhile. `delta_on_last`:
  // a delta on the last complete checkpoint whatever checkpoint.delta says
  // (a move's catch-up), still full if a server cannot write it.
  virtual absl::Status CopyCut(const PartitionMapProto& map, uint64_t generation, uint64_t clock,
                               bool delta_on_last) = 0;
  // Per partition, the rows and bytes of the last cut CopyCut copied in
  // full on every server (CheckpointResponse.partition_rows; a delta cut
  // leaves them as they were); empty when unknown (no full copy yet).
  struct PartitionSizes {
    std::vector<uint64_t> rows, bytes;
  };
  virtual PartitionSizes LastCopySizes() const { return {}; }
  // Phase two: waits for every server's files, writes the MANIFEST (with
  // `positions`) last, then garbage-collects old checkpoints. The workers
  // run meanwhile. A failure leaves the checkpoint incomplete (ignored).
  virtual absl::Status FinishCut(const PartitionMapProto& map, uint64_t generation, uint64_t clock,
                                 const Positions& positions) = 0;

  // A version between checkpoints at `clock` (CheckpointRequest VERSION):
  // every server of `map` copies the rows changed since the last complete
  // checkpoint and publishes them to the replicas that follow it; nothing
  // is written and the last complete checkpoint stays the next delta's
  // base. Every worker is held at `clock` meanwhile. FAILED_PRECONDITION
  // without a complete checkpoint.
  virtual absl::Status VersionCut(const PartitionMapProto& map, uint64_t generation,
                                  uint64_t clock) {
    (void)map, (void)generation, (void)clock;
    return absl::UnimplementedError("VersionCut");
  }
  // Whether VersionCut has a base: a complete checkpoint this scheduler
  // wrote or restored (after a takeover without a rollback, none until the
  // next checkpoint).
  virtual bool CanCutVersion() const { return false; }

  // The checkpoints FinishCut's garbage collection keeps whatever
  // checkpoint.keep says (the best evaluated one, those not evaluated yet).
  virtual void PinCheckpoints(const std::vector<uint64_t>& clocks) { (void)clocks; }
  // Garbage-collects as FinishCut does, without a cut (the job ended: the
  // checkpoints pinned only for their evaluation go).
  virtual void CollectGarbage() {}

  // The complete checkpoints of this job, newest first; empty if there are
  // none (or checkpoints are off). FAILED_PRECONDITION if the directory
  // holds checkpoints of another job.
  virtual absl::StatusOr<std::vector<RestorePoint>> RestorePoints() = 0;

  // Restores `point` on every server of `map` (`index` unset) or on server
  // `index` only, and moves it into `generation`. Each server verifies every
  // file it needs before changing anything; a server's error names it.
  virtual absl::StatusOr<RestoreStats> Restore(const PartitionMapProto& map,
                                               std::optional<uint32_t> index,
                                               const RestorePoint& point, uint64_t generation) = 0;

  // Resharding (docs/design.md, "Resharding"). `map` addresses every server
  // of the move (map.server_addresses(index)).
  // Restores `partitions` of the complete checkpoint `point` on server
  // `index` next to the rows it has (RestoreRequest.partitions); the server
  // stays in `generation`. `step`: in one step (both unset), the bulk while
  // training goes on (`precopy`), or the links of `point`'s chain after the
  // pre-copy's checkpoint (`catch_up_from`, its clock).
  struct AddStep {
    bool precopy = false;
    std::optional<uint64_t> catch_up_from;
  };
  virtual absl::StatusOr<RestoreStats> AddPartitions(const PartitionMapProto& map, uint32_t index,
                                                     const RestorePoint& point,
                                                     const std::vector<uint32_t>& partitions,
                                                     uint64_t generation, const AddStep& step) {
    (void)map, (void)index, (void)point, (void)partitions, (void)generation, (void)step;
    return absl::UnimplementedError("AddPartitions");
  }
  // Gives server `index` the partition map `map` (its owners and version),
  // the active workers `active`, and drops `drop` there (ControlRequest).
  virtual absl::Status SwitchMap(const PartitionMapProto& map, uint32_t index,
                                 const std::vector<uint32_t>& drop,
                                 const std::vector<uint32_t>& active) {
    (void)map, (void)index, (void)drop, (void)active;
    return absl::UnimplementedError("SwitchMap");
  }
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_SERVER_OPS_H_
