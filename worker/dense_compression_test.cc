#include "worker/dense_compression.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

std::vector<float> Gaussian(std::mt19937* rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(*rng);
  return v;
}

size_t NonZeros(const std::vector<float>& v) {
  size_t c = 0;
  for (float x : v) c += x != 0.0f;
  return c;
}

// Over N steps, what was sent plus what is still held equals the sum of the
// full gradients (within the rounding of fp32 sums): nothing is lost.
TEST(DenseCompressorTest, ErrorFeedbackLosesNothing) {
  constexpr size_t kN = 5000;
  DenseCompressor c(0.01f, kN);
  EXPECT_EQ(c.k(), 50u);
  std::mt19937 rng(7);
  std::vector<double> sum_grads(kN, 0.0), sum_sent(kN, 0.0);
  std::vector<float> out(kN);
  for (int step = 0; step < 200; ++step) {
    // Gradients of varying scale, some elements always small: they are sent
    // only once their residual has grown.
    const std::vector<float> g = Gaussian(&rng, kN, step % 3 == 0 ? 1.0f : 0.1f);
    c.Compress(g, out.data());
    EXPECT_EQ(NonZeros(out), c.k()) << step;
    for (size_t i = 0; i < kN; ++i) {
      sum_grads[i] += g[i];
      sum_sent[i] += out[i];
    }
  }
  double worst = 0, max_residual = 0;
  for (size_t i = 0; i < kN; ++i) {
    worst = std::max(worst, std::fabs(sum_sent[i] + c.residual()[i] - sum_grads[i]));
    max_residual = std::max(max_residual, std::fabs(double{c.residual()[i]}));
  }
  EXPECT_LT(worst, 1e-4) << "sent + residual != sum of gradients";
  EXPECT_GT(max_residual, 0.1) << "a residual is held (the test would pass with none)";
}

// The elements sent are the k largest magnitudes of gradient + residual,
// with their signs; the others are held back exactly.
TEST(DenseCompressorTest, SendsTheLargestMagnitudesWithTheirSigns) {
  DenseCompressor c(0.3f, 10);  // k = 3.
  ASSERT_EQ(c.k(), 3u);
  const std::vector<float> g = {0.5f, -4.0f, 0.25f, 3.0f, -0.1f, 0.0f, -2.0f, 1.0f, 0.2f, 0.3f};
  std::vector<float> out(10);
  c.Compress(g, out.data());
  EXPECT_EQ(out, (std::vector<float>{0, -4.0f, 0, 3.0f, 0, 0, -2.0f, 0, 0, 0}));
  EXPECT_EQ(c.residual(), (std::vector<float>{0.5f, 0, 0.25f, 0, -0.1f, 0, 0, 1.0f, 0.2f, 0.3f}));
  // Next step: the held 1.0 plus a new 1.5 beats a fresh 2.0.
  std::vector<float> g2(10, 0.0f);
  g2[7] = 1.5f;
  g2[0] = -2.0f;
  g2[9] = 0.1f;
  c.Compress(g2, out.data());
  EXPECT_EQ(out, (std::vector<float>{-1.5f, 0, 0, 0, 0, 0, 0, 2.5f, 0, 0.4f}));
  EXPECT_EQ(c.residual(), (std::vector<float>{0, 0, 0.25f, 0, -0.1f, 0, 0, 0, 0.2f, 0}));
}

TEST(DenseCompressorTest, TiesGoToTheLowerIndexAndRunsRepeat) {
  DenseCompressor a(0.5f, 6), b(0.5f, 6);  // k = 3.
  const std::vector<float> g = {1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 0.5f};
  std::vector<float> out_a(6), out_b(6);
  for (int step = 0; step < 5; ++step) {
    a.Compress(g, out_a.data());
    b.Compress(g, out_b.data());
    EXPECT_EQ(out_a, out_b);
    EXPECT_EQ(a.residual(), b.residual());
  }
  DenseCompressor c(0.5f, 6);
  c.Compress(g, out_a.data());
  EXPECT_EQ(out_a, (std::vector<float>{1.0f, -1.0f, 1.0f, 0, 0, 0}));
}

TEST(DenseCompressorTest, RatioOneSendsEverythingAndHoldsNothing) {
  DenseCompressor c(1.0f, 4);
  const std::vector<float> g = {1, -2, 0, 3};
  std::vector<float> out(4);
  c.Compress(g, out.data());
  EXPECT_EQ(out, g);
  EXPECT_EQ(c.residual(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(DenseCompressor(1e-9f, 4).k(), 1u) << "at least one element goes";
}

// A non-finite element is sent, never held, so the servers' non_finite
// policy decides (REJECT or SKIP_AND_COUNT) as for a full push.
TEST(DenseCompressorTest, NonFiniteElementsAreAlwaysSent) {
  DenseCompressor c(0.25f, 8);  // k = 2.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> g = {0.1f, nan, 5.0f, -inf, 0.2f, 4.0f, 0.3f, 0.4f};
  std::vector<float> out(8);
  c.Compress(g, out.data());
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[3], -inf);
  EXPECT_EQ(out[2], 5.0f);
  EXPECT_EQ(out[5], 4.0f);
  EXPECT_EQ(NonZeros(out), 4u);
  for (float r : c.residual()) EXPECT_TRUE(std::isfinite(r));
}

// The radix select picks the threshold nth_element over every magnitude
// picks: values across all octaves, many ties, zeros of both signs,
// subnormals and non-finite elements, k from 1 to n.
TEST(DenseCompressorTest, RadixSelectMatchesNthElement) {
  std::mt19937 rng(3);
  const float specials[] = {0.0f,
                            -0.0f,
                            1e-40f,
                            -1e-45f,
                            1.0f,
                            -1.0f,
                            3.4e38f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + rng() % 2000;
    std::vector<float> a(n);
    for (float& x : a) {
      const uint32_t pick = rng() % 10;
      if (pick < 3) {
        x = specials[rng() % 9];
      } else if (pick < 5) {
        x = static_cast<float>(static_cast<int>(rng() % 5) - 2);  // Ties.
      } else {
        x = std::ldexp(static_cast<float>(rng() % 1000) - 500.0f,
                       static_cast<int>(rng() % 80) - 60);
      }
    }
    const float ratio = static_cast<float>(1 + rng() % 1000) / 1000.0f;
    DenseCompressor c(ratio, n);
    std::vector<float> m(n);
    for (size_t i = 0; i < n; ++i) m[i] = std::isfinite(a[i]) ? std::fabs(a[i]) : -1.0f;
    std::nth_element(m.begin(), m.begin() + (c.k() - 1), m.end(), std::greater<float>());
    const float want = m[c.k() - 1];
    EXPECT_EQ(c.KthLargestMagnitude(a), want) << "trial " << trial << " n " << n << " k " << c.k();
  }
}

}  // namespace
}  // namespace shardps
