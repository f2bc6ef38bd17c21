// gradient_check_bench: what the server's gradient check costs
// (server/request_limits.h FirstBeyond: is every pushed value finite and
// within max_gradient_abs?), against the loop it ran before (GCC -O2 left
// that one scalar) and a plain sum of the same values, in the same run.
//
// One W-sized push (2,450 rows, the rows of a 4,096-draw Zipf step) of dim 16
// and 64, all values within the bound, as every push of a healthy job is.
// Rounds alternate the three loops; prints ns a value (median of --reps
// rounds) and the ratio to the old loop.
//
//   bazel run -c opt //bench:gradient_check_bench -- [--reps=15]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/codec.h"
#include "server/request_limits.h"

ABSL_FLAG(int, reps, 15, "Timed rounds (the median is printed).");
ABSL_FLAG(int, rows, 2450, "Rows a push.");

namespace shardps {
namespace {

// The loop FirstBeyond ran before it compared 16 values a round (kept here,
// built as the server's library is, as the baseline).
__attribute__((noipa)) size_t OldFirstBeyond(const float* v, size_t n, uint32_t bound_bits) {
  constexpr size_t kBlock = 64;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = start + kBlock < n ? start + kBlock : n;
    uint32_t bad = 0;
    for (size_t i = start; i < end; ++i) bad |= (FloatBits(v[i]) & 0x7fffffffu) > bound_bits;
    if (bad != 0) {
      for (size_t i = start; i < end; ++i) {
        if ((FloatBits(v[i]) & 0x7fffffffu) > bound_bits) return i;
      }
    }
  }
  return n;
}

__attribute__((noipa)) float Sum(const float* v, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += v[i];
  return s;
}

// ns a value of one call of `fn` on the batch, averaged over 200 calls.
template <typename Fn>
double Time(const std::vector<float>& v, Fn fn) {
  constexpr int kCalls = 200;
  size_t sink = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < kCalls; ++c) sink += fn(v.data(), v.size());
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  if (sink == 1) std::printf(" ");  // Keeps the calls.
  return ns / kCalls / static_cast<double>(v.size());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run() {
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const size_t rows = static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_rows)));
  const uint32_t bound = MagnitudeBits(1e4f);
  std::printf(
      "gradient check of one %zu-row push, all values within the bound; ns a value, "
      "median of %d rounds\n",
      rows, reps);
  std::printf("%-6s %10s %10s %10s %9s\n", "dim", "old loop", "now", "sum", "now/old");
  for (const int dim : {16, 64}) {
    std::vector<float> v(rows * dim);
    std::mt19937 rng(1);
    std::normal_distribution<float> g(0.0f, 0.01f);
    for (float& x : v) x = g(rng);
    if (OldFirstBeyond(v.data(), v.size(), bound) != v.size() ||
        FirstBeyond(v.data(), v.size(), bound) != v.size()) {
      std::fprintf(stderr, "a value is beyond the bound\n");
      return 1;
    }
    std::vector<double> old_ns, now_ns, sum_ns;
    for (int r = 0; r < reps; ++r) {
      old_ns.push_back(
          Time(v, [bound](const float* p, size_t n) { return OldFirstBeyond(p, n, bound); }));
      now_ns.push_back(
          Time(v, [bound](const float* p, size_t n) { return FirstBeyond(p, n, bound); }));
      sum_ns.push_back(
          Time(v, [](const float* p, size_t n) { return static_cast<size_t>(Sum(p, n)); }));
    }
    std::printf("%-6d %10.3f %10.3f %10.3f %9.2f\n", dim, Median(old_ns), Median(now_ns),
                Median(sum_ns), Median(now_ns) / Median(old_ns));
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return shardps::Run();
}
