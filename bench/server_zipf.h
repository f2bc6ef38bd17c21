// Zipf(s) key batches shared by the server benchmarks: ids drawn over
// [0, n) with P(rank r) ~ 1/(r+1)^s, hot ranks scattered over the key space
// by Mix64, deduplicated per batch (as a worker does before pulling).
#ifndef SHARDPS_BENCH_SERVER_ZIPF_H_
#define SHARDPS_BENCH_SERVER_ZIPF_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/partition.h"

namespace shardps {
namespace bench {

class ZipfBatches {
 public:
  ZipfBatches(uint64_t num_ids, double s, uint64_t seed)
      : cdf_(num_ids), rng_(seed) {
    double sum = 0;
    for (uint64_t r = 0; r < num_ids; ++r) {
      sum += 1.0 / std::pow(double(r + 1), s);
      cdf_[r] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }

  // `draws` ids, deduplicated; ranks (row numbers) in *ranks, keys in *keys.
  void Next(int draws, std::vector<uint64_t>* ranks, std::vector<uint64_t>* keys) {
    std::uniform_real_distribution<double> u(0, 1);
    seen_.clear();
    ranks->clear();
    keys->clear();
    for (int i = 0; i < draws; ++i) {
      const uint64_t r =
          std::lower_bound(cdf_.begin(), cdf_.end(), u(rng_)) - cdf_.begin();
      if (seen_.insert(r).second) {
        ranks->push_back(std::min<uint64_t>(r, cdf_.size() - 1));
        keys->push_back(KeyOf(ranks->back()));
      }
    }
  }

  static uint64_t KeyOf(uint64_t rank) { return Mix64(rank + 1); }

 private:
  std::vector<double> cdf_;
  std::mt19937_64 rng_;
  absl::flat_hash_set<uint64_t> seen_;
};

}  // namespace bench
}  // namespace shardps

#endif  // SHARDPS_BENCH_SERVER_ZIPF_H_
