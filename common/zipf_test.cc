// ZipfSampler against the exact Zipf probabilities.
#include "common/zipf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// Draw counts per bucket against the exact probabilities: each of the first
// 20 ranks alone, then ranks grouped in doubling ranges. Every bucket's count
// must be within 5 standard deviations of its binomial mean.
void ExpectMatchesPmf(uint64_t n, double s) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " s=" << s);
  ZipfSampler sampler(n, s);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  constexpr int kDraws = 2000000;
  std::vector<uint64_t> count(n, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t r = sampler.Sample([&] { return unit(rng); }) - 1;
    ASSERT_LT(r, n);
    ++count[r];
  }
  const std::vector<double> p = ZipfProbabilities(n, s);
  uint64_t lo = 0;
  while (lo < n) {
    const uint64_t hi = lo < 20 ? lo + 1 : std::min<uint64_t>(n, lo * 2);
    double prob = 0;
    uint64_t seen = 0;
    for (uint64_t r = lo; r < hi; ++r) {
      prob += p[r];
      seen += count[r];
    }
    const double mean = kDraws * prob;
    const double sd = std::sqrt(kDraws * prob * (1 - prob));
    EXPECT_NEAR(double(seen), mean, 5 * sd + 1) << "ranks [" << lo << ", " << hi << ")";
    lo = hi;
  }
}

TEST(ZipfSamplerTest, MatchesExactProbabilities) {
  ExpectMatchesPmf(1000, 1.0);
  ExpectMatchesPmf(100000, 1.0);
  ExpectMatchesPmf(1000, 0.8);
  ExpectMatchesPmf(1000, 1.5);
}

TEST(ZipfSamplerTest, SingleRank) {
  ZipfSampler sampler(1, 1.0);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(sampler.Sample([&] { return unit(rng); }), 1u);
  EXPECT_EQ(ZipfSampler().Sample([] { return 0.5; }), 1u);
}

}  // namespace
}  // namespace shardps
