// DenseCompressor: top-k compression of a worker's dense gradient with error
// feedback (Stich et al. 2018, "Sparsified SGD with memory"; Lin et al. 2018,
// "Deep Gradient Compression").
//
// Each step:   a = g + residual
//              sent = the k = ceil(ratio * n) elements of a of largest
//                     magnitude (ties: lower index first), the rest 0
//              residual = a - sent   (exactly: the elements not sent)
// so over any number of steps, sum(sent) + residual = sum(g) up to the
// rounding of the fp32 additions: nothing is lost, only delayed. The
// selection depends on the values only, so a run is as deterministic as its
// gradients.
//
// The residual lives in the worker process; a Trainer (one per job
// generation) starts with a zero residual, so a rollback or a restarted
// worker drops the unsent part (docs/design.md says why that is sound).
//
// Not thread-safe: one per Trainer, called from the step loop only.
#ifndef SHARDPS_WORKER_DENSE_COMPRESSION_H_
#define SHARDPS_WORKER_DENSE_COMPRESSION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace shardps {

class DenseCompressor {
 public:
  // `ratio` in (0, 1] (validated by the config); n: the gradient's size.
  DenseCompressor(float ratio, size_t n);

  size_t size() const { return residual_.size(); }
  // Elements sent per step.
  size_t k() const { return k_; }

  // Adds `grad` (size() floats) to the residual and writes the elements to
  // send into out[0, size()) (all others 0); keeps the rest as the residual.
  void Compress(absl::Span<const float> grad, float* out);

  const std::vector<float>& residual() const { return residual_; }

  // The k()-th largest |x| over the finite elements of `a`, or -1 when
  // fewer than k() are finite. Public for the benchmark.
  float KthLargestMagnitude(absl::Span<const float> a);

 private:
  const size_t k_;
  std::vector<float> residual_;
  std::vector<float> magnitude_;  // Scratch for the selection: one bucket.
  std::vector<uint32_t> counts_;  // Scratch: elements per bucket.
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_DENSE_COMPRESSION_H_
