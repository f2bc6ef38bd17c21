// Write and read throughput of checkpoint files (raw record bytes per
// second of wall time; writes include fsync and rename, reads include full
// verification). Arg 0 = uncompressed, 1 = zstd level 1.
//
//   bazel run -c opt //bench:checkpoint_file_bench
//
// Rows look like an Adagrad embedding table of dim 16: 16 fp32 weights, 16
// fp32 accumulators and 8 bytes of metadata (136-byte payload).
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"

namespace shardps {
namespace checkpoint {
namespace {

constexpr uint32_t kPayload = 136;
constexpr int kRows = 100000;

FileHeader Header() {
  FileHeader h;
  h.job_name = "bench";
  h.num_partitions = 64;
  h.tables = {{1, "emb", 1, 16, kPayload, 1}};
  for (uint32_t p = 0; p < 64; ++p) h.partitions.push_back(p);
  return h;
}

struct Rows {
  std::vector<uint64_t> keys;
  std::string payloads;
};

const Rows& TestRows() {
  static const Rows* rows = [] {
    auto* r = new Rows;
    std::mt19937_64 rng(1);
    std::normal_distribution<float> weight(0.f, 0.01f);
    for (int i = 0; i < kRows; ++i) {
      r->keys.push_back(rng());
      float values[32];
      for (float& v : values) v = weight(rng);
      r->payloads.append(reinterpret_cast<const char*>(values), 128);
      r->payloads.append(8, '\0');
    }
    return r;
  }();
  return *rows;
}

std::string BenchPath() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/ckpt_bench.", getpid(), ".shard");
}

void Write(const std::string& path, Compression c) {
  WriterOptions options;
  options.compression = c;
  auto writer = CheckpointFileWriter::Create(path, Header(), options);
  const Rows& rows = TestRows();
  for (int i = 0; i < kRows; ++i) {
    // 64 partitions, rows of one partition contiguous.
    const uint32_t p = static_cast<uint32_t>(i * 64 / kRows);
    absl::Status s =
        (*writer)->Add(p, 1, rows.keys[i],
                       absl::string_view(rows.payloads).substr(size_t{kPayload} * i, kPayload));
    if (!s.ok()) std::abort();
  }
  if (!(*writer)->Finish().ok()) std::abort();
}

void BM_Write(benchmark::State& state) {
  const Compression c = state.range(0) ? Compression::kZstd : Compression::kNone;
  const std::string path = BenchPath();
  for (auto _ : state) Write(path, c);
  state.SetBytesProcessed(state.iterations() * kRows * (8 + kPayload));
  state.counters["file_MB"] = *FileSize(path) / 1e6;
  (void)RemoveAll(path);
}
BENCHMARK(BM_Write)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Read(benchmark::State& state) {
  const Compression c = state.range(0) ? Compression::kZstd : Compression::kNone;
  const std::string path = BenchPath();
  Write(path, c);
  for (auto _ : state) {
    auto reader = CheckpointFileReader::Open(path);
    if (!reader.ok()) std::abort();
    benchmark::DoNotOptimize((*reader)->num_records());
  }
  state.SetBytesProcessed(state.iterations() * kRows * (8 + kPayload));
  (void)RemoveAll(path);
}
BENCHMARK(BM_Read)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// CRC32C of 16 MiB (the check every restore makes twice): Arg 0 = the
// dispatching Crc32c (the CPU's instruction when it has one), 1 = portable.
void BM_Crc32c(benchmark::State& state) {
  std::string data(16 << 20, '\0');
  std::mt19937_64 rng(5);
  for (char& ch : data) ch = static_cast<char>(rng());
  for (auto _ : state) {
    benchmark::DoNotOptimize(state.range(0) ? Crc32cExtendPortable(0, data.data(), data.size())
                                            : Crc32c(data));
  }
  state.SetBytesProcessed(state.iterations() * data.size());
}
BENCHMARK(BM_Crc32c)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace checkpoint
}  // namespace shardps

BENCHMARK_MAIN();
