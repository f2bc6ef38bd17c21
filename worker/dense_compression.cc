#include "worker/dense_compression.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/base/casts.h"

namespace shardps {

namespace {

// ceil(ratio * n), at least 1 and at most n. The float ratio is a decimal
// rounded to 24 bits (0.3f is 0.30000001): a product within that rounding
// above an integer counts as the integer.
size_t TopK(float ratio, size_t n) {
  const double x = static_cast<double>(ratio) * static_cast<double>(n);
  const size_t k = static_cast<size_t>(std::ceil(x * (1.0 - 1.0 / (1 << 23))));
  return std::max<size_t>(1, std::min(n, k));
}

}  // namespace

// A radix select on the magnitudes' bit patterns (for finite x >= 0 the
// order of the uint32 bits is the order of the floats): one pass counts
// the elements per bucket of the top 12 bits (sign, exponent, 3 mantissa
// bits), the bucket holding the k-th largest is found from the top, and
// only that bucket's elements go through nth_element. Gradients spread over
// many octaves, so the bucket is a small part of n; the result is exactly
// nth_element's over the whole array.
float DenseCompressor::KthLargestMagnitude(absl::Span<const float> a) {
  constexpr int kShift = 20;
  constexpr size_t kBuckets = size_t{1} << (32 - kShift);
  counts_.assign(kBuckets, 0);
  size_t finite = 0;
  for (float x : a) {
    if (!std::isfinite(x)) continue;
    ++finite;
    ++counts_[absl::bit_cast<uint32_t>(std::fabs(x)) >> kShift];
  }
  if (finite < k_) return -1.0f;  // Every finite element goes.
  size_t above = 0, bucket = kBuckets;
  while (bucket > 0) {
    --bucket;
    if (above + counts_[bucket] >= k_) break;
    above += counts_[bucket];
  }
  magnitude_.clear();
  for (float x : a) {
    if (!std::isfinite(x)) continue;
    const float m = std::fabs(x);
    if (absl::bit_cast<uint32_t>(m) >> kShift == bucket) magnitude_.push_back(m);
  }
  const size_t rank = k_ - above - 1;  // 0-based, largest first, in the bucket.
  std::nth_element(magnitude_.begin(), magnitude_.begin() + rank, magnitude_.end(),
                   std::greater<float>());
  return magnitude_[rank];
}

DenseCompressor::DenseCompressor(float ratio, size_t n) : k_(TopK(ratio, n)), residual_(n, 0.0f) {}

void DenseCompressor::Compress(absl::Span<const float> grad, float* out) {
  const size_t n = residual_.size();
  for (size_t i = 0; i < n; ++i) out[i] = grad[i] + residual_[i];
  // The k-th largest magnitude of the finite elements: every element above
  // it is sent, and of those equal to it the first (k - above) in index
  // order. A non-finite element is always sent (and never kept), so that
  // the servers' table.non_finite policy sees it.
  const float threshold = k_ >= n ? -1.0f : KthLargestMagnitude(absl::MakeConstSpan(out, n));
  if (threshold < 0) {  // Everything goes: nothing is left behind.
    std::fill(residual_.begin(), residual_.end(), 0.0f);
    return;
  }
  // Compared as bit patterns without the sign: for finite magnitudes that
  // is their order, and Inf and NaN compare above every finite threshold.
  constexpr uint32_t kAbs = 0x7fffffffu;
  const uint32_t t = absl::bit_cast<uint32_t>(threshold);
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += (absl::bit_cast<uint32_t>(out[i]) & kAbs) > t;
  size_t equal_left = k_ - above;
  float* residual = residual_.data();
  for (size_t i = 0; i < n; ++i) {
    const float x = out[i];
    const uint32_t m = absl::bit_cast<uint32_t>(x) & kAbs;
    bool send = m > t;
    if (m == t && equal_left > 0) {  // Rare: ties at the threshold.
      --equal_left;
      send = true;
    }
    residual[i] = send ? 0.0f : x;
    out[i] = send ? x : 0.0f;
  }
}

}  // namespace shardps
