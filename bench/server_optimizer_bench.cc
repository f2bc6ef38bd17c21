// In-process optimizer step rate of the server's tables against the same
// update on a plain array indexed by row number (no hashing, no locks), and
// the memory per live row. Prints figures and ratios; never fails on time.
//
//   bazel run //bench:server_optimizer_bench -- [--rows=1000000] [--steps=2000]
//       [--memory_rows=10000000] [--min_count=1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/server_zipf.h"
#include "server/helper_pool.h"
#include "server/optimizer.h"
#include "server/table_store.h"

ABSL_FLAG(uint64_t, rows, 1000000, "Ids in the Zipf key space.");
ABSL_FLAG(int, steps, 2000, "Timed steps per case.");
ABSL_FLAG(int, draws, 4096, "Ids drawn per step (deduplicated).");
ABSL_FLAG(int, reps, 3, "Timed runs per case; the median is printed.");
ABSL_FLAG(int, table_helpers, -1,
          "Stripe helper threads of the tables (as ps_server --table_helpers; "
          "-1: cores - 1, at most 3; 0: none).");
ABSL_FLAG(uint32_t, min_count, 1,
          "Admission (admission.min_count) of the benchmarked tables: above 1, "
          "ids seen fewer times read and train their partition's shared row.");
ABSL_FLAG(uint64_t, memory_rows, 10000000,
          "Rows for the memory figure (dim 16, Adagrad); 0 = skip.");

namespace shardps {
namespace {

using Clock = std::chrono::steady_clock;

JobConfig OneTable(uint32_t dim, const std::string& opt) {
  JobConfig c;
  TableConfig* t = c.add_tables();
  t->set_id(1);
  t->set_name("emb");
  t->set_kind(TableConfig::SPARSE);
  t->set_dim(dim);
  t->mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t->mutable_init()->set_scale(0.01f);
  if (absl::GetFlag(FLAGS_min_count) > 1) {
    t->mutable_admission()->set_min_count(absl::GetFlag(FLAGS_min_count));
    c.mutable_cluster()->set_num_partitions(4096);  // Shared rows are per partition.
  }
  OptimizerConfig* o = t->mutable_optimizer();
  if (opt == "sgd") {
    o->mutable_sgd()->set_learning_rate(0.01f);
  } else if (opt == "adagrad") {
    o->mutable_adagrad()->set_learning_rate(0.01f);
    o->mutable_adagrad()->set_eps(1e-10f);
  } else {
    o->mutable_adam()->set_learning_rate(0.01f);
    o->mutable_adam()->set_beta1(0.9f);
    o->mutable_adam()->set_beta2(0.999f);
    o->mutable_adam()->set_eps(1e-8f);
  }
  c.mutable_cluster()->set_dense_chunk_size(4096);
  return c;
}

struct Batches {
  std::vector<std::vector<uint64_t>> ranks, keys;
  uint64_t rows = 0;
};

Batches MakeBatches(int steps, int draws, uint64_t num_ids) {
  bench::ZipfBatches zipf(num_ids, 1.0, 42);
  Batches b;
  b.ranks.resize(steps);
  b.keys.resize(steps);
  for (int s = 0; s < steps; ++s) {
    zipf.Next(draws, &b.ranks[s], &b.keys[s]);
    b.rows += b.keys[s].size();
  }
  return b;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void RunCase(uint32_t dim, const std::string& opt, const Batches& b, uint64_t num_ids) {
  const JobConfig config = OneTable(dim, opt);
  std::vector<float> grads(8192 * dim, 0.001f);
  // The table: every id created first, so the timed loop is steady state.
  auto store = std::move(*TableStore::Create(config));
  {
    std::vector<uint64_t> all(num_ids);
    for (uint64_t r = 0; r < num_ids; ++r) all[r] = bench::ZipfBatches::KeyOf(r);
    std::vector<float> out(num_ids * dim);
    (void)store->Pull(1, all.data(), all.size(), true, out.data());
  }
  std::vector<double> table_rates, plain_rates;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    auto start = Clock::now();
    for (size_t s = 0; s < b.keys.size(); ++s) {
      (void)store->Push(1, b.keys[s].data(), b.keys[s].size(), grads.data(), 1.0f);
    }
    table_rates.push_back(b.rows / Seconds(start));
  }
  // The plain array: rows by number, same optimizer code.
  auto optimizer = std::move(*Optimizer::Create(config.tables(0).optimizer(), dim));
  const size_t stride = dim + optimizer->StateSize();
  std::vector<float> plain(num_ids * stride, 0.01f);
  for (uint64_t r = 0; r < num_ids; ++r) optimizer->InitState(&plain[r * stride + dim]);
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    auto start = Clock::now();
    for (size_t s = 0; s < b.ranks.size(); ++s) {
      const std::vector<uint64_t>& ranks = b.ranks[s];
      for (size_t i = 0; i < ranks.size(); ++i) {
        float* row = &plain[ranks[i] * stride];
        optimizer->Update(row, row + dim, grads.data() + i * dim, 1.0f);
      }
    }
    plain_rates.push_back(b.rows / Seconds(start));
  }
  const double table_rate = Median(table_rates);
  const double plain_rate = Median(plain_rates);
  std::printf(
      "optimizer %-8s dim %3u: table %7.2f M rows/s, plain array %7.2f "
      "M rows/s, ratio %.2f\n",
      opt.c_str(), dim, table_rate / 1e6, plain_rate / 1e6, table_rate / plain_rate);
}

void RunMemory(uint64_t rows) {
  const JobConfig config = OneTable(16, "adagrad");
  auto store = std::move(*TableStore::Create(config));
  std::vector<uint64_t> keys(1 << 16);
  std::vector<float> out(keys.size() * 16);
  for (uint64_t base = 0; base < rows; base += keys.size()) {
    const size_t n = std::min<uint64_t>(keys.size(), rows - base);
    for (size_t i = 0; i < n; ++i) keys[i] = bench::ZipfBatches::KeyOf(base + i);
    (void)store->Pull(1, keys.data(), n, true, out.data());
  }
  const TableCounters c = store->FindTable(1)->Counters();
  const double raw = 8 + 16 * 4 + 16 * 4;  // key + weights + accumulators.
  std::printf(
      "memory: %llu rows dim 16 adagrad: %llu bytes/row, raw %.0f, "
      "ratio %.2f\n",
      static_cast<unsigned long long>(c.live_rows),
      static_cast<unsigned long long>(c.bytes_per_row), raw, c.bytes_per_row / raw);
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  shardps::HelperPool::SetSharedHelpers(absl::GetFlag(FLAGS_table_helpers));
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const shardps::Batches b =
      shardps::MakeBatches(absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_draws), rows);
  std::printf("%zu steps, %.0f unique rows/step (Zipf 1.0 over %llu ids)\n", b.keys.size(),
              double(b.rows) / b.keys.size(), static_cast<unsigned long long>(rows));
  for (uint32_t dim : {16u, 64u}) {
    for (const char* opt : {"sgd", "adagrad", "adam"}) {
      shardps::RunCase(dim, opt, b, rows);
    }
  }
  if (absl::GetFlag(FLAGS_memory_rows) > 0) {
    shardps::RunMemory(absl::GetFlag(FLAGS_memory_rows));
  }
  return 0;
}
