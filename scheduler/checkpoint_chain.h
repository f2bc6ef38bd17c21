// CheckpointChain: the scheduler's side of the job's checkpoint files
// (job.h has the checkpoint contract, common/checkpoint/checkpoint_dir.h
// the layout), without the servers:
//
//  - full or delta: with checkpoint.delta, a cut after the first complete
//    checkpoint is a DELTA on the previous complete one (its manifest's
//    chain extends that one's) until the chain holds kMaxDeltasPerFull
//    deltas; then a FULL one starts the next chain. A move's catch-up
//    (`delta_on_last`) is a delta whenever there is a previous one. A cut
//    some server cannot write as a delta (it lacks the base, e.g. after a
//    restart) is written in full by every server (WriteInFull);
//  - the MANIFEST, written last once every server wrote its files: the
//    files, each worker's data position, the chain; then garbage collection
//    down to checkpoint.keep complete checkpoints, the pinned ones (Pin)
//    kept whatever keep says;
//  - the complete checkpoints of checkpoint.dir a job can roll back to,
//    newest first (RestorePoints), refused when they belong to another job;
//  - where the chain goes on: after a restore of every server, from the
//    restored checkpoint's chain (the initial values: the next is FULL); a
//    new CheckpointChain (a new scheduler, a takeover) has no base, so its
//    first cut is FULL.
//
// A cut that fails (a server's copy or write, the MANIFEST) leaves the
// chain as it was: the next cut is a delta on the same base.
//
// The chain knows nothing of gRPC: GrpcServerOps (checkpoint_client.h) fans
// each call out to the servers and tells the chain what they did, and the
// tests' fake servers (job_test_util.h) do the same with files of their own.
//
// Thread-compatible: the scheduler's control thread calls it, one call at a
// time.
#ifndef SHARDPS_SCHEDULER_CHECKPOINT_CHAIN_H_
#define SHARDPS_SCHEDULER_CHECKPOINT_CHAIN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"
#include "scheduler/server_ops.h"

namespace shardps {

class CheckpointChain {
 public:
  // Reads checkpoint.dir, keep and delta, the job's name, fingerprint and
  // partition count from `config` (a copy is kept).
  explicit CheckpointChain(const JobConfig& config);

  // ---- A cut ----
  // Begins the cut that copies at `now`. Returns whether it is a delta (see
  // above); `delta_on_last`: a move's catch-up.
  bool BeginCut(absl::Time now, bool delta_on_last);
  // The servers refused the cut as a delta: it is written in full.
  void WriteInFull() { cut_delta_ = false; }
  // The cut begun last is a delta.
  bool cut_delta() const { return cut_delta_; }
  // The clock of the last complete checkpoint written or restored, a
  // delta's base; nullopt when there is none (the next cut is FULL, and
  // there is no base for a version between checkpoints).
  std::optional<uint64_t> base_clock() const;
  // Ends the cut at `clock` in `generation` once every server wrote its
  // files: writes its MANIFEST (the servers' `files`, the workers'
  // `positions`, the chain) last, then collects garbage. The chain then
  // ends at this checkpoint. An error (a file missing or of another size,
  // the MANIFEST not written) leaves the checkpoint incomplete and the
  // chain as it was.
  absl::Status Complete(uint64_t clock, uint64_t generation,
                        const std::vector<checkpoint::CheckpointFile>& files,
                        const Positions& positions);

  // ---- Garbage collection ----
  // The checkpoints kept whatever checkpoint.keep says (the best evaluated
  // one, those not evaluated yet), with their chains.
  void Pin(std::vector<uint64_t> clocks) { pinned_ = std::move(clocks); }
  // Keeps checkpoint.keep complete checkpoints and the pinned ones; logs
  // what it cannot remove.
  void CollectGarbage() const;

  // ---- Restores ----
  // The complete checkpoints of checkpoint.dir, newest first (their files'
  // sizes checked; the servers check CRCs when they read); empty when there
  // are none or checkpoints are off. FAILED_PRECONDITION, naming the
  // checkpoint, for one of another job (name or partition count; the
  // fingerprint is not compared: it includes the server count, and a
  // checkpoint restores onto another one).
  absl::StatusOr<std::vector<RestorePoint>> RestorePoints() const;
  // Every server restored `point`: the next delta continues its chain.
  void Restored(const RestorePoint& point) { chain_ = point.chain; }

 private:
  const JobConfig config_;
  // The chain of the last complete checkpoint written or restored, oldest
  // first (empty: the next cut is FULL).
  std::vector<std::string> chain_;
  bool cut_delta_ = false;  // The cut being written is a delta.
  absl::Time cut_time_;     // When the cut being written began its copy.
  std::vector<uint64_t> pinned_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CHECKPOINT_CHAIN_H_
