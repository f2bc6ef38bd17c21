// The trainer's bookkeeping of one Train() (internal to worker/trainer):
// what every finished step adds to the loss log ("step loss" lines, %.17g),
// to the summary, to the worker's Prometheus series (label rank), and to the
// periodic report (a log line, and a MetricsReport to the job clock when
// there is one; reports are best effort).
//
// Not thread-safe: used by the training thread.
#ifndef SHARDPS_WORKER_TRAINER_PROGRESS_H_
#define SHARDPS_WORKER_TRAINER_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/metrics.h"
#include "worker/data/batch.h"
#include "worker/data/eval_metrics.h"
#include "worker/job_clock.h"
#include "worker/model/model.h"
#include "worker/train_summary.h"

namespace shardps {
namespace trainer_internal {

// The worker's Prometheus series (label rank), looked up once per Train.
class StepMetrics {
 public:
  explicit StepMetrics(uint32_t rank);
  // One step of `samples` done; `total`: the phase times so far.
  void Step(uint64_t samples, const StepTimes& total);
  void Report(double samples_per_sec, double loss);

 private:
  const metrics::Labels l_;
  prometheus::Counter& steps_;
  prometheus::Counter& samples_;
  prometheus::Gauge& sps_;
  prometheus::Gauge& loss_;
  std::vector<prometheus::Counter*> phases_;
  double last_[5] = {0, 0, 0, 0, 0};
};

class TrainProgress {
 public:
  // Opens `loss_log` if set (a file that cannot be opened is not logged to).
  // `clock` (may be null) receives the reports; not owned. `samples_before`:
  // samples of this worker's share trained before its start position (the
  // reports count them too).
  TrainProgress(uint32_t rank, JobClock* clock, const std::string& loss_log,
                absl::Duration report_every, uint64_t samples_before = 0);
  TrainProgress(const TrainProgress&) = delete;
  TrainProgress& operator=(const TrainProgress&) = delete;

  // Seconds per phase, summed over steps; the pipelines add to it.
  StepTimes& times() { return times_; }

  // Step `step` trained `batch` with `result`: logs, counts, and reports if
  // report_every passed since the last report (as of clock step + 1).
  void StepDone(uint64_t step, const data::Batch& batch, const StepResult& result);

  // The summary of `steps` steps, timed from construction.
  TrainSummary Summary(uint64_t steps) const;

 private:
  void Report(uint64_t clock);

  struct CloseFile {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  const uint32_t rank_;
  JobClock* const clock_;
  const absl::Duration report_every_;
  const uint64_t samples_before_;
  const std::unique_ptr<FILE, CloseFile> loss_log_;
  StepMetrics metrics_;
  const absl::Time start_;
  StepTimes times_;
  uint64_t samples_ = 0;
  double loss_sum_ = 0;
  std::deque<double> recent_;  // The last 50 losses.
  // Since the last report.
  absl::Time last_report_;
  uint64_t report_steps_ = 0, report_samples_ = 0;
  double report_loss_ = 0;
  data::MetricAccumulator window_;  // Training predictions.
};

}  // namespace trainer_internal
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_PROGRESS_H_
