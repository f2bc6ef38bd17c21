// JobState: what the scheduler knows of its job, under one lock that only
// it takes, and the transitions both of the scheduler's sides make on it.
// The request side (JobCoordinator: registrations, heartbeats, the workers'
// calls, failure detection) and the control thread (JobControl: formation,
// cuts, recoveries, moves) meet here and nowhere else; job.h has the
// lifecycle these transitions follow.
//
// What it holds, and who writes it:
//  - the job's phase and failure (either side: Fail, and every transition
//    that may end the job);
//  - whether the job formed, its generation, and whether the control
//    thread ended: the control thread alone (formation, rollbacks);
//  - the books, each a class that keeps its own invariants:
//    Takeover (takeover.h; the request side, before forming),
//    WorkerBook (worker_book.h; the workers' ticks, reports and barriers,
//    rewound by the control thread's rollbacks),
//    WorkerLoss (worker_loss.h; the request side's ticks and leases, the
//    control thread's rewinds),
//    RecoveryBook (recovery_book.h; failures pend recoveries, the control
//    thread runs them),
//    CutBook (cut_book.h; requests ask for cuts, the control thread takes
//    them), EvalBook (eval_book.h; workers report, cuts enqueue), and
//    PartitionMove (partition_move.h; the request side asks for moves, the
//    control thread runs them).
// JobState decides what crosses the books, and wakes the waiters of every
// change (the waits below take deadlines).
//
// Thread-safe: every public method takes the lock itself (none may be
// called with it held, so none calls back). Membership and ClockService
// (not owned) lock themselves; JobState calls them with its lock held, never
// the other way round. The methods live in job_state.cc (what both sides
// share), job_state_requests.cc (the request side's) and
// job_state_control.cc (the control thread's).
#ifndef SHARDPS_SCHEDULER_JOB_STATE_H_
#define SHARDPS_SCHEDULER_JOB_STATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/clock.h"
#include "scheduler/cut_book.h"
#include "scheduler/eval_book.h"
#include "scheduler/membership.h"
#include "scheduler/partition_move.h"
#include "scheduler/recovery_book.h"
#include "scheduler/server_ops.h"
#include "scheduler/takeover.h"
#include "scheduler/worker_book.h"
#include "scheduler/worker_loss.h"

namespace shardps {

class JobState {
 public:
  enum class Phase { kWaiting, kRunning, kDone, kFailed };

  // Called (outside locks) when servers must learn a new active-worker set
  // or partition map: (map, active worker ranks).
  using ServerNotifier =
      std::function<void(const PartitionMapProto& map, const std::vector<uint32_t>& active)>;

  // `members` and `clock` are not owned and must outlive the state.
  JobState(const JobConfig& config, Membership* members, ClockService* clock,
           ServerNotifier notifier, absl::Time start_time);
  JobState(const JobState&) = delete;
  JobState& operator=(const JobState&) = delete;

