// DenseCompressor::Compress at the size of a large dense tower: the radix
// select it uses against std::nth_element over every magnitude (what it
// replaced), on the same gradients, in one run. Prints ms per step and the
// ratio; checks both pick the same threshold.
//
//   bazel run -c opt //bench:dense_compression_bench -- [--n=1450000] [--steps=30]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "worker/dense_compression.h"

ABSL_FLAG(size_t, n, 1450000, "Dense weights (a [1024, 1024] top MLP has about 1.45M).");
ABSL_FLAG(int, steps, 30, "Steps timed per variant and ratio.");

namespace {

float NthElementThreshold(const std::vector<float>& a, size_t k, std::vector<float>* scratch) {
  scratch->resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    (*scratch)[i] = std::isfinite(a[i]) ? std::fabs(a[i]) : -1.0f;
  }
  std::nth_element(scratch->begin(), scratch->begin() + (k - 1), scratch->end(),
                   std::greater<float>());
  return (*scratch)[k - 1];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const size_t n = absl::GetFlag(FLAGS_n);
  const int steps = absl::GetFlag(FLAGS_steps);
  // Gradients of an MLP: most elements tiny, per-layer scales over a few
  // octaves, a residual that grows where elements are not sent.
  std::mt19937 rng(11);
  std::vector<std::vector<float>> grads(4, std::vector<float>(n));
  for (auto& g : grads) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) g[i] = d(rng) * std::ldexp(1e-3f, -static_cast<int>(i % 7));
  }
  std::printf("n = %zu, %d steps per figure\n", n, steps);
  std::printf("%-6s %14s %14s %8s\n", "ratio", "nth_element ms", "radix ms", "speedup");
  for (const float ratio : {0.1f, 0.01f}) {
    shardps::DenseCompressor c(ratio, n);
    std::vector<float> out(n), scratch;
    double nth_ms = 0, radix_ms = 0;
    for (int s = 0; s < steps; ++s) {
      c.Compress(grads[s % grads.size()], out.data());  // Evolves the residual.
      for (size_t i = 0; i < n; ++i) out[i] = grads[s % grads.size()][i] + c.residual()[i];
      auto t0 = std::chrono::steady_clock::now();
      const float a = NthElementThreshold(out, c.k(), &scratch);
      auto t1 = std::chrono::steady_clock::now();
      const float b = c.KthLargestMagnitude(out);
      auto t2 = std::chrono::steady_clock::now();
      if (a != b) {
        std::fprintf(stderr, "thresholds differ at step %d: %g vs %g\n", s, a, b);
        return 1;
      }
      nth_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
      radix_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
    }
    // The whole Compress (add, select, split) with the radix select.
    auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) c.Compress(grads[s % grads.size()], out.data());
    const double compress_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-6.2f %14.2f %14.2f %7.1fx   (whole Compress %.2f ms)\n", ratio, nth_ms / steps,
                radix_ms / steps, nth_ms / radix_ms, compress_ms / steps);
  }
  return 0;
}
