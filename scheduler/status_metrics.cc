// The scheduler's Prometheus series (status_metrics.h).
#include "scheduler/status_metrics.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "common/metrics.h"

namespace shardps {

std::string MemberRoleLabel(Role role) {
  return role == SERVER ? "server" : role == WORKER ? "worker" : "unknown";
}

std::string MemberStateLabel(MemberState state) {
  switch (state) {
    case ALIVE:
      return "alive";
    case DEAD:
      return "dead";
    case FINISHED:
      return "finished";
    default:
      return "not registered";
  }
}

namespace {

// Per member: its clock (workers) and its state.
void ExportMemberMetrics(const JobStatusResponse& status) {
  using metrics::GetGauge;
  for (const MemberStatus& m : status.members()) {
    const std::string index = std::to_string(m.index());
    if (m.role() == WORKER) {
      GetGauge("shardps_scheduler_worker_clock", "Completed clock (steps) per worker.",
               {{"rank", index}})
          .Set(static_cast<double>(m.clock()));
    }
    for (MemberState s : {STATE_UNSPECIFIED, ALIVE, DEAD, FINISHED}) {
      GetGauge(
          "shardps_scheduler_member_state",
          "1 for the member's state (not registered, alive, dead, finished).",
          {{"role", MemberRoleLabel(m.role())}, {"index", index}, {"state", MemberStateLabel(s)}})
          .Set(m.state() == s ? 1 : 0);
    }
  }
}

// The recoveries by kind, and the last complete one's phases.
void ExportRecoveryMetrics(const JobStatusResponse& status) {
  using metrics::GetGauge;
  std::map<std::string, int> by_kind;
  const RecoveryReport* last = nullptr;
  for (const RecoveryReport& r : status.recoveries()) {
    ++by_kind[r.kind()];
    if (r.complete()) last = &r;
  }
  for (const char* kind : {"rollback", "partial", "rejoin", "resume", "takeover"}) {
    GetGauge("shardps_scheduler_recoveries", "Recoveries so far, by kind.", {{"kind", kind}})
        .Set(by_kind[kind]);
  }
  if (last != nullptr) {
    const std::pair<const char*, double> phases[] = {{"detect", last->detect_sec()},
                                                     {"wait", last->wait_sec()},
                                                     {"restore", last->restore_sec()},
                                                     {"rewind", last->rewind_sec()},
                                                     {"total", last->total_sec()}};
    for (const auto& [phase, seconds] : phases) {
      GetGauge("shardps_scheduler_last_recovery_seconds",
               "The last complete recovery, by phase: detect (last heartbeat to detection), "
               "wait (for every server), restore, rewind (to every worker restarted), total.",
               {{"phase", phase}})
          .Set(seconds);
    }
  }
}

// The partition map and the moves that changed it (docs/design.md,
// "Resharding").
void ExportReshardMetrics(const JobStatusResponse& status) {
  using metrics::GetGauge;
  GetGauge("shardps_scheduler_map_version", "The partition map's version.")
      .Set(static_cast<double>(status.map_version()));
  GetGauge("shardps_scheduler_map_servers", "The servers the partition map names.")
      .Set(status.map_servers());
  GetGauge("shardps_scheduler_reshards", "Moves of partitions done (ps_status --servers).")
      .Set(status.reshards());
  GetGauge("shardps_scheduler_reshard_partitions_moved", "Partitions the moves moved.")
      .Set(static_cast<double>(status.partitions_moved()));
  GetGauge("shardps_scheduler_reshard_rows_moved", "Rows the moves restored on destinations.")
      .Set(static_cast<double>(status.reshard_rows_moved()));
  GetGauge("shardps_scheduler_reshard_bytes_moved",
           "Checkpoint bytes the moves' destinations read.")
      .Set(static_cast<double>(status.reshard_bytes_moved()));
  GetGauge("shardps_scheduler_last_reshard_seconds",
           "The last move, from its cut to its map switch (the clocks are held).")
      .Set(status.last_reshard_sec());
}

}  // namespace

void ExportJobMetrics(const JobStatusResponse& status) {
  using metrics::GetGauge;
  ExportMemberMetrics(status);
  GetGauge("shardps_scheduler_min_clock", "Minimum clock over live workers.")
      .Set(static_cast<double>(status.min_clock()));
  GetGauge("shardps_scheduler_max_clock", "Maximum worker clock.")
      .Set(static_cast<double>(status.max_clock()));
  GetGauge("shardps_scheduler_clock_spread", "Current max - min clock (staleness).")
      .Set(static_cast<double>(status.max_clock() -
                               std::min(status.min_clock(), status.max_clock())));
  GetGauge("shardps_scheduler_max_spread", "Largest max - min clock seen.")
      .Set(static_cast<double>(status.max_spread()));
  const std::string state = status.state().substr(0, status.state().find(':'));
  for (const char* s : {"waiting", "running", "recovering", "done", "failed"}) {
    GetGauge("shardps_scheduler_job_state", "1 for the job's state.", {{"state", s}})
        .Set(state == s ? 1 : 0);
  }
  GetGauge("shardps_scheduler_samples_per_second", "Sum of the workers' samples/s.")
      .Set(status.samples_per_sec());
  GetGauge("shardps_scheduler_samples", "Examples trained so far, all workers.")
      .Set(static_cast<double>(status.total_samples()));
  GetGauge("shardps_scheduler_train_loss", "Mean of the workers' reported train loss.")
      .Set(status.train_loss());
  GetGauge("shardps_scheduler_eval_auc",
           "Eval AUC: the newest periodic evaluation, or the finished job's (0 before).")
      .Set(status.eval_auc());
  GetGauge("shardps_scheduler_eval_logloss", "Eval logloss, as shardps_scheduler_eval_auc.")
      .Set(status.eval_loss());
  GetGauge("shardps_scheduler_best_eval_auc", "AUC of the best evaluated checkpoint (kept).")
      .Set(status.best_eval_auc());
  GetGauge("shardps_scheduler_best_eval_clock", "Clock of the best evaluated checkpoint.")
      .Set(static_cast<double>(status.best_eval_clock()));
  GetGauge("shardps_scheduler_evaluations", "Checkpoints evaluated so far.")
      .Set(status.evaluations_size());
  ExportReshardMetrics(status);
  GetGauge("shardps_scheduler_early_stopped_at",
           "Clock training was stopped at by early stopping (0: not stopped).")
      .Set(static_cast<double>(status.early_stopped_at()));
  GetGauge("shardps_scheduler_job_generation", "The job generation (changes at each rollback).")
      .Set(static_cast<double>(status.generation()));
  GetGauge("shardps_scheduler_checkpoint_hold_seconds",
           "Last checkpoint: workers held while the servers copied their rows.")
      .Set(status.last_checkpoint_hold_sec());
  GetGauge("shardps_scheduler_checkpoint_write_seconds",
           "Last checkpoint: the files' write behind the running workers.")
      .Set(status.last_checkpoint_write_sec());
  GetGauge("shardps_scheduler_versions",
           "Versions cut between checkpoints for the serving replicas (no files).")
      .Set(static_cast<double>(status.versions()));
  GetGauge("shardps_scheduler_version_hold_seconds",
           "Last version between checkpoints: workers held while the servers copied.")
      .Set(status.last_version_hold_sec());
  ExportRecoveryMetrics(status);
}

}  // namespace shardps
