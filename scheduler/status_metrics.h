// The scheduler's Prometheus series (common/metrics.h), set from a JobStatus
// snapshot each time the status page samples the job (status_page.h):
//
//   shardps_scheduler_worker_clock{rank}, shardps_scheduler_{min,max}_clock,
//   shardps_scheduler_clock_spread (current max - min),
//   shardps_scheduler_max_spread (largest seen),
//   shardps_scheduler_member_state{role,index,state} (1 for the member's
//   state, 0 for the others), shardps_scheduler_job_state{state},
//   shardps_scheduler_samples_per_second, shardps_scheduler_samples,
//   shardps_scheduler_train_loss, the evaluations'
//   (shardps_scheduler_eval_auc, _eval_logloss, _best_eval_auc,
//   _best_eval_clock, _evaluations, _early_stopped_at), the cuts'
//   (_checkpoint_hold_seconds, _checkpoint_write_seconds, _versions,
//   _version_hold_seconds), the job generation, the recoveries
//   (_recoveries{kind}, _last_recovery_seconds{phase}) and the partition
//   map and its moves (_map_version, _map_servers, _reshards,
//   _reshard_partitions_moved, _reshard_rows_moved, _reshard_bytes_moved,
//   _last_reshard_seconds).
//
// The role and state names are the labels' and the status page JSON's.
//
// Thread-safe (the metrics registry locks itself).
#ifndef SHARDPS_SCHEDULER_STATUS_METRICS_H_
#define SHARDPS_SCHEDULER_STATUS_METRICS_H_

#include <string>

#include "proto/scheduler.pb.h"

namespace shardps {

// "server", "worker" ("unknown" otherwise).
std::string MemberRoleLabel(Role role);
// "alive", "dead", "finished" or "not registered".
std::string MemberStateLabel(MemberState state);

// Sets the scheduler's series from `status`.
void ExportJobMetrics(const JobStatusResponse& status);

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_STATUS_METRICS_H_