  // ---- Either side ----
  Phase phase() const ABSL_LOCKS_EXCLUDED(mu_);
  // Done or failed.
  bool Ended() const ABSL_LOCKS_EXCLUDED(mu_);
  bool formed() const ABSL_LOCKS_EXCLUDED(mu_);
  // The job generation (0 until the job formed).
  uint64_t generation() const ABSL_LOCKS_EXCLUDED(mu_);
  // Fails the job with `why` (once; later calls keep the first reason),
  // aborts every clock wait and wakes every waiter.
  void Fail(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every waiter to look again (the scheduler shutting down).
  void WakeWaiters() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the job is done (OK) or failed (ABORTED with the reason),
  // or `deadline` (DEADLINE_EXCEEDED).
  absl::Status WaitEnded(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells the servers the map and the live workers (the notifier, outside
  // the lock). The transitions below that return true want it called.
  void Notify() ABSL_LOCKS_EXCLUDED(mu_);
  // Pends a recovery for server `index` (`cause`; its last sign of life
  // `failed_at`, seen at `now`); `lost`: its state is gone (not only
  // silent). The clocks pause until the recovery is done.
  void ServerFailed(uint32_t index, const std::string& cause, absl::Time failed_at, absl::Time now,
                    bool lost) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The request side: registrations, heartbeats, failure detection ----
  // Before the job forms, a rejoining server's owners become the job's map
  // if they are the newest seen (Membership::AdoptOwners; formation reads
  // the map under the lock). False once formed (this scheduler's map
  // holds); Membership's error for owners that do not fit the job.
  absl::StatusOr<bool> AdoptRejoinedOwners(uint64_t map_version, const std::vector<uint32_t>& owner)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A spare server registered (`request` may rejoin): before forming, a
  // rejoining server's map may still make it one of the map's.
  void SpareRegistered(const RegisterRequest& request, uint32_t index) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes a registration Membership accepted (not a repeat, not a spare)
  // into the job at `now`: before forming, a rejoin makes this scheduler
  // take the job over; after it, a server with another state (or a new
  // process) is a failure to recover from, a restarted worker takes its
  // rank back (job.h). True if the servers must learn the active set again.
  bool Admit(const RegisterRequest& request, const Registration& reg, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The heartbeat answer's generation, stop (the job ended) and failure.
  void AnswerHeartbeat(HeartbeatResponse* response) const ABSL_LOCKS_EXCLUDED(mu_);
  // A failure-detection pass at `now` declared `died` dead (Membership::
  // Sweep): a dead worker leaves the clocks as on_worker_loss says, a dead
  // server pends a recovery; workers that did not rejoin a takeover within
  // dead_after_ms are dead; the start, server and worker deadlines fail the
  // job (job.h); the clocks held after a rollback resume when due. True if
  // the servers must learn the active set again.
  bool MembersSwept(const std::vector<Member>& died, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The request side: the workers' calls (job.h has their contracts) ----
  // Waits until the job formed and the map has `min_version`: ABORTED once
  // the job failed, DEADLINE_EXCEEDED at `deadline`.
  absl::Status WaitForMap(uint64_t min_version, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // WaitStart of registered worker `rank` (a generation after
  // `after_generation`, if set), until `deadline`; fills `response`.
  absl::Status WaitStart(uint32_t rank, std::optional<uint64_t> after_generation,
                         absl::Time deadline, WaitStartResponse* response) ABSL_LOCKS_EXCLUDED(mu_);
  // `rank` ticked `clock` in `generation` at data `position` (none if
  // empty), its share having trained `samples`: the clock's tick
  // (ClockService::Tick, whose error is returned) and the position together,
  // so a cut placed once every worker ticked its clock finds the position
  // of that clock. Returns the minimum clock.
  absl::StatusOr<uint64_t> Ticked(uint32_t rank, uint64_t clock, uint64_t generation,
                                  const std::string& position, uint64_t samples)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker cannot redo a step exactly: pends a rollback (cause from
  // `request`), unless the request is of an older generation (OK: a
  // rollback since covers it). FAILED_PRECONDITION unless the job is BSP
  // with on_worker_loss WAIT.
  absl::Status PendRollBack(const RollBackRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Worker `rank` of `generation` entered barrier `name`; waits until every
  // worker entered it, finished or (DROP) died, the job failed (ABORTED), a
  // rollback (the generation's error), or `deadline`. With REASSIGN the
  // worker may be answered an orphaned share instead (response.adopt_rank).
  absl::Status EnterBarrier(uint32_t rank, const std::string& name, uint64_t generation,
                            absl::Time deadline, BarrierResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The generation's error for a request of `generation`
  // (common/generation.h CheckGeneration); OK if current.
  absl::Status CheckCurrent(uint64_t generation) const ABSL_LOCKS_EXCLUDED(mu_);
  // Worker `rank` reported a training error (Membership marked it dead): it
  // leaves the clocks as on_worker_loss says. True if the servers must learn
  // the active set again.
  bool WorkerFailed(uint32_t rank) ABSL_LOCKS_EXCLUDED(mu_);
  // A validated metrics report at `now`: refused (the generation's error)
  // if of another generation; a done one marks the worker finished in
  // membership and clocks.
  absl::Status Reported(const MetricsReport& report, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Periodic evaluation (JobCoordinator::Evaluation): records `request`'s
  // result of `rank`, then waits until a checkpoint is due for it
  // (response.clock), the job ended, or `deadline` (clock 0).
  // FAILED_PRECONDITION when periodic evaluation is off; the EvalBook's
  // INVALID_ARGUMENT / FAILED_PRECONDITION for a result it refuses.
  absl::Status Evaluation(uint32_t rank, const EvaluationRequest& request, absl::Time deadline,
                          EvaluationResponse* response) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The request side: cuts, moves, the job's status ----
  // Asks for a checkpoint at the first unstarted clock; numbers the request.
  uint64_t RequestCut() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until a cut placed after request `seq` completed: its clock, or
  // the write's error; FAILED_PRECONDITION if the job ended first,
  // DEADLINE_EXCEEDED at `deadline`.
  absl::StatusOr<uint64_t> WaitCut(uint64_t seq, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Clocks of the checkpoints written, oldest first.
  std::vector<uint64_t> CheckpointsWritten() const ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the persisted evaluations back (EvalBook::Load; OK when periodic
  // evaluation is off).
  absl::Status LoadEvaluations() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks for a move to `servers` servers; numbers the request.
  uint64_t RequestMove(uint32_t servers) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until move request `seq` was answered: the answer
  // (PartitionMove::LastAnswer); FAILED_PRECONDITION if the job ended
  // first, DEADLINE_EXCEEDED (naming `servers`) at `deadline`.
  absl::StatusOr<PartitionMove::Answer> WaitMove(uint64_t seq, uint32_t servers,
                                                 absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's part of JobStatusResponse: state, generation, moves,
  // recoveries, cuts, training figures, evaluations, summary.
  void FillStatus(JobStatusResponse* response) const ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The control thread: formation and recoveries ----
  // Waits until every server is registered and alive, `settle` has passed
  // since `start` and, with a takeover, every worker registered; then sets
  // `takeover_problem`: nullopt without a takeover, else why the rejoined
  // state cannot be taken over as it is ("" if it can; Takeover::Problem).
  // False if `stop` or the job ended first.
  bool WaitFormable(absl::Time start, absl::Duration settle, const std::atomic<bool>& stop,
                    std::optional<std::string>* takeover_problem) ABSL_LOCKS_EXCLUDED(mu_);
  // The job goes on from the state every process rejoined with: the
  // rejoined generation, the cuts from the newest of `points` (the restore
  // points, if read), the evaluations; records a takeover report (the
  // scheduler started at `start`), forms the job and runs the clocks.
  void TakeOver(const absl::StatusOr<std::vector<RestorePoint>>& points, absl::Time start)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every server is registered and alive (showing what the
  // recovery waits for). False if `stop` or the job ended first.
  bool WaitForServers(const std::atomic<bool>& stop) ABSL_LOCKS_EXCLUDED(mu_);
  // A rollback begins: it covers every failure pending so far. Returns its
  // new generation (above every one seen).
  uint64_t BeginRollBack() ABSL_LOCKS_EXCLUDED(mu_);
  // The rollback to `point` in `generation` is done on the servers: moves
  // the clocks, positions and books there, forms the job, and fills
  // `report` (recorded if `record`); `kept`: the clocks of the complete
  // checkpoints up to it (periodic evaluation). After a failure the clocks
  // stay held until every worker started again (ResumeAfterRewind).
  void Rewound(const RestorePoint& point, uint64_t generation, RecoveryReport* report, bool record,
               const std::vector<uint64_t>& kept) ABSL_LOCKS_EXCLUDED(mu_);
  // The pending recovery, taken up by the control thread; nullopt if none.
  std::optional<RecoveryBook::Pending> TakeUpRecovery() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the recovery `p` if every server declared dead came back with its
  // state (a "rejoin": nothing to restore), recording `report`; false
  // otherwise.
  bool EndRejoin(const RecoveryBook::Pending& p, RecoveryReport* report) ABSL_LOCKS_EXCLUDED(mu_);
  // A partial recovery of `p` begins: the servers it restores (those lost
  // by now). Sets `generation` to the current one.
  std::set<uint32_t> BeginPartialRecovery(const RecoveryBook::Pending& p, uint64_t* generation)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The partial recovery is done: records `report` and runs the clocks
  // (unless held for a rewind).
  void EndPartialRecovery(const RecoveryReport& report) ABSL_LOCKS_EXCLUDED(mu_);
  // What the running recovery or move does now (shown to waiting
  // requests; the step's end clears it).
  void Doing(std::string what) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The control thread: its loop ----
  enum class ControlWork { kEnded, kRecover, kMove, kCut };
  // Waits for a change (at most 10 ms), then says what the control thread
  // does next: end, recover, a move that may start, or the cuts. Before a
  // move, an on-demand cut (requests after `*serving`, which becomes the
  // newest) or a cut due by time or retried, the clocks are held at the
  // first clock no worker has started.
  ControlWork WaitControlWork(uint64_t* serving) ABSL_LOCKS_EXCLUDED(mu_);
  // The control thread ended: the job may end.
  void ControlEnded() ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The control thread: cuts ----
  // What a cut records, read when it begins.
  struct CutInput {
    Positions positions;  // Each worker's latest.
    uint64_t generation = 0;
    std::vector<uint64_t> pinned;  // The checkpoints GC keeps (EvalBook::Pinned).
  };
  CutInput BeginCut() const ABSL_LOCKS_EXCLUDED(mu_);
  // The next cut after the one held at `held` (0: none), and whether the
  // one at `held` is a version only (CutBook::VersionOnly at `now`).
  struct NextCut {
    uint64_t next = 0;
    bool version_only = false;
  };
  NextCut CutsAfter(uint64_t held, absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);
  // The cut at `clock` ended with `status` at `end` (CutBook::Completed);
  // a written one is due for evaluation (`final`: the job's last).
  void CutEnded(uint64_t clock, const absl::Status& status, uint64_t serving, absl::Duration hold,
                absl::Duration write, absl::Time end, bool final) ABSL_LOCKS_EXCLUDED(mu_);
  // A version-only cut at `clock` ended with `status`.
  void VersionEnded(uint64_t clock, const absl::Status& status, absl::Duration hold)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The cut at `clock` failed with `status`: the wait before it is tried
  // again, or nullopt when a recovery takes over (`server_gone`, or one
  // pending, or the job ended) or it was the CutBook::kAttempts-th failure
  // in a row (the job fails naming `dir` and the error).
  std::optional<absl::Duration> CutFailed(uint64_t clock, const absl::Status& status,
                                          bool server_gone, const std::string& dir)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The clock of the last complete checkpoint if the job's final cut is
  // still to be taken now (CutBook::FinalDue), else nullopt.
  std::optional<uint64_t> FinalCutDue() const ABSL_LOCKS_EXCLUDED(mu_);
  // The final cut is taken: the job's last state is due for evaluation.
  void FinalCutTaken() ABSL_LOCKS_EXCLUDED(mu_);
  // Once the job is done, with periodic evaluation: the checkpoints a last
  // GC keeps; nullopt otherwise.
  std::optional<std::vector<uint64_t>> PinnedAtEnd() const ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The control thread: moves ----
  // A move step begins with the workers held at `clock`.
  struct MoveStep {
    uint32_t target = 0;
    uint64_t requested = 0;  // The requests it answers.
    uint64_t generation = 0;
    uint64_t next_cut = 0;  // The next cut after `clock`.
    std::optional<PartitionMove::InFlight> in_flight;
  };
  MoveStep BeginMoveStep(uint64_t clock) const ABSL_LOCKS_EXCLUDED(mu_);
  // The move in flight is out of date: it starts again.
  void ForgetMove() ABSL_LOCKS_EXCLUDED(mu_);
  // The first step pre-copied `move`.
  void MovePrecopied(PartitionMove::InFlight move) ABSL_LOCKS_EXCLUDED(mu_);
  // A step ended (PartitionMove::StepEnded at `now`); sets `next` to the
  // next cut after its clock. Returns whether the move is tried again.
  bool MoveStepEnded(const PartitionMove::Step& step, absl::Time now, uint64_t* next)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Nobody trains any more: every move request is answered with `why`.
  void EndMoves(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool EndedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return phase_ == Phase::kDone || phase_ == Phase::kFailed;
  }
  void FailLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // waiting -> running once every member registered and the job formed;
  // -> done once every worker is over (finished, or dead and dropped), the
  // final cut is taken and no evaluation is pending (job.h).
  void UpdateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DROP: the estimated samples of unfinished dead workers' shares.
  uint64_t UntrainedSamplesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string SummaryLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RecoveryBook::Pending& PendLocked(const std::string& cause, absl::Time failed_at, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ServerFailedLocked(uint32_t index, const std::string& cause, absl::Time failed_at,
                          absl::Time now, bool lost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Declares worker `rank` dead in the clock service per on_worker_loss;
  // true if the servers' active set changed.
  bool WorkerLostLocked(uint32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rejoining worker's clock, grant, position, report and finish.
  void ApplyRejoinLocked(const RegisterRequest& request, uint32_t index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admit's rejoin after forming (a server's other state, a worker that was
  // silent or rewinds itself); true if the servers must learn it.
  bool AdmitRejoinLocked(const RegisterRequest& request, const Registration& reg,
                         const std::string& who, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MembersSwept's deadlines: servers missing at start_deadline_ms, dead
  // past server_deadline_ms.
  void CheckServerDeadlinesLocked(const std::vector<Member>& members, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the job for workers lost past worker_deadline_ms (job.h).
  void CheckWorkerDeadlinesLocked(const std::vector<Member>& members, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks worker `rank` as restarted in the current generation (the rewind
  // phase of a recovery ends, and after a failure the clocks resume, when
  // every worker is).
  void WorkerStartedLocked(uint32_t rank, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unpauses the clocks held after a rollback once every worker started in
  // the new generation, or at start_deadline_ms (the missing ones are then
  // lost as on_worker_loss says; REASSIGN and DROP stop waiting for a worker
  // lost for worker_deadline_ms). True if the servers' active set changed.
  bool ResumeAfterRewindLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // REASSIGN: the lost worker whose share `rank` (done with its own) may
  // train, leased to it; nullopt if none.
  std::optional<uint32_t> LeaseOrphanLocked(uint32_t rank, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What WaitStart waits for, for its timeout message.
  std::string StartWaitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every worker entered barrier `name`, finished or (DROP) died.
  bool BarrierCompleteLocked(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds the clock at the first multiple of checkpoint.every_steps or
  // training.eval_every_steps after `after` nobody has started.
  void HoldFirstCutLocked(uint64_t after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After formation or a rollback to `clock` (a takeover: UINT64_MAX):
  // forgets evaluations after it, queues the complete checkpoints `points`
  // not evaluated yet, applies a recorded or due stop.
  void ResumeEvaluationsLocked(uint64_t clock, const std::vector<uint64_t>& points)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops training if the evaluations say so (early stopping).
  void MaybeStopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoints wait to be evaluated and some worker is left to do it.
  bool EvaluationsPendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The evaluation fields of JobStatus.
  void EvalStatusLocked(JobStatusResponse* response) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a wanted move may start at `now` (PartitionMove::MayStart with
  // the servers of the move not registered and alive).
  bool MoveMayStartLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllRegisteredOnce() const;
  // The map's servers that are not registered and alive.
  std::vector<uint32_t> MissingServers() const;

  // Constant after construction.
  const JobConfig& config_;
  Membership& members_;
  ClockService& clock_;
  const ServerNotifier notifier_;
  const absl::Time start_time_;
  const bool checkpoints_on_;

  mutable Mutex mu_;
  CondVar changed_;  // Signalled on every change a waiter may care for.
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kWaiting;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  bool formed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool control_over_ ABSL_GUARDED_BY(mu_) = false;  // The control thread ended.
  // REASSIGN and DROP: since when no worker is left to train.
  std::optional<absl::Time> workers_gone_since_ ABSL_GUARDED_BY(mu_);
  Takeover takeover_ ABSL_GUARDED_BY(mu_);
  WorkerBook workers_ ABSL_GUARDED_BY(mu_);
  WorkerLoss loss_ ABSL_GUARDED_BY(mu_);
  RecoveryBook recovery_ ABSL_GUARDED_BY(mu_);
  CutBook cuts_ ABSL_GUARDED_BY(mu_);
  EvalBook evals_ ABSL_GUARDED_BY(mu_);
  PartitionMove move_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_JOB_STATE_H_
