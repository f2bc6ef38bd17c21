// The serving replica's metrics (common/metrics.h; the process's /metrics),
// listed in replica.h "Metrics". One set a process, registered together on
// first use, so a scrape shows every series once the replica has polled.
//
// Thread-safe.
#ifndef SHARDPS_REPLICA_REPLICA_METRICS_H_
#define SHARDPS_REPLICA_REPLICA_METRICS_H_

#include "common/metrics.h"

namespace shardps {
namespace replica {

struct ReplicaMetrics {
  prometheus::Gauge& version;
  prometheus::Gauge& newest;
  prometheus::Gauge& lag;
  prometheus::Counter& applied;
  prometheus::Counter& incremental;
  prometheus::Counter& in_place;
  prometheus::Counter& rollbacks;
  prometheus::Gauge& rows;
  prometheus::Gauge& bytes;
  prometheus::Counter& bytes_read;
  prometheus::Histogram& build;
  prometheus::Counter& stream_versions;
  prometheus::Counter& stream_bytes;
  prometheus::Counter& resyncs;
  prometheus::Histogram& train_to_serve;
  prometheus::Histogram& push_to_serve;
};

ReplicaMetrics& Metrics();

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_REPLICA_METRICS_H_
