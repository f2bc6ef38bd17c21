// The job coordinator: the scheduler's gRPC-free core. It ties membership,
// the clock service, barriers, metrics, checkpoints and recovery together;
// the gRPC service (scheduler_service.h) is a thin shell over it, and
// ServerOps (server_ops.h) carries out what it decides on the servers.
//
// Lifecycle. The job *forms* once every server has registered (and, when
// processes of an earlier scheduler rejoined, every worker has rejoined or
// expired): the coordinator then gives the job its start point and job
// generation (common/generation.h):
//  - processes rejoined with one consistent state, none lost: the job goes
//    on from there (a restarted scheduler takes over; nothing rolls back);
//  - otherwise the servers are restored (ServerOps::Restore) to the latest
//    complete checkpoint of checkpoint.dir (a job started again resumes from
//    it), or reset to their initial values, in a new generation, and every
//    worker starts from that checkpoint's clock and its recorded data
//    position.
// Workers learn their start from WaitStart. The state is "waiting" until
// every server and worker has registered once, then "running"; "done" when
// every worker has sent its final report or died (at least one finished)
// and the final checkpoint is written; "failed: <why>" when a server stays
// dead past cluster.server_deadline_ms, a server is missing at
// cluster.start_deadline_ms, a worker is lost past cluster.worker_deadline_ms
// (see below), or a restore fails.
//
// Worker loss (cluster.on_worker_loss; missed heartbeats or a reported
// training error declare a worker dead):
//  - WAIT (BSP's default): the worker stays in the clock minimum and in the
//    servers' active set, so no clock closes without it; a restarted worker
//    resumes at its last acknowledged step and the job goes on as if nothing
//    happened. Dead past worker_deadline_ms: the job fails naming it.
//  - REASSIGN (SSP/ASP's default): it leaves the clock minimum and the
//    others go on; its share is trained when it is back, and the job is not
//    done while a share is unfinished (dead past worker_deadline_ms: the job
//    fails naming it).
//  - DROP: it leaves the clock minimum; the job may end "done" without its
//    share (JobStatusResponse.untrained_samples, a warning); it fails only
//    when every worker is dead for worker_deadline_ms.
// After a rollback the clocks resume only once every worker has registered
// (or finished), bounded by start_deadline_ms; then WAIT keeps waiting for
// the missing ones and REASSIGN and DROP go on without them. Heartbeat answers carry
// stop = true once the job ended, so servers and workers exit.
//
// Recovery (the coordinator owns it; supervisors only restart what died,
// with the same flags). A server declared dead (Sweep) or replaced by a new
// process (a registration of another incarnation) pauses the clocks at once.
// Once every server is registered again (within server_deadline_ms of its
// death), with checkpoint.recovery EXACT (the default) every server restores
// the latest complete checkpoint (or its initial values) in place, in a new
// generation, and every worker not dead rewinds to the checkpoint's clock and
// data position; requests of the old generation are refused everywhere, so
// none of them is applied after the rollback. A server declared dead that
// comes back with its state (the same incarnation: it was stalled) needs no
// rollback. With PARTIAL (SSP/ASP), only the new server restores its
// partitions, in the current generation, before the clocks resume. Each
// recovery is reported (RecoveryReport) with its phases.
//
// Checkpoints (checkpoint.every_steps / every_seconds / on demand): the
// clocks are held at a cut C; once every live worker has ticked C, every
// server copies its partitions (ServerOps::CopyCut), the workers are
// released, and the files and MANIFEST are written behind them
// (FinishCut). When every worker has finished training, a final cut is
// taken before the job ends.
//
// Checkpoint faults are loud (checkpoint_guard.h):
//  - an unusable checkpoint.dir (not creatable, read-only, not a
//    directory) fails the job at start with the reason
//    (CheckCheckpointDir);
//  - a cut that fails for another reason than a server being gone (which a
//    recovery handles) has its directory removed (no orphan part files) and
//    is tried again at the first unstarted clock after 1 s, then 2 s; the
//    third failure in a row fails the job with the reason. The final cut is
//    retried at its clock the same way, so a job never ends "done" without
//    its final checkpoint;
//  - a restore never skips a corrupt checkpoint silently: with
//    checkpoint.on_corrupt FAIL (the default) a corrupt newest checkpoint
//    (MANIFEST present but unreadable, a file missing or of the wrong size,
//    or refused by a server, e.g. a CRC mismatch) fails the job naming it and
//    the file; with FALL_BACK the corrupt checkpoints newer than the one
//    restored are renamed aside (ckpt-<clock>.corrupt-<unix seconds>). An
//    incomplete checkpoint (no MANIFEST: a write cut short) is skipped.
//
// Thread-safe. Blocking calls (GetPartitionMap, WaitStart, WaitClock,
// Barrier, WaitDone) take deadlines. Start() runs two threads: failure
// detection (Sweep) and control (formation, cuts, recoveries).
#ifndef SHARDPS_SCHEDULER_JOB_H_
#define SHARDPS_SCHEDULER_JOB_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
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
#include "scheduler/recovery_book.h"
#include "scheduler/server_ops.h"
#include "scheduler/takeover.h"
#include "scheduler/worker_loss.h"

