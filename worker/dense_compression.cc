#include "worker/dense_compression.h"

#include <algorithm>
#include <cmath>
#include <functional>

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

DenseCompressor::DenseCompressor(float ratio, size_t n) : k_(TopK(ratio, n)), residual_(n, 0.0f) {}

void DenseCompressor::Compress(absl::Span<const float> grad, float* out) {
  const size_t n = residual_.size();
  for (size_t i = 0; i < n; ++i) out[i] = grad[i] + residual_[i];
  if (k_ >= n) {  // Everything goes: nothing is left behind.
    std::fill(residual_.begin(), residual_.end(), 0.0f);
    return;
  }
  // The k-th largest magnitude of the finite elements: every element above
  // it is sent, and of those equal to it the first (k - above) in index
  // order. A non-finite element is always sent (and never kept), so that
  // the servers' table.non_finite policy sees it.
  magnitude_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    magnitude_[i] = std::isfinite(out[i]) ? std::fabs(out[i]) : -1.0f;
  }
  std::nth_element(magnitude_.begin(), magnitude_.begin() + (k_ - 1), magnitude_.end(),
                   std::greater<float>());
  const float threshold = magnitude_[k_ - 1];
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += std::isfinite(out[i]) && std::fabs(out[i]) > threshold;
  size_t equal_left = k_ - above;
  for (size_t i = 0; i < n; ++i) {
    bool send = !std::isfinite(out[i]);
    if (!send) {
      const float m = std::fabs(out[i]);
      send = m > threshold;
      if (!send && m == threshold && equal_left > 0) {
        --equal_left;
        send = true;
      }
    }
    if (send) {
      residual_[i] = 0.0f;
    } else {
      residual_[i] = out[i];
      out[i] = 0.0f;
    }
  }
}

}  // namespace shardps
