// Prometheus metrics for every shardps process: one registry per process and
// an HTTP exposer serving it on /metrics (Debian's prometheus-cpp, which
// embeds CivetWeb).
//
// Usage: call StartExposerFromFlags() once in main() after InitProcess. With
// --metrics_listen (env SHARDPS_METRICS_LISTEN) empty, nothing listens but the
// metrics still count (cheap: atomics), so code can record unconditionally.
//
//   prometheus::Counter& pulls = metrics::GetCounter(
//       "shardps_server_pull_requests_total", "Pull RPCs served.");
//   pulls.Increment();  // hot path: an atomic add, no lookup
//
// Getters look a series up by name and labels under the registry's mutex and
// return a reference valid for the process's lifetime: call them once (at
// setup, or once per table) and keep the reference; never per request.
// The same name asked for twice with the same labels returns the same series.
// A name reused with a different type is a programmer error (CHECK).
//
// Thread-safety: every function here and every returned metric is
// thread-safe.
#ifndef SHARDPS_COMMON_METRICS_H_
#define SHARDPS_COMMON_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

ABSL_DECLARE_FLAG(std::string, metrics_listen);

namespace shardps::metrics {

using Labels = std::map<std::string, std::string>;

// The process-wide registry (created on first use, never destroyed).
prometheus::Registry& Registry();

// Serves Registry() on http://<listen>/metrics. `listen` is "host:port"; port
// 0 picks a free port. Prints "PS_METRICS_LISTENING host:port" on stdout and
// returns that address. INVALID_ARGUMENT for a malformed address,
// UNAVAILABLE if it cannot be bound, FAILED_PRECONDITION if an exposer is
// already running. The exposer lives until the process exits.
absl::StatusOr<std::string> StartExposer(const std::string& listen);

// StartExposer(--metrics_listen) if the flag (or SHARDPS_METRICS_LISTEN) is
// set; OK and no listener otherwise. Logs where it listens.
absl::Status StartExposerFromFlags();

prometheus::Counter& GetCounter(const std::string& name, const std::string& help,
                                const Labels& labels = {});
prometheus::Gauge& GetGauge(const std::string& name, const std::string& help,
                            const Labels& labels = {});
// `buckets`: ascending upper bounds (the +Inf bucket is implicit).
prometheus::Histogram& GetHistogram(const std::string& name, const std::string& help,
                                    const std::vector<double>& buckets, const Labels& labels = {});

// Bucket bounds for RPC latencies in seconds: 50 us .. ~13 s, x2 apart.
const std::vector<double>& LatencyBuckets();
// Bucket bounds for message sizes in bytes: 256 B .. 256 MiB, x4 apart.
const std::vector<double>& ByteBuckets();

// The text exposition of Registry() (what /metrics serves); for tests and
// debugging.
std::string Scrape();

// Calls `fn` every `period` on a thread of its own until destroyed (the
// destructor wakes the thread and joins it; a call in progress finishes).
// For gauges refreshed from a snapshot (table sizes, job state).
class Poller {
 public:
  Poller(absl::Duration period, std::function<void()> fn);
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

 private:
  Mutex mu_;
  CondVar wake_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardps::metrics

#endif  // SHARDPS_COMMON_METRICS_H_
