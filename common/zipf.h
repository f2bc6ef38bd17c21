// Zipf(s) draws on ranks 1..n by rejection-inversion (Hörmann and Derflinger,
// "Rejection-inversion to generate variates from monotone discrete
// distributions", 1996): exact, no table, a few floating-point operations per
// draw and about 1.1 tries. P(k) = k^-s / sum_j j^-s. Used by the synthetic
// data generator (worker/data/synthetic.cc) and the server benchmarks
// (bench/server_zipf.h).
//
// Thread-safety: Sample is const; the uniform source is the caller's.
#ifndef SHARDPS_COMMON_ZIPF_H_
#define SHARDPS_COMMON_ZIPF_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace shardps {

class ZipfSampler {
 public:
  ZipfSampler() = default;  // n = 1: always 1.
  ZipfSampler(uint64_t n, double s) : n_(n), s_(s) {
    h_x1_ = HIntegral(1.5) - 1;
    h_n_ = HIntegral(static_cast<double>(n) + 0.5);
    squeeze_ = 2 - HIntegralInverse(HIntegral(2.5) - H(2));
  }

  // A rank in [1, n]; `uniform()` returns doubles in [0, 1).
  template <typename Uniform>
  uint64_t Sample(Uniform&& uniform) const {
    while (true) {
      // A point under the hat, whose integral runs from n + 0.5 down to 0.5
      // (shifted so that rank 1 gets exactly its mass on [0.5, 1.5]).
      const double u = h_n_ + uniform() * (h_x1_ - h_n_);
      const double x = HIntegralInverse(u);
      uint64_t k = x < 1 ? 1 : static_cast<uint64_t>(x + 0.5);
      if (k > n_) k = n_;
      const double kd = static_cast<double>(k);
      if (kd - x <= squeeze_ || u >= HIntegral(kd + 0.5) - H(kd)) return k;
    }
  }

 private:
  static double Log1pOverX(double x) { return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1 - x / 2; }
  static double Expm1OverX(double x) { return std::fabs(x) > 1e-8 ? std::expm1(x) / x : 1 + x / 2; }
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  // Integral of H from 1 to x: (x^(1-s) - 1) / (1 - s), log(x) at s = 1.
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Expm1OverX((1 - s_) * log_x) * log_x;
  }
  double HIntegralInverse(double y) const {
    double t = y * (1 - s_);
    if (t < -1) t = -1;  // Rounding at the far end of the range.
    return std::exp(Log1pOverX(t) * y);
  }

  uint64_t n_ = 1;
  double s_ = 1;
  double h_x1_ = 0, h_n_ = 0, squeeze_ = 0;
};

// The exact probabilities of ranks 1..n (at index rank - 1), in O(n): what
// tests and checks compare draws with.
inline std::vector<double> ZipfProbabilities(uint64_t n, double s) {
  std::vector<double> p(n);
  double sum = 0;
  for (uint64_t r = 0; r < n; ++r) sum += p[r] = std::pow(double(r + 1), -s);
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_ZIPF_H_
