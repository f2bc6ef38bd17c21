#include "worker/data/eval_metrics.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace data {
namespace {

TEST(AucTest, HandComputedCases) {
  // 3 of the 4 (positive, negative) pairs are ordered right.
  EXPECT_DOUBLE_EQ(Auc({0, 0, 1, 1}, {0.1f, 0.4f, 0.35f, 0.8f}), 0.75);
  EXPECT_DOUBLE_EQ(Auc({0, 1}, {0.2f, 0.9f}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({1, 0}, {0.2f, 0.9f}), 0.0);
}

TEST(AucTest, TiesCountOneHalf) {
  EXPECT_DOUBLE_EQ(Auc({0, 1, 0, 1}, {0.5f, 0.5f, 0.5f, 0.5f}), 0.5);
  // Positives 0.9, 0.4, 0.1; negatives 0.9, 0.4. Pairs won:
  // 0.9: 0.5 + 1; 0.4: 0 + 0.5; 0.1: 0 + 0 -> 2 of 6.
  EXPECT_DOUBLE_EQ(Auc({1, 0, 1, 0, 1}, {0.9f, 0.9f, 0.4f, 0.4f, 0.1f}), 2.0 / 6);
  // One tie among otherwise right pairs: (1 + 1 + 1 + 0.5) / 4.
  EXPECT_DOUBLE_EQ(Auc({0, 0, 1, 1}, {0.1f, 0.5f, 0.5f, 0.9f}), 3.5 / 4);
}

TEST(AucTest, OneClassIsNaN) {
  EXPECT_TRUE(std::isnan(Auc({1, 1, 1}, {0.1f, 0.2f, 0.3f})));
  EXPECT_TRUE(std::isnan(Auc({0, 0}, {0.1f, 0.2f})));
  EXPECT_TRUE(std::isnan(Auc({}, {})));
}

TEST(AucTest, MatchesPairCountingOnRandomDataWithTies) {
  std::mt19937 rng(5);
  std::vector<float> labels, scores;
  for (int i = 0; i < 500; ++i) {
    labels.push_back(rng() % 3 == 0);
    scores.push_back(static_cast<float>(rng() % 20) / 20);  // Many ties.
  }
  double won = 0;
  double pairs = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = 0; j < labels.size(); ++j) {
      if (labels[i] == 1 && labels[j] == 0) {
        pairs += 1;
        won += scores[i] > scores[j] ? 1 : scores[i] == scores[j] ? 0.5 : 0;
      }
    }
  }
  EXPECT_NEAR(Auc(labels, scores), won / pairs, 1e-12);
}

TEST(LogLossTest, ValuesAndClamping) {
  EXPECT_NEAR(LogLoss({1, 0}, {0.8f, 0.3f}), (-std::log(0.8) - std::log(0.7)) / 2, 1e-7);
  EXPECT_NEAR(LogLossOne(1, 0.0), -std::log(1e-7), 1e-9);
  EXPECT_NEAR(LogLossOne(0, 1.0), -std::log(1e-7), 1e-6);
  EXPECT_NEAR(LogLossOne(1, 1.0), 1e-7, 1e-12);
  EXPECT_NEAR(LogLossOne(0, 0.5), std::log(2.0), 1e-12);
  EXPECT_TRUE(std::isnan(LogLoss({}, {})));
}

TEST(MetricAccumulatorTest, StreamsAndMerges) {
  MetricAccumulator a, b;
  a.AddBatch({0, 0}, {0.1f, 0.4f});
  b.Add(1, 0.35f);
  b.Add(1, 0.8f);
  EXPECT_TRUE(std::isnan(a.Auc()));
  a.Merge(b);
  EXPECT_EQ(a.count(), 4u);
  EXPECT_DOUBLE_EQ(a.Auc(), 0.75);
  EXPECT_NEAR(a.LogLoss(), LogLoss({0, 0, 1, 1}, {0.1f, 0.4f, 0.35f, 0.8f}), 1e-12);
  EXPECT_DOUBLE_EQ(a.positive_rate(), 0.5);
  a.Clear();
  EXPECT_EQ(a.count(), 0u);
  EXPECT_TRUE(std::isnan(a.LogLoss()));
}

}  // namespace
}  // namespace data
}  // namespace shardps
