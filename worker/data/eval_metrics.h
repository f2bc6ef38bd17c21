// Evaluation metrics: exact AUC and logloss, and a streaming accumulator.
//
// AUC is the Mann-Whitney statistic: the probability that a random positive
// scores above a random negative, ties counting one half (equivalently,
// tied scores get the average of their ranks). It is exact: all scores are
// kept and sorted, O(n log n). With no positives or no negatives AUC is
// undefined and these functions return NaN.
//
// Logloss is the mean binary cross-entropy in nats, with predictions clamped
// to [kLogLossEps, 1 - kLogLossEps] so a confident mistake costs at most
// -log(1e-7) ~ 16.1 instead of infinity. An empty input gives NaN.
//
// A label is positive when > 0.5.
//
// Thread-compatible.
#ifndef SHARDPS_WORKER_DATA_EVAL_METRICS_H_
#define SHARDPS_WORKER_DATA_EVAL_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace shardps {
namespace data {

inline constexpr double kLogLossEps = 1e-7;

// AUC of `scores` (any monotone score: probabilities, logits) against
// `labels`. The spans must have the same size (CHECKed).
double Auc(absl::Span<const float> labels, absl::Span<const float> scores);

// Mean logloss of probabilities `probs` against `labels` (same size).
double LogLoss(absl::Span<const float> labels, absl::Span<const float> probs);

// The logloss of one example given its probability (clamped as above).
double LogLossOne(float label, double prob);

// Collects (label, probability) pairs, e.g. over an evaluation pass, and
// computes AUC and logloss of all of them. Memory: 8 bytes per example.
class MetricAccumulator {
 public:
  void Add(float label, float prob);
  void AddBatch(absl::Span<const float> labels, absl::Span<const float> probs);
  // Appends another accumulator's examples (e.g. another worker's).
  void Merge(const MetricAccumulator& other);
  void Clear();

  size_t count() const { return labels_.size(); }
  double positive_rate() const;  // NaN if empty.
  double Auc() const;            // NaN if one class only.
  double LogLoss() const;        // NaN if empty.

 private:
  std::vector<float> labels_;
  std::vector<float> probs_;
  double logloss_sum_ = 0;
};

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_EVAL_METRICS_H_
