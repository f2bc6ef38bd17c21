// JobState: what the scheduler knows of its job, under one lock, and the
// transitions both of the scheduler's sides make on it. The request side
// (JobCoordinator: registrations, heartbeats, the workers' calls, failure
// detection) and the control thread (JobControl: formation, cuts,
// recoveries) meet here and nowhere else; job.h has the lifecycle these
// fields follow.
//
// Who writes what:
//  - the control thread alone: formed, generation, control_over, and the
//    rewinds of positions / reports / reported_final / barriers (it clears
//    them when the job rolls back);
//  - the request side alone: takeover (before forming), and the workers'
//    ticks, reports, barriers and positions between rollbacks;
//  - resharding: the request side sets reshard.target and counts
//    reshard.requested; the control thread runs the move and writes the
//    rest of `reshard`;
//  - both: phase and failure (Fail, Update), the recovery book (failures
//    pend a recovery, the control thread runs it), the cut book (requests
//    ask for cuts, the control thread takes them), the evaluation book
//    (workers report, cuts enqueue) and the worker-loss book.
// The books are the classes that keep their own invariants
// (recovery_book.h, cut_book.h, eval_book.h, worker_loss.h, takeover.h);
// JobState holds them and decides what crosses them.
//
// Thread-safe only under `mu`: every field and method but Notify needs it.
// Membership and ClockService (not owned) lock themselves.
#ifndef SHARDPS_SCHEDULER_JOB_STATE_H_
#define SHARDPS_SCHEDULER_JOB_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/clock.h"
#include "scheduler/cut_book.h"
#include "scheduler/eval_book.h"
#include "scheduler/membership.h"
#include "scheduler/recovery_book.h"
#include "scheduler/takeover.h"
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

  // ---- transitions (mu held) ----
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return phase == Phase::kDone || phase == Phase::kFailed;
  }
  // Fails the job with `why` (once; later calls keep the first reason) and
  // aborts every clock wait.
  void Fail(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // waiting -> running once every member registered and the job formed;
  // -> done once every worker is over (finished, or dead and dropped), the
  // final cut is taken and no evaluation is pending (job.h).
  void Update() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // One line per worker (finished, training, dead with data unfinished),
  // for logs and JobStatus.summary.
  std::string Summary() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // DROP: the estimated samples of unfinished dead workers' shares.
  uint64_t UntrainedSamples() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The recovery the control thread is to run (a new one, or `cause` added
  // to the pending one); the clocks pause until it is done.
  RecoveryBook::Pending& Pend(const std::string& cause, absl::Time failed_at, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Pends a recovery for server `index`; `lost`: its state is gone.
  void ServerFailed(uint32_t index, const std::string& cause, absl::Time failed_at, absl::Time now,
                    bool lost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Declares worker `rank` dead in the clock service per on_worker_loss;
  // true if the servers' active set changed (Notify).
  bool WorkerLost(uint32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Fails the job for workers lost past worker_deadline_ms (job.h).
  void CheckWorkerDeadlines(const std::vector<Member>& members, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Marks worker `rank` as restarted in the current generation (the rewind
  // phase of a recovery ends, and after a failure the clocks resume, when
  // every worker is).
  void WorkerStarted(uint32_t rank, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Unpauses the clocks held after a rollback once every worker started in
  // the new generation, or at start_deadline_ms (the missing ones are then
  // lost as on_worker_loss says; REASSIGN and DROP stop waiting for a worker
  // lost for worker_deadline_ms). True if the servers' active set changed.
  bool ResumeAfterRewind(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Holds the clock at the first multiple of checkpoint.every_steps or
  // training.eval_every_steps after `after` nobody has started.
  void HoldFirstCut(uint64_t after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // After formation or a rollback to `clock` (a takeover: UINT64_MAX):
  // forgets evaluations after it, queues the complete checkpoints `points`
  // not evaluated yet, applies a recorded or due stop.
  void ResumeEvaluations(uint64_t clock, const std::vector<uint64_t>& points)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Stops training if the evaluations say so (early stopping).
  void MaybeStop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Checkpoints wait to be evaluated and some worker is left to do it.
  bool EvaluationsPending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The evaluation fields of JobStatus.
  void EvalStatus(JobStatusResponse* response) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Tells the servers the map and the live workers (without mu: it calls
  // out).
  void Notify() ABSL_LOCKS_EXCLUDED(mu);

  // ---- the state ----
  mutable Mutex mu;
  CondVar changed;  // Signalled on every change a waiter may care for.
  Phase phase ABSL_GUARDED_BY(mu) = Phase::kWaiting;
  std::string failure ABSL_GUARDED_BY(mu);
  bool formed ABSL_GUARDED_BY(mu) = false;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  // Before forming: the processes of an earlier scheduler that rejoined
  // with their state, and those that registered without.
  Takeover takeover ABSL_GUARDED_BY(mu);
  // Each worker's latest metrics report, and whether it was its final one.
  std::map<uint32_t, MetricsReport> reports ABSL_GUARDED_BY(mu);
  std::vector<bool> reported_final ABSL_GUARDED_BY(mu);
  // Per barrier name, which ranks entered it.
  std::map<std::string, std::vector<bool>> barriers ABSL_GUARDED_BY(mu);
  // Latest (clock, data position) of each worker: its ticks, or a restore
  // point's.
  std::map<uint32_t, std::pair<uint64_t, std::string>> positions ABSL_GUARDED_BY(mu);
  // cluster.on_worker_loss: the policy, each share's trained samples (its
  // latest tick; counted with its reports, as a lost worker's last report
  // may be older), the leases of lost shares, and the rewind after a
  // rollback (who has not started again, since when the clocks wait).
  WorkerLoss loss ABSL_GUARDED_BY(mu);
  std::optional<absl::Time> workers_gone_since ABSL_GUARDED_BY(mu);
  // The pending and running recovery, and the reports of those done.
  RecoveryBook recovery ABSL_GUARDED_BY(mu);
  // Where checkpoint cuts go, on-demand requests, what the cuts did.
  CutBook cuts ABSL_GUARDED_BY(mu);
  bool control_over ABSL_GUARDED_BY(mu) = false;  // The control thread ended.
  // Resharding (ReshardRequest): the server count asked for (0: none), the
  // requests so far and those the control thread has answered (a move done,
  // nothing to move, or `error`), and what the moves did.
  struct Reshard {
    uint32_t target = 0;
    uint64_t requested = 0;
    uint64_t served = 0;
    std::string error;   // Of the last request served; empty: it succeeded.
    uint64_t clock = 0;  // Of the last move.
    uint32_t moves = 0;  // Reshards that moved partitions.
    uint64_t partitions_moved = 0;
    uint32_t last_moved = 0;   // Partitions of the last request served.
    uint64_t rows_moved = 0;   // Of the moving partitions, at their pre-copies.
    uint64_t bytes_moved = 0;  // Checkpoint bytes the destinations read (both steps).
    double last_sec = 0;       // The last move, from its cut to its switch.
    // A move that failed before its switch because a server of it was gone
    // or unreachable is tried again, not before `retry_after` (a backoff
    // from two heartbeat periods, doubling up to 5 s) and once every server
    // of it is registered and alive, until `retry_until` (server_deadline_ms
    // after the first failure; then the request fails). Unset: no retry is
    // waiting.
    std::optional<absl::Time> retry_until;
    absl::Time retry_after;
    uint32_t retries = 0;
    std::string retry_cause;  // The failure that is retried.
  };
  Reshard reshard ABSL_GUARDED_BY(mu);
  EvalBook evals ABSL_GUARDED_BY(mu);

 private:
  bool AllRegisteredOnce() const;

  const JobConfig& config_;
  Membership& members_;
  ClockService& clock_;
  const ServerNotifier notifier_;
  const absl::Time start_time_;
  const bool checkpoints_on_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_JOB_STATE_H_
