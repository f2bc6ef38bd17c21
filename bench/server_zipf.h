// Zipf(s) key batches shared by the server benchmarks: ids drawn over
// [0, n) with P(rank r) ~ 1/(r+1)^s, hot ranks scattered over the key space
// by Mix64, deduplicated per batch (as a worker does before pulling).
//
// Draws use rejection-inversion (Hörmann and Derflinger, "Rejection-inversion
// to generate variates from monotone discrete distributions", 1996): exact,
// no table, a few floating-point operations per draw and about 1.1 tries. The
// benchmarks' clients used to binary-search a 1e6-entry CDF (about 200 ns a
// draw, half of a W client's time), which put the client, not the server or
// the transport, on the critical path of every figure.
#ifndef SHARDPS_BENCH_SERVER_ZIPF_H_
#define SHARDPS_BENCH_SERVER_ZIPF_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/partition.h"

namespace shardps {
namespace bench {

// One Zipf(s) draw over ranks [0, n): P(r) = (r+1)^-s / sum_k (k+1)^-s.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s)
      : n_(n), s_(s),
        h_x1_(H(1.5) - 1.0),
        h_n_(H(static_cast<double>(n) + 0.5)),
        squeeze_(2.0 - HInverse(H(2.5) - h(2.0))) {}

  template <typename Rng>
  uint64_t operator()(Rng& rng) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    while (true) {
      // A point under the hat, whose integral is H between 0.5 and n + 0.5
      // (shifted so that rank 1 gets exactly its mass on [0.5, 1.5]).
      const double u = h_n_ + unit(rng) * (h_x1_ - h_n_);
      const double x = HInverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1) k = 1;
      if (k > static_cast<double>(n_)) k = static_cast<double>(n_);
      if (k - x <= squeeze_ || u >= H(k + 0.5) - h(k)) {
        return static_cast<uint64_t>(k) - 1;
      }
    }
  }

 private:
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  // Integral of h from 1 to x: (x^(1-s) - 1) / (1 - s), log(x) at s = 1.
  double H(double x) const {
    const double log_x = std::log(x);
    return ExpM1OverX((1.0 - s_) * log_x) * log_x;
  }
  double HInverse(double y) const {
    double t = y * (1.0 - s_);
    if (t < -1.0) t = -1.0;  // Rounding at the far end of the range.
    return std::exp(Log1POverX(t) * y);
  }
  // (e^x - 1) / x and log(1 + x) / x, continuous at 0.
  static double ExpM1OverX(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x / 2.0;
  }
  static double Log1POverX(double x) {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x / 2.0;
  }

  uint64_t n_;
  double s_;
  double h_x1_;
  double h_n_;
  double squeeze_;
};

class ZipfBatches {
 public:
  ZipfBatches(uint64_t num_ids, double s, uint64_t seed)
      : sampler_(num_ids, s), rng_(seed), batch_of_(num_ids, 0) {}

  // `draws` ids, deduplicated; ranks (row numbers) in *ranks, keys in *keys.
  void Next(int draws, std::vector<uint64_t>* ranks, std::vector<uint64_t>* keys) {
    ++batch_;  // A rank is in this batch once batch_of_[rank] == batch_.
    ranks->clear();
    keys->clear();
    for (int i = 0; i < draws; ++i) {
      const uint64_t r = sampler_(rng_);
      if (batch_of_[r] != batch_) {
        batch_of_[r] = batch_;
        ranks->push_back(r);
        keys->push_back(KeyOf(r));
      }
    }
  }

  static uint64_t KeyOf(uint64_t rank) { return Mix64(rank + 1); }

 private:
  ZipfSampler sampler_;
  std::mt19937_64 rng_;
  std::vector<uint32_t> batch_of_;  // Per rank: the last batch it was drawn in.
  uint32_t batch_ = 0;
};

}  // namespace bench
}  // namespace shardps

#endif  // SHARDPS_BENCH_SERVER_ZIPF_H_
