#include "replica/replica_metrics.h"

namespace shardps {
namespace replica {

ReplicaMetrics& Metrics() {
  static ReplicaMetrics* m = new ReplicaMetrics{
      metrics::GetGauge("shardps_replica_version",
                        "Clock of the checkpoint the replica serves (0: none yet)."),
      metrics::GetGauge(
          "shardps_replica_newest_checkpoint",
          "Newest checkpoint clock with a MANIFEST in the directory at the last poll."),
      metrics::GetGauge(
          "shardps_replica_version_lag",
          "Newest checkpoint clock on disk minus the version served (clocks; 0 when current)."),
      metrics::GetCounter("shardps_replica_versions_applied_total",
                          "Versions made current since the start."),
      metrics::GetCounter(
          "shardps_replica_versions_incremental_total",
          "Versions built from the version served plus the deltas after it (the rest are "
          "rebuilt from their whole chain)."),
      metrics::GetCounter(
          "shardps_replica_versions_in_place_total",
          "Incremental versions built in place on the idle model (the rest on a copy of the "
          "served one)."),
      metrics::GetCounter(
          "shardps_replica_rollbacks_total",
          "Moves to an older or rewritten checkpoint after the served one left the disk (a "
          "rollback)."),
      metrics::GetGauge("shardps_replica_version_rows",
                        "Rows (every table) of the version served."),
      metrics::GetGauge(
          "shardps_replica_version_bytes",
          "Bytes of the served checkpoint's own files (a delta's increment, or a full one)."),
      metrics::GetCounter(
          "shardps_replica_bytes_read_total",
          "Checkpoint file bytes read to build versions (the deltas after the version served, or "
          "a whole chain)."),
      metrics::GetHistogram(
          "shardps_replica_build_seconds",
          "Time to build one version (the deltas after the served one, in place or on a copy, or "
          "its whole chain).",
          metrics::LatencyBuckets()),
      metrics::GetCounter("shardps_replica_stream_versions_total",
                          "Versions applied from the servers' delta stream (of versions_applied)."),
      metrics::GetCounter("shardps_replica_stream_bytes_total",
                          "Bytes of the stream's version parts received and applied (wire size)."),
      metrics::GetCounter(
          "shardps_replica_resyncs_total",
          "Loads of a checkpoint to follow the stream from again (a rollback, parts the servers "
          "no longer keep)."),
      metrics::GetHistogram(
          "shardps_replica_train_to_serve_seconds",
          "From the cut's time in the manifest (cut_unix_micros, else created_unix_micros) to "
          "the version being served.",
          metrics::LatencyBuckets()),
      metrics::GetHistogram(
          "shardps_replica_push_to_serve_seconds",
          "Stream versions: from each push's apply on its server to the first version served "
          "that holds it (the server's age of the push at its cut plus the cut's time to the "
          "swap).",
          metrics::LatencyBuckets()),
  };
  return *m;
}

}  // namespace replica
}  // namespace shardps
