// JobControl: the scheduler's control thread. It forms the job, takes the
// checkpoint cuts and runs the recoveries (job.h has the lifecycle they
// follow). One thing at a time: a recovery waits for a cut in progress to
// end, and no cut starts while a recovery is pending.
//
// It acts on the servers through ServerOps and on the clocks through the
// ClockService; what it learns and decides goes into the JobState it shares
// with the request side (job_state.h) through JobState's control-thread
// transitions (formation, rollbacks and rewinds, recoveries, cuts, the
// steps of a partition move). It keeps no state of the job itself but the
// last cut it completed (a move may pre-copy from it).
//
// Start() runs the thread; the destructor (or Stop) ends it. Not copyable.
#ifndef SHARDPS_SCHEDULER_JOB_CONTROL_H_
#define SHARDPS_SCHEDULER_JOB_CONTROL_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/clock.h"
#include "scheduler/job_state.h"
#include "scheduler/membership.h"
#include "scheduler/partition_move.h"
#include "scheduler/reshard_plan.h"
#include "scheduler/server_ops.h"

namespace shardps {

class JobControl {
 public:
  // None of the pointers is owned; all must outlive the control.
  // `start_time`: when the scheduler started (formation waits from it).
  JobControl(const JobConfig& config, JobState* state, Membership* members, ClockService* clock,
             ServerOps* ops, absl::Time start_time);
  ~JobControl();
  JobControl(const JobControl&) = delete;
  JobControl& operator=(const JobControl&) = delete;

  // Starts the thread: formation, then cuts, recoveries and moves until the
  // job ended; then the last checkpoint GC, and JobState::ControlEnded.
  void Start();
  // Asks the thread to end and joins it (the caller wakes the state's
  // waiters and aborts the clocks first).
  void Stop();

 private:
  void Run();
  // Waits for the servers (and with a takeover the workers), then gives the
  // job its start point. False if the job failed or stopped.
  bool Form();
  // The job goes on from the state every process rejoined with (a
  // takeover: nothing rolls back).
  void TakeOver();
  // Restores every server to the newest usable restore point in a new
  // generation and rewinds the workers there; fills `report`'s phases from
  // `detected_at` on and records it (a rollback to the initial values only
  // if `record_initial`). False if the job failed.
  bool RollBack(RecoveryReport* report, absl::Time detected_at, bool record_initial);
  // Runs the pending recovery.
  void Recover();
  // checkpoint.recovery PARTIAL: restores only the replaced servers'
  // partitions from `point`, in the current generation.
  void RecoverPartially(const RecoveryBook::Pending& p, const RestorePoint& point,
                        RecoveryReport* report);
  // Once the job is done, a last GC: the checkpoints kept only to be
  // evaluated go, the best one stays.
  void FinalCollect();

  // ---- job_reshard.cc ----
  // With every worker held at `clock`, one step of the move to the target
  // the request asked for (docs/design.md, "Resharding"; the move's state is
  // JobState's PartitionMove):
  //  - no move in flight (or one of another generation, map or target): a
  //    cut at `clock` that releases the workers after its copy (or, when
  //    this scheduler cut the job under the current generation and map
  //    within kReuseCutFor, that cut: the workers are released at once),
  //    then the pre-copy (Precopy) from it while they train; the request
  //    stays pending, so the control loop holds at the next unstarted clock
  //    for the second step;
  //  - else: a cut at `clock` that is a delta on the pre-copy's and keeps
  //    the hold, the catch-up and the switch (CatchUpAndSwitch); answers the
  //    reshard requests made so far, then holds at the next cut or releases
  //    the clocks.
  // A failure before the switch forgets the pre-copy and is tried again
  // from the first step (a server of the move gone, unreachable, restarted
  // or without its pre-copy) or answers the requests with the error.
  void Reshard(uint64_t clock, uint64_t serving);
  // Reshard's first step, the move `s` not in flight: fills `step`.
  void PrecopyStep(uint64_t clock, uint64_t serving, const JobState::MoveStep& s,
                   const std::optional<PartitionMapProto>& map, PartitionMove::Step* step);
  // A move's first step, after the cut at `clock` (the workers train
  // meanwhile): the plan, joining spares restored to the cut, the moving
  // partitions pre-copied from it onto their destinations. True if a move
  // is in flight (JobState::MovePrecopied), false if there is nothing to
  // move. An error leaves the old map in force, the destinations dropping
  // what they added.
  absl::StatusOr<bool> Precopy(uint64_t clock, uint32_t target);
  // The plan of the move from the `servers` of `map` to `target` by the
  // rows of the last full copy (ServerOps::LastCopySizes), logged.
  absl::StatusOr<ReshardPlan> PlanMove(const PartitionMapProto& map, uint32_t servers,
                                       uint64_t clock, uint32_t target);
  // `map` addressing every server of a move from `servers` to `target`
  // (the map's and the spares joining it); FAILED_PRECONDITION naming one
  // that is not registered and alive.
  absl::StatusOr<PartitionMapProto> AddressMove(const PartitionMapProto& map, uint32_t servers,
                                                uint32_t target) const;
  // The second step, after the cut at `clock` (a delta on the pre-copy's,
  // every worker held): each destination of `move` catches up on the links
  // after the pre-copy's checkpoint, then the map is switched everywhere
  // with the sources' drops. `moved`: the partitions moved (0: the old map
  // is still in force). An error before the switch leaves the old map in
  // force (the destinations drop what they added); once the new map is set
  // `moved` counts the move, and a server failing during the switch is a
  // server failure (a recovery follows, under the new map, from this cut).
  // `stats`: the rows and bytes the destinations read, both steps.
  absl::Status CatchUpAndSwitch(const PartitionMove::InFlight& move, uint64_t clock,
                                uint32_t* moved, RestoreStats* stats);
  // Gives every server of `move` the map `next` with its drops; a server
  // that fails is a server failure. Returns how many failed.
  uint32_t SwitchMap(const PartitionMove::InFlight& move, const PartitionMapProto& next,
                     uint64_t clock);
  // The cut at `clock` as a restore point (its directory under
  // checkpoint.dir).
  RestorePoint CutPoint(uint64_t clock) const;
  // Asks every destination of `move` (up to and including `upto`) to drop
  // what it added; logs the ones that do not answer.
  void DropAdded(const PartitionMove::InFlight& move, uint32_t upto);

