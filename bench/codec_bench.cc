// codec_bench: what narrowing and widening the wire values cost, beside a
// copy of the same fp32 values (common/codec.h).
//
// One W-sized batch (2,450 rows, the rows of a 4,096-draw Zipf step) of dim 64
// and 16, encoded row by row as the server encodes a pull and as the client
// encodes a push, then decoded whole as the other side does. The baseline,
// in the same run: memcpy of the fp32 rows, and for bf16 the loop the codec
// ran before it narrowed 16 values at a time (one FloatToBf16 a value).
// Prints ns a value (best of --reps) and the ratios.
//
//   bazel run -c opt //bench:codec_bench -- [--reps=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/codec.h"

ABSL_FLAG(int, reps, 7, "Timed repetitions (the best is printed).");
ABSL_FLAG(int, rows, 2450, "Rows a batch.");

namespace shardps {
namespace {

// The reference: one FloatToBf16 a value (inline, as the codec's loop was
// before it narrowed 16 values at a time). FloatToHalf is out of line, so a
// loop here would not be the codec's old one; fp16 is compared with memcpy.
__attribute__((noinline)) void ScalarBf16(const float* v, size_t n, char* dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = FloatToBf16(v[i]);
    std::memcpy(dst + 2 * i, &b, 2);
  }
}

// Best ns a value of `fn` over the batch, `reps` times 50 batches.
template <typename Fn>
double NsPerValue(size_t values, int reps, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < 50; ++k) fn();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s / 50 / values * 1e9);
  }
  return best;
}

void Run(int dim, size_t rows, int reps) {
  const size_t n = rows * dim;
  std::vector<float> values(n), back(n);
  for (size_t i = 0; i < n; ++i) values[i] = 0.01f * static_cast<float>(i % 997) - 4.9f;
  std::string wire(n * 4, '\0');
  std::vector<float> copy(n);
  auto by_rows = [&](auto encode) {
    for (size_t r = 0; r < rows; ++r) encode(values.data() + r * dim, wire.data());
  };
  const double memcpy_ns = NsPerValue(n, reps, [&] {
    by_rows([&](const float* row, char*) {
      std::memcpy(copy.data() + (row - values.data()), row, dim * sizeof(float));
    });
  });
  const double scalar_ns = NsPerValue(n, reps, [&] {
    by_rows(
        [&](const float* row, char* w) { ScalarBf16(row, dim, w + (row - values.data()) * 2); });
  });
  std::printf("dim %d, %zu rows: fp32 memcpy %.3f ns/value; bf16 value by value %.3f\n", dim, rows,
              memcpy_ns, scalar_ns);
  for (Encoding e : {Encoding::kFp32, Encoding::kBf16, Encoding::kFp16}) {
    const size_t width = BytesPerValue(e);
    const double enc = NsPerValue(n, reps, [&] {
      by_rows([&](const float* row, char* w) {
        EncodeValuesTo(row, dim, e, w + (row - values.data()) * width);
      });
    });
    const absl::string_view bytes(wire.data(), n * width);
    const double dec = NsPerValue(n, reps, [&] {
      if (!DecodeValues(bytes, e, n, back.data()).ok()) std::abort();
    });
    const char* name = e == Encoding::kFp32 ? "fp32" : e == Encoding::kBf16 ? "bf16" : "fp16";
    std::printf("  %s: encode %.3f ns/value (%.2fx memcpy", name, enc, enc / memcpy_ns);
    if (e == Encoding::kBf16) std::printf(", %.2fx value by value", enc / scalar_ns);
    std::printf("), decode %.3f ns/value (%.2fx memcpy)\n", dec, dec / memcpy_ns);
  }
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const size_t rows = std::max(1, absl::GetFlag(FLAGS_rows));
  for (int dim : {64, 16}) shardps::Run(dim, rows, reps);
  return 0;
}