namespace shardps {

class JobCoordinator {
 public:
  // Called (outside locks) when servers must learn a new active-worker set
  // or partition map: (map, active worker ranks).
  using ServerNotifier =
      std::function<void(const PartitionMapProto& map, const std::vector<uint32_t>& active)>;

  // `ops` is not owned and must outlive the coordinator.
  JobCoordinator(JobConfig config, ServerNotifier notifier, ServerOps* ops);
  ~JobCoordinator();
  JobCoordinator(const JobCoordinator&) = delete;
  JobCoordinator& operator=(const JobCoordinator&) = delete;

  // With checkpoints on, creates checkpoint.dir if missing and probes it
  // (write, fsync, remove a small file); an unusable one fails the job at
  // once with the reason, which is returned. Call before Start().
  absl::Status CheckCheckpointDir();
  // Starts the failure-detection and control threads.
  void Start();

  // Asks for a checkpoint as soon as possible: at the first clock no worker
  // has started (which may move an every_steps hold earlier).
  void RequestCheckpoint();
  // RequestCheckpoint, then blocks until a checkpoint placed after the
  // request is written. Returns its clock, the write's error,
  // FAILED_PRECONDITION if checkpoints are off or the job ended first, or
  // DEADLINE_EXCEEDED (the checkpoint still happens later).
  absl::StatusOr<uint64_t> CheckpointNow(absl::Time deadline);
  // Clocks of the checkpoints written by this coordinator.
  std::vector<uint64_t> Checkpoints() const;
  // The partition map once every server has registered.
  std::optional<PartitionMapProto> Map() const { return members_.Map(); }
  // The job generation (0 until the job formed).
  uint64_t generation() const;

  absl::Status Register(const RegisterRequest& request, RegisterResponse* response);
  // Refused unless it names this job (job_id: FAILED_PRECONDITION) and the
  // incarnation of the slot's holder (membership.h): a heartbeat that does
  // not keeps nobody alive.
  absl::Status Heartbeat(const HeartbeatRequest& request, HeartbeatResponse* response);
  absl::Status GetPartitionMap(const GetPartitionMapRequest& request, PartitionMapProto* response);
  // Where worker `rank` starts (see WaitStartRequest). FAILED_PRECONDITION
  // for a rank that did not register with this scheduler; ABORTED once the
  // job failed. With on_worker_loss REASSIGN, a worker that has finished its
  // share and waits for the next generation may be answered adopt_rank
  // instead: the share of a worker lost for dead_after_ms or more, leased
  // to it (not offered again for 2 x dead_after_ms, time to register as
  // that rank).
  absl::Status WaitStart(const WaitStartRequest& request, WaitStartResponse* response);
  //
  // WaitClock, Tick, Barrier and ReportMetrics come from registered workers
  // only (CheckWorker): a rank that never registered with this scheduler is
  // refused with FAILED_PRECONDITION naming it, one declared dead with
  // UNAVAILABLE (its heartbeat rejoins it, then a retry is accepted).
  absl::Status WaitClock(const WaitClockRequest& request, WaitClockResponse* response);
  // For the RPC layer, before WaitClock, Tick, Barrier and ReportMetrics:
  // FAILED_PRECONDITION if `role` `index` is held (alive or finished) by
  // another process than `incarnation` (RegisterRequest.incarnation); OK
  // otherwise, the calls themselves refuse unregistered and dead ranks.
  absl::Status CheckSender(const char* what, Role role, uint32_t index, uint64_t incarnation) const;
  // A tick beyond the rank's granted step + 1 is FAILED_PRECONDITION
  // (clock.h).
  absl::Status Tick(const TickRequest& request, TickResponse* response);
  // Blocks until every worker has entered barrier `name`, finished (reported
  // done) or, with on_worker_loss DROP, died. With REASSIGN, a worker done
  // with its own share may be answered adopt_rank instead (as WaitStart).
  absl::Status Barrier(const BarrierRequest& request, BarrierResponse* response);
  // INVALID_ARGUMENT, naming the field, for a report no worker can send
  // (ValidateReport): a non-finite or negative number, an AUC outside
  // [0, 1], a step beyond what the rank was allowed to start, more samples
  // than step * training.batch_size.
  absl::Status ReportMetrics(const MetricsReport& report);
  void JobStatus(JobStatusResponse* response) const;
  // Periodic evaluation (training.eval_every_steps, eval_book.h): records
  // the evaluation the worker reports (request.done, or its error), then
  // blocks until a checkpoint is due for it (response.clock), the job ended
  // (job_ended) or timeout_ms (at most 60 s; clock 0). A due checkpoint is
  // one cut at a multiple of eval_every_steps, or the final one; the job is
  // not done before each is evaluated (unless no worker is left to do it).
  // After training.early_stopping.patience evaluations without improvement
  // the clocks stop every worker at the first clock none has started
  // (ClockService::StopAtFirstUnstarted). FAILED_PRECONDITION when periodic
  // evaluation is off; INVALID_ARGUMENT for an impossible result.
  absl::Status Evaluation(const EvaluationRequest& request, EvaluationResponse* response);
  // A worker that cannot redo its step exactly (RollBackRequest) has the
  // job roll back to its last complete checkpoint, as after a lost server.
  // OK at once for a request of an older generation (a rollback since
  // covers it); FAILED_PRECONDITION unless the job is BSP with
  // on_worker_loss WAIT (the only policy that promises exact steps).
  absl::Status RequestRollBack(const RollBackRequest& request);

