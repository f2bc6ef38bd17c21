#include "worker/data/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "glog/logging.h"

namespace shardps {
namespace data {

double Auc(absl::Span<const float> labels, absl::Span<const float> scores) {
  CHECK_EQ(labels.size(), scores.size());
  const size_t n = labels.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Sum of the (1-based, tie-averaged) ranks of the positives.
  double positive_rank_sum = 0;
  uint64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    uint64_t group_positives = 0;
    while (j < n && scores[order[j]] == scores[order[i]]) {
      group_positives += labels[order[j]] > 0.5f;
      ++j;
    }
    const double average_rank = (static_cast<double>(i + 1) + j) / 2.0;
    positive_rank_sum += average_rank * group_positives;
    positives += group_positives;
    i = j;
  }
  const uint64_t negatives = n - positives;
  if (positives == 0 || negatives == 0) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * negatives);
}

double LogLossOne(float label, double prob) {
  const double p = std::min(std::max(prob, kLogLossEps), 1 - kLogLossEps);
  return label > 0.5f ? -std::log(p) : -std::log1p(-p);
}

double LogLoss(absl::Span<const float> labels, absl::Span<const float> probs) {
  CHECK_EQ(labels.size(), probs.size());
  if (labels.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (size_t i = 0; i < labels.size(); ++i) sum += LogLossOne(labels[i], probs[i]);
  return sum / labels.size();
}

void MetricAccumulator::Add(float label, float prob) {
  labels_.push_back(label);
  probs_.push_back(prob);
  logloss_sum_ += LogLossOne(label, prob);
}

void MetricAccumulator::AddBatch(absl::Span<const float> labels, absl::Span<const float> probs) {
  CHECK_EQ(labels.size(), probs.size());
  for (size_t i = 0; i < labels.size(); ++i) Add(labels[i], probs[i]);
}

void MetricAccumulator::Merge(const MetricAccumulator& other) {
  labels_.insert(labels_.end(), other.labels_.begin(), other.labels_.end());
  probs_.insert(probs_.end(), other.probs_.begin(), other.probs_.end());
  logloss_sum_ += other.logloss_sum_;
}

void MetricAccumulator::Clear() {
  labels_.clear();
  probs_.clear();
  logloss_sum_ = 0;
}

double MetricAccumulator::positive_rate() const {
  if (labels_.empty()) return std::numeric_limits<double>::quiet_NaN();
  size_t positives = 0;
  for (float l : labels_) positives += l > 0.5f;
  return static_cast<double>(positives) / labels_.size();
}

double MetricAccumulator::Auc() const { return data::Auc(labels_, probs_); }

double MetricAccumulator::LogLoss() const {
  if (labels_.empty()) return std::numeric_limits<double>::quiet_NaN();
  return logloss_sum_ / labels_.size();
}

}  // namespace data
}  // namespace shardps
