#include "worker/trainer_progress.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/time/clock.h"
#include "glog/logging.h"

namespace shardps {
namespace trainer_internal {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

}  // namespace

StepMetrics::StepMetrics(uint32_t rank)
    : l_{{"rank", std::to_string(rank)}},
      steps_(metrics::GetCounter("shardps_worker_steps_total", "Training steps done.", l_)),
      samples_(metrics::GetCounter("shardps_worker_samples_total", "Examples trained.", l_)),
      sps_(metrics::GetGauge("shardps_worker_samples_per_second",
                             "Examples/s over the last report period.", l_)),
      loss_(metrics::GetGauge("shardps_worker_train_loss",
                              "Mean training logloss over the last report period.", l_)) {
  for (const char* phase : {"data", "wait", "pull", "compute", "push"}) {
    phases_.push_back(&metrics::GetCounter(
        "shardps_worker_step_seconds_total",
        "Seconds spent per step phase (data, wait for clock, pull, compute, push).",
        {{"rank", l_.at("rank")}, {"phase", phase}}));
  }
}

void StepMetrics::Step(uint64_t samples, const StepTimes& total) {
  steps_.Increment();
  samples_.Increment(static_cast<double>(samples));
  const double now[] = {total.data, total.wait, total.pull, total.compute, total.push};
  for (size_t i = 0; i < phases_.size(); ++i) phases_[i]->Increment(now[i] - last_[i]);
  std::copy(std::begin(now), std::end(now), last_);
}

void StepMetrics::Report(double samples_per_sec, double loss) {
  sps_.Set(samples_per_sec);
  loss_.Set(loss);
}

TrainProgress::TrainProgress(uint32_t rank, JobClock* clock, const std::string& loss_log,
                             absl::Duration report_every, uint64_t samples_before)
    : rank_(rank),
      clock_(clock),
      report_every_(report_every),
      samples_before_(samples_before),
      loss_log_(loss_log.empty() ? nullptr : std::fopen(loss_log.c_str(), "w")),
      metrics_(rank),
      start_(absl::Now()),
      last_report_(start_) {}

void TrainProgress::StepDone(uint64_t step, const data::Batch& batch, const StepResult& r) {
  if (loss_log_) {
    std::fprintf(loss_log_.get(), "%llu %.17g\n", static_cast<unsigned long long>(step), r.loss);
  }
  samples_ += batch.size;
  loss_sum_ += r.loss;
  recent_.push_back(r.loss);
  if (recent_.size() > 50) recent_.pop_front();
  report_loss_ += r.loss;
  window_.AddBatch(batch.labels, r.probs);
  report_steps_++;
  report_samples_ += batch.size;
  metrics_.Step(batch.size, times_);
  if (absl::Now() - last_report_ >= report_every_) Report(step + 1);
}

void TrainProgress::Report(uint64_t clock) {
  const double secs = Seconds(last_report_);
  metrics_.Report(report_samples_ / secs, report_loss_ / report_steps_);
  LOG(INFO) << "worker " << rank_ << " step " << clock << " loss " << report_loss_ / report_steps_
            << " " << report_samples_ / secs << " samples/s (data " << times_.data << "s wait "
            << times_.wait << "s pull " << times_.pull << "s compute " << times_.compute
            << "s push " << times_.push << "s)";
  if (clock_ != nullptr) {
    MetricsReport r;
    r.set_rank(rank_);
    r.set_step(clock);
    r.set_samples(samples_before_ + samples_);
    r.set_samples_per_sec(report_samples_ / secs);
    r.set_train_loss(report_loss_ / report_steps_);
    const double auc = window_.Auc();
    r.set_train_auc(std::isnan(auc) ? 0 : auc);
    r.set_data_sec(times_.data);
    r.set_wait_sec(times_.wait);
    r.set_pull_sec(times_.pull);
    r.set_compute_sec(times_.compute);
    r.set_push_sec(times_.push);
    (void)clock_->ReportMetrics(r);
  }
  last_report_ = absl::Now();
  report_steps_ = report_samples_ = 0;
  report_loss_ = 0;
  window_.Clear();
}

TrainSummary TrainProgress::Summary(uint64_t steps) const {
  TrainSummary s;
  s.steps = steps;
  s.samples = samples_;
  s.job_samples = samples_before_ + samples_;
  s.times = times_;
  s.seconds = Seconds(start_);
  s.samples_per_sec = s.seconds > 0 ? s.samples / s.seconds : 0;
  s.mean_loss = s.steps ? loss_sum_ / s.steps : 0;
  for (double l : recent_) s.last_loss += l / recent_.size();
  return s;
}

}  // namespace trainer_internal
}  // namespace shardps
