// The scheduler's status page: what the job is doing, for people (a web page)
// and for programs (its JSON) and Prometheus (gauges).
//
// A StatusPage samples the job once per `sample_every` (JobCoordinator::
// JobStatus through a callback), keeps a bounded time series of throughput,
// train loss, eval AUC and clocks (the last `max_points` samples: one hour at
// one per second), refreshes the scheduler's Prometheus series
// (status_metrics.h), and, when `listen` is set, serves over HTTP
// (CivetWeb):
//
//   GET /             a self-contained HTML page (inline JS and SVG, no
//                     external assets) that polls /status.json and draws the
//                     member table and the curves;
//   GET /status.json  {job, state, elapsed_sec, clocks, throughput, loss,
//                     auc, members[], history[], checkpoints[]} (see
//                     StatusJson).
//
// Thread-safe. The callbacks run on the sampler thread; they must not call
// back into the StatusPage.
#ifndef SHARDPS_SCHEDULER_STATUS_PAGE_H_
#define SHARDPS_SCHEDULER_STATUS_PAGE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/scheduler.pb.h"

struct mg_connection;
struct mg_context;

namespace shardps {

// One sample of the job's curves. NaN means "no value yet" (JSON null).
struct StatusPoint {
  double t = 0;  // Seconds since the job started (JobStatusResponse.elapsed_sec).
  double samples_per_sec = 0;
  double train_loss = 0;
  double eval_auc = 0;
  uint64_t min_clock = 0;
  uint64_t max_clock = 0;
};

// The point a status snapshot contributes to the history.
StatusPoint PointOf(const JobStatusResponse& status);

// A bounded FIFO of points: adding to a full history drops the oldest.
// Thread-safe.
class StatusHistory {
 public:
  explicit StatusHistory(size_t capacity) : capacity_(capacity) {}
  void Add(const StatusPoint& point) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<StatusPoint> Points() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<StatusPoint> points_ ABSL_GUARDED_BY(mu_);
};

// The /status.json document (UTF-8, strings escaped, non-finite numbers as
// null).
std::string StatusJson(const JobStatusResponse& status, const std::vector<StatusPoint>& history,
                       const std::vector<std::string>& checkpoints);

// The / page.
const std::string& StatusHtml();

class StatusPage {
 public:
  struct Options {
    // host:port to serve on (port 0 picks a free port and prints
    // "PS_STATUS_LISTENING host:port"); empty = sample and export metrics
    // only, no HTTP.
    std::string listen;
    std::function<JobStatusResponse()> status;  // Required.
    // Checkpoint names, newest last; may be empty.
    std::function<std::vector<std::string>()> checkpoints;
    absl::Duration sample_every = absl::Seconds(1);
    size_t max_points = 3600;
  };

  // Takes the first sample and starts serving. INVALID_ARGUMENT without a
  // status callback or with a malformed address; UNAVAILABLE if the address
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<StatusPage>> Start(Options options);

  // Stops the HTTP server (in-flight requests finish) and the sampler.
  ~StatusPage();
  StatusPage(const StatusPage&) = delete;
  StatusPage& operator=(const StatusPage&) = delete;

  // host:port served ("" without HTTP).
  const std::string& address() const { return address_; }
  // Takes a sample now (the sampler calls it; public for tests).
  void Sample() ABSL_LOCKS_EXCLUDED(mu_);
  // The current /status.json.
  std::string Json() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit StatusPage(Options options);
  static int HandleRequest(mg_connection* conn, void* self);

  // Constant after Start.
  const Options options_;
  std::string address_;
  StatusHistory history_;
  mg_context* server_ = nullptr;
  std::unique_ptr<metrics::Poller> sampler_;

  mutable Mutex mu_;
  JobStatusResponse last_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> checkpoints_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_STATUS_PAGE_H_
