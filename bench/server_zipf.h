// Zipf(s) key batches shared by the server benchmarks: ids drawn over
// [0, n) with P(rank r) ~ 1/(r+1)^s, hot ranks scattered over the key space
// by Mix64, deduplicated per batch (as a worker does before pulling).
//
// Draws use common/zipf.h (rejection-inversion: exact, no table). The
// benchmarks' clients used to binary-search a 1e6-entry CDF (about 200 ns a
// draw, half of a W client's time), which put the client, not the server or
// the transport, on the critical path of every figure.
#ifndef SHARDPS_BENCH_SERVER_ZIPF_H_
#define SHARDPS_BENCH_SERVER_ZIPF_H_

#include <cstdint>
#include <random>
#include <vector>

#include "common/partition.h"
#include "common/zipf.h"

namespace shardps {
namespace bench {

class ZipfBatches {
 public:
  ZipfBatches(uint64_t num_ids, double s, uint64_t seed)
      : sampler_(num_ids, s), rng_(seed), batch_of_(num_ids, 0) {}

  // One rank in [0, num_ids).
  uint64_t Draw() {
    return sampler_.Sample([this] { return unit_(rng_); }) - 1;
  }

  // `draws` ids, deduplicated; ranks (row numbers) in *ranks, keys in *keys.
  void Next(int draws, std::vector<uint64_t>* ranks, std::vector<uint64_t>* keys) {
    ++batch_;  // A rank is in this batch once batch_of_[rank] == batch_.
    ranks->clear();
    keys->clear();
    for (int i = 0; i < draws; ++i) {
      const uint64_t r = Draw();
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
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  std::vector<uint32_t> batch_of_;  // Per rank: the last batch it was drawn in.
  uint32_t batch_ = 0;
};

}  // namespace bench
}  // namespace shardps

#endif  // SHARDPS_BENCH_SERVER_ZIPF_H_