  // ---- job_cuts.cc ----
  // Once every worker is finished or dead (and, with dead ones left, the
  // policy lets the job end without them), takes the job's final cut (the
  // on-demand requests up to `serving` are served by it) and marks it taken.
  void TakeFinalCut(uint64_t serving);
  // Writes the checkpoint at `clock` (every worker held there or finished);
  // releases the hold after the copy (`next`: the next hold, 0 = none).
  // `serving`: the on-demand requests it answers. Returns the cut's status.
  // `final`: the job's last cut (always due for evaluation).
  // `delta_on_last`: a delta on the last complete checkpoint (a move's
  // catch-up; ServerOps::CopyCut).
  absl::Status Cut(uint64_t clock, uint64_t next, uint64_t serving, bool final = false,
                   bool delta_on_last = false);
  // Holds the clocks at `next`, or releases them (0).
  void HoldOrRelease(uint64_t next);
  // A version-only cut at `clock` (CutBook::VersionOnly) for the serving
  // replicas: the servers copy and publish, nothing is written; releases the
  // hold after the copy as Cut does. A failed one is logged and skipped (the
  // replicas wait for the next cut; a server gone is the recovery's).
  void CutVersion(uint64_t clock, uint64_t next);
  // After a cut at `clock` that ended with `st`: removes a failed cut's
  // directory, counts failures not due to a server being gone, fails the
  // job at the CutBook::kAttempts-th in a row. True if the cut is to be
  // tried again.
  bool AfterCut(uint64_t clock, const absl::Status& st);
  // Applies checkpoint.on_corrupt to the corrupt checkpoint `dir`: false
  // (the job failed, naming it and `why`) with FAIL; with FALL_BACK sets it
  // aside and returns true (false if it cannot be renamed).
  bool OnCorruptCheckpoint(const std::string& dir, const absl::Status& why);
  // Applies OnCorruptCheckpoint to every corrupt checkpoint newer than
  // `newest_usable` (-1: none is usable). False if the job failed.
  bool CheckNewerCheckpoints(int64_t newest_usable);

  const JobConfig& config_;
  JobState& state_;
  Membership& members_;
  ClockService& clock_;
  ServerOps* const ops_;
  const absl::Time start_time_;
  const bool checkpoints_on_;  // checkpoint.dir is set.
  const bool drops_;           // cluster.on_worker_loss is DROP.

  // The last cut this scheduler completed (control thread only): a move
  // pre-copies from it instead of cutting anew while it is recent and of
  // the current job generation and map (kReuseCutFor).
  struct LastCut {
    uint64_t clock = 0;
    uint64_t generation = 0;
    uint64_t map_version = 0;
    absl::Time at;  // Its copy began.
  };
  std::optional<LastCut> last_cut_;
  static constexpr absl::Duration kReuseCutFor = absl::Minutes(5);

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_JOB_CONTROL_H_
