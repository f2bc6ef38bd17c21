// LatencySketch: quantiles of many durations in bounded memory, for the
// replica's push-to-serve (replica.h "Train to serve"). A duration falls in
// a bucket of geometric width 2% (from 1 us to about 71 minutes; shorter
// ones count in the first, longer in the last), so a quantile is within 2%
// of the exact one. Adding is O(1); a quantile walks the buckets.
//
// Thread-compatible: the owner locks.
#ifndef SHARDPS_REPLICA_LATENCY_SKETCH_H_
#define SHARDPS_REPLICA_LATENCY_SKETCH_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "absl/time/time.h"

namespace shardps {
namespace replica {

class LatencySketch {
 public:
  static constexpr double kGrowth = 1.02;
  static constexpr int kBuckets = 1124;  // kGrowth^1124 us: about 71 minutes.

  void Add(absl::Duration d) {
    const double micros = absl::ToDoubleMicroseconds(d);
    int b = micros <= 1 ? 0 : static_cast<int>(std::log(micros) / std::log(kGrowth)) + 1;
    if (b >= kBuckets) b = kBuckets - 1;
    ++counts_[b];
    ++total_;
    if (d > max_) max_ = d;
  }
  uint64_t count() const { return total_; }
  absl::Duration max() const { return max_; }
  // The q-quantile (0 < q <= 1): the upper edge of the bucket holding the
  // ceil(q * count)-th smallest duration, at most max() (max() itself in
  // the last bucket); zero when empty.
  absl::Duration Quantile(double q) const {
    if (total_ == 0) return absl::ZeroDuration();
    const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * total_)));
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) {
        if (b == kBuckets - 1) return max_;  // The last bucket has no edge.
        const absl::Duration edge = absl::Microseconds(std::pow(kGrowth, b));
        return edge < max_ ? edge : max_;
      }
    }
    return max_;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0;
  absl::Duration max_ = absl::ZeroDuration();
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_LATENCY_SKETCH_H_