  // One failure-detection pass at `now` (public for tests).
  void Sweep(absl::Time now);

  // Blocks until the job is done (OK) or failed (ABORTED with the reason), or
  // `deadline` (DEADLINE_EXCEEDED).
  absl::Status WaitDone(absl::Time deadline);

  ClockService& clock() { return clock_; }

 private:
  enum class State { kWaiting, kRunning, kDone, kFailed };

  // ---- job_workers.cc: checks of the workers' requests ----
  // See WaitClock above; `what` names the request in the refusal, and a
  // finished worker is accepted if `finished_ok`.
  absl::Status CheckWorker(const char* what, uint32_t rank, bool finished_ok) const;
  // See ReportMetrics above; `max_step`: the largest step the rank may
  // report.
  absl::Status ValidateReport(const MetricsReport& report, uint64_t max_step) const;

  // ---- job.cc: requests and membership ----
  // Takes a registration Membership accepted (not a repeat) into the job:
  // before forming, a rejoin makes this scheduler take the job over; after
  // it, a server with another state (or a new process) is a failure to
  // recover from, a restarted worker takes its rank back. True if the
  // servers must learn the active set again.
  bool AdmitLocked(const RegisterRequest& request, const Registration& reg, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyRejoinLocked(const RegisterRequest& request, uint32_t index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a failure of server `index`; `lost`: its state is gone.
  // The recovery the control thread is to run (a new one, or `cause` added
  // to the pending one); the clocks pause until it is done.
  RecoveryBook::Pending& PendLocked(const std::string& cause, absl::Time failed_at, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ServerFailedLocked(uint32_t index, const std::string& cause, absl::Time failed_at,
                          absl::Time now, bool lost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyServers();
  void UpdateStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllRegisteredOnce() const;
  std::string SummaryLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // REASSIGN: the lost worker whose share `rank` (done with its own: it
  // reported done) may train, leased to it; nullopt if none.
  std::optional<uint32_t> LeaseOrphanLocked(uint32_t rank, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What WaitStart waits for, for its timeout message.
  std::string StartWaitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks worker `rank` as restarted in the current generation (the rewind
  // phase of a recovery ends, and after a failure the clocks resume, when
  // every worker is).
  void WorkerStartedLocked(uint32_t rank, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Declares worker `rank` dead in the clock service per on_worker_loss;
  // true if the servers' active set changed (NotifyServers).
  bool WorkerLostLocked(uint32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the job for workers lost past worker_deadline_ms (see above).
  void CheckWorkerDeadlinesLocked(const std::vector<Member>& members, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unpauses the clocks held after a rollback once every worker started in
  // the new generation, or at start_deadline_ms (the missing ones are then
  // lost as on_worker_loss says; REASSIGN and DROP stop waiting for a worker
  // lost for worker_deadline_ms). True if the servers' active set changed.
  bool ResumeAfterRewindLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DROP: the estimated samples of unfinished dead workers' shares.
  uint64_t UntrainedSamplesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ == State::kDone || state_ == State::kFailed;
  }

  // ---- job_control.cc: the control thread ----
  void ControlLoop();
  // Once every worker is finished or dead (and, with dead ones left, the
  // policy lets the job end without them), takes the job's final cut (the
  // on-demand requests up to `serving` are served by it) and marks it taken.
  void TakeFinalCut(uint64_t serving);
  // Waits for the servers (and with a takeover the workers), then gives the
  // job its start point. False if the job failed or stopped.
  bool Form();
  // Waits until every server is registered and alive. False if the job
  // ended meanwhile.
  bool WaitForServers();
  // Restores every server to the newest usable restore point in a new
  // generation and rewinds the workers there; fills `report`'s phases from
  // `detected_at` on and records it (a rollback to the initial values only
  // if `record_initial`). False if the job failed.
  bool RollBack(RecoveryReport* report, absl::Time detected_at, bool record_initial);
  // Runs the pending recovery.
  void Recover();
  // Ends the recovery `p` if every server declared dead came back with its
  // state (a "rejoin": nothing to restore); false otherwise.
  bool EndRejoinLocked(const RecoveryBook::Pending& p, RecoveryReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // checkpoint.recovery PARTIAL: restores only the replaced servers'
  // partitions from `point`, in the current generation.
  void RecoverPartially(const RecoveryBook::Pending& p, const RestorePoint& point,
                        RecoveryReport* report);
  // Moves the clocks and positions to `point` in `generation`; `kept`: the
  // clocks of the complete checkpoints up to it (periodic evaluation).
  void Rewind(const RestorePoint& point, uint64_t generation, RecoveryReport* report, bool record,
              const std::vector<uint64_t>& kept);
  // ---- job_checkpoint.cc ----
  // Writes the checkpoint at `clock` (every worker held there or finished);
  // releases the hold after the copy (`next`: the next hold, 0 = none).
  // `serving`: the on-demand requests it answers. Returns the cut's status.
  // `final`: the job's last cut (always due for evaluation).
  absl::Status Cut(uint64_t clock, uint64_t next, uint64_t serving, bool final = false);
  // After a cut at `clock` that ended with `st`: removes a failed cut's
  // directory, counts failures not due to a server being gone, fails the
  // job at the kCutAttempts-th in a row. True if the cut is to be tried
  // again at retry_cut_at_.
  bool AfterCut(uint64_t clock, const absl::Status& st);
  // Applies checkpoint.on_corrupt to the corrupt checkpoint `dir`: false
  // (the job failed, naming it and `why`) with FAIL; with FALL_BACK sets it
  // aside and returns true (false if it cannot be renamed).
  bool OnCorruptCheckpoint(const std::string& dir, const absl::Status& why);
  // Applies OnCorruptCheckpoint to every corrupt checkpoint newer than
  // `newest_usable` (-1: none is usable). False if the job failed.
  bool CheckNewerCheckpoints(int64_t newest_usable);
  // Holds the clock at the first multiple of checkpoint.every_steps or
  // training.eval_every_steps after `after` nobody has started.
  void HoldFirstCut(uint64_t after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- job_eval.cc: periodic evaluation and early stopping ----
  // Reads the persisted evaluations (with CheckCheckpointDir).
  absl::Status LoadEvaluations();
  // After formation or a rollback to `clock` (a takeover: UINT64_MAX):
  // forgets evaluations after it,
  // queues the complete checkpoints `points` not evaluated yet, applies a
  // recorded or due stop.
  void ResumeEvaluationsLocked(uint64_t clock, const std::vector<uint64_t>& points)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops training if the evaluations say so (early stopping).
  void MaybeStopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoints wait to be evaluated and some worker is left to do it.
  bool EvaluationsPendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Once the job is done, a last GC (control thread): the checkpoints kept
  // only to be evaluated go, the best one stays.
  void FinalCollect();
  // The evaluation fields of JobStatus.
  void EvalStatusLocked(JobStatusResponse* response) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const JobConfig config_;
  const uint64_t fingerprint_;
  const ServerNotifier notifier_;
  ServerOps* const ops_;
  const absl::Time start_time_;
  const bool checkpoints_on_;  // checkpoint.dir is set.

  Membership members_;
  ClockService clock_;

  mutable Mutex mu_;
  CondVar changed_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kWaiting;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  bool formed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Before forming: the processes of an earlier scheduler that rejoined
  // with their state, and those that registered without.
  Takeover takeover_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, MetricsReport> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> final_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<bool>> barriers_ ABSL_GUARDED_BY(mu_);
  // Latest (clock, data position) of each worker: its ticks, or a restore
  // point's.
  std::map<uint32_t, std::pair<uint64_t, std::string>> positions_ ABSL_GUARDED_BY(mu_);
  // cluster.on_worker_loss: the policy, each share's trained samples (its
  // latest tick; counted with its reports, as a lost worker's last report
  // may be older), the leases of lost shares, and the rewind after a
  // rollback (who has not started again, since when the clocks wait).
  WorkerLoss loss_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> workers_gone_since_ ABSL_GUARDED_BY(mu_);

  // The pending and running recovery, and the reports of those done.
  RecoveryBook recovery_ ABSL_GUARDED_BY(mu_);

  // Where checkpoint cuts go, on-demand requests, what the cuts did.
  CutBook cuts_ ABSL_GUARDED_BY(mu_);
  bool control_over_ ABSL_GUARDED_BY(mu_) = false;  // The control thread ended.
  EvalBook evals_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> stop_{false};
  std::thread control_;
  std::thread sweeper_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_JOB_H_
