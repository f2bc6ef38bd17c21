#include "bench/server_zipf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/zipf.h"
#include "gtest/gtest.h"

namespace shardps {
namespace bench {
namespace {

// Workload W: 4096 draws over 1e6 ids give about 2450 unique ids; the
// average over batches must match the exact expectation sum_r 1 - (1-p_r)^4096.
TEST(ZipfBatchesTest, UniqueIdsPerBatchMatchExpectation) {
  constexpr uint64_t kIds = 1000000;
  constexpr int kDraws = 4096;
  const std::vector<double> p = ZipfProbabilities(kIds, 1.0);
  double expected = 0;
  for (double x : p) expected += 1 - std::pow(1 - x, kDraws);
  ZipfBatches batches(kIds, 1.0, 3);
  std::vector<uint64_t> ranks, keys;
  double total = 0;
  constexpr int kBatches = 40;
  for (int b = 0; b < kBatches; ++b) {
    batches.Next(kDraws, &ranks, &keys);
    ASSERT_EQ(ranks.size(), keys.size());
    std::vector<uint64_t> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
        << "duplicate rank in batch " << b;
    for (size_t i = 0; i < ranks.size(); ++i) {
      ASSERT_LT(ranks[i], kIds);
      ASSERT_EQ(keys[i], ZipfBatches::KeyOf(ranks[i]));
    }
    total += ranks.size();
  }
  EXPECT_NEAR(total / kBatches, expected, 0.01 * expected);
  EXPECT_NEAR(expected, 2450, 60);  // W as docs/benchmarks.md describes it.
}

}  // namespace
}  // namespace bench
}  // namespace shardps
