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
// Structure. JobCoordinator is the request side: it checks the members'
// calls and runs failure detection (Sweep). The control thread (formation,
// cuts, recoveries, moves) is a JobControl (job_control.h). Both act on one
// JobState (job_state.h) through its verbs: it owns the job's phase,
// generation and books (cuts, recoveries, evaluations, worker loss, the
// workers' reports, partition moves) and is the only one that takes their
// lock; membership (membership.h) and the clocks (clock.h) lock
// themselves.
//
// Thread-safe. Blocking calls (GetPartitionMap, WaitStart, WaitClock,
// Barrier, WaitDone) take deadlines. Start() runs two threads: failure
// detection (Sweep) and control.
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
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/clock.h"
#include "scheduler/job_control.h"
#include "scheduler/job_state.h"
#include "scheduler/membership.h"
#include "scheduler/server_ops.h"

namespace shardps {

class JobCoordinator {
 public:
  // Called (outside locks) when servers must learn a new active-worker set
  // or partition map: (map, active worker ranks).
  using ServerNotifier = JobState::ServerNotifier;

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
  // Resharding (scheduler.proto ReshardRequest): asks the control thread
  // to move partitions so that the job runs on `servers` servers, and
  // blocks until it answered (the move done, or nothing to move) or
  // `deadline`. INVALID_ARGUMENT for 0 or more than cluster.max_servers;
  // FAILED_PRECONDITION if checkpoints are off, the job ended, or the move
  // was refused (a server not registered: the message says which);
  // DEADLINE_EXCEEDED if it did not end in time (it may still run).
  absl::StatusOr<ReshardResponse> Reshard(uint32_t servers, absl::Time deadline);
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
  // ---- job_workers.cc: checks of the workers' requests ----
  // See WaitClock above; `what` names the request in the refusal, and a
  // finished worker is accepted if `finished_ok`.
  absl::Status CheckWorker(const char* what, uint32_t rank, bool finished_ok) const;
  // See ReportMetrics above; `max_step`: the largest step the rank may
  // report.
  absl::Status ValidateReport(const MetricsReport& report, uint64_t max_step) const;

  // ---- job.cc: registration ----
  // Before the job forms, a rejoining server's map (its owners) becomes the
  // job's if it is the newest seen (Membership::AdoptOwners): a restarted
  // scheduler goes on with the owners a move left. INVALID_ARGUMENT for
  // owners that do not fit the job.
  absl::Status AdoptRejoinedMap(const RegisterRequest& request);

  // Constant after construction.
  const JobConfig config_;
  const uint64_t fingerprint_;
  const absl::Time start_time_;
  const bool checkpoints_on_;  // checkpoint.dir is set.

  // Each part locks itself; the state is shared with the control thread
  // and takes its own lock (job_state.h).
  Membership members_;
  ClockService clock_;
  JobState state_;
  JobControl control_;

  std::atomic<bool> stop_{false};
  std::thread sweeper_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_JOB_H_
