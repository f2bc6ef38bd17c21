// Size and time of a delta checkpoint against a full one, on a table trained
// with Zipf-distributed ids (the usual shape of recommendation traffic: a
// few hot ids, a long tail). Prints figures; never fails on time.
//
//   bazel run -c opt //bench:delta_checkpoint_bench -- [--rows=1000000]
//       [--dim=16] [--draws=4096] [--steps=100,1000] [--zipf=1.0]
//
// The table is first filled with --rows ids (every id once), checkpointed in
// full, then trained up to each --steps count (cumulative; a delta on the
// previous checkpoint at each); each step pushes the unique ids of --draws Zipf
// draws. Adagrad, no compression.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint/file_io.h"
#include "server/snapshot.h"
#include "server/table_store.h"

ABSL_FLAG(uint64_t, rows, 1000000, "Ids in the table.");
ABSL_FLAG(uint32_t, dim, 16, "Row dimension.");
ABSL_FLAG(int, draws, 4096, "Zipf draws per step (deduplicated).");
ABSL_FLAG(std::string, steps, "100,1000", "Cumulative step counts, one delta each.");
ABSL_FLAG(double, zipf, 1.0, "Zipf exponent.");

namespace shardps {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kParts = 64;

JobConfig OneTable(uint32_t dim) {
  JobConfig c;
  c.set_name("delta-bench");
  TableConfig* t = c.add_tables();
  t->set_id(1);
  t->set_name("emb");
  t->set_kind(TableConfig::SPARSE);
  t->set_dim(dim);
  t->mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t->mutable_init()->set_scale(0.01f);
  t->mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.01f);
  t->mutable_optimizer()->mutable_adagrad()->set_eps(1e-10f);
  c.mutable_cluster()->set_dense_chunk_size(4096);
  return c;
}

// Draws ranks 0..n-1 with P(r) ~ 1 / (r + 1)^s by inverting the CDF.
class Zipf {
 public:
  Zipf(uint64_t n, double s) : cdf_(n) {
    double sum = 0;
    for (uint64_t r = 0; r < n; ++r) cdf_[r] = sum += std::pow(r + 1.0, -s);
    for (double& c : cdf_) c /= sum;
  }
  uint64_t operator()(std::mt19937_64& rng) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
  }

 private:
  std::vector<double> cdf_;
};

uint64_t KeyOf(uint64_t rank) { return rank * 0x9E3779B97F4A7C15ull + 1; }

void Push(TableStore& store, const std::vector<uint64_t>& keys, uint32_t dim) {
  const std::vector<float> grads(keys.size() * dim, 0.001f);
  for (size_t i = 0; i < keys.size(); i += 65536) {
    const size_t n = std::min<size_t>(65536, keys.size() - i);
    auto st = store.Push(1, keys.data() + i, n, grads.data() + i * dim, 1.0f);
    if (!st.ok()) std::fprintf(stderr, "push: %s\n", st.status().ToString().c_str());
  }
}

// Writes one checkpoint (full, or a delta since `since`); returns its bytes.
uint64_t Write(const TableStore& store, const std::string& root, uint64_t clock,
               std::optional<uint32_t> since, uint64_t base_clock, double* seconds, uint64_t* rows,
               uint64_t* deletions) {
  const auto start = Clock::now();
  const std::vector<bool> owned(kParts, true);
  auto snapshot = StoreSnapshot::Take(store, owned, since);
  SnapshotWriteOptions options;
  options.dir = checkpoint::JoinPath(root, std::to_string(clock));
  (void)checkpoint::MakeDir(options.dir);
  options.job_name = "delta-bench";
  options.clock = clock;
  options.base_clock = base_clock;
  options.tables = TableSchemas(store);
  auto files = WriteSnapshot(*snapshot, options);
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!files.ok()) {
    std::fprintf(stderr, "write: %s\n", files.status().ToString().c_str());
    return 0;
  }
  uint64_t bytes = 0;
  for (const auto& f : *files) bytes += f.size;
  *rows = snapshot->rows();
  *deletions = snapshot->deletions();
  return bytes;
}

int Run() {
  const uint64_t n = absl::GetFlag(FLAGS_rows);
  const uint32_t dim = absl::GetFlag(FLAGS_dim);
  auto store = TableStore::Create(OneTable(dim));
  if (!store.ok()) return 1;
  std::vector<uint64_t> keys;
  for (uint64_t r = 0; r < n; ++r) keys.push_back(KeyOf(r));
  Push(**store, keys, dim);

  const std::string root = "/tmp/delta_checkpoint_bench";
  (void)checkpoint::RemoveAll(root);
  (void)checkpoint::MakeDir(root);
  double seconds;
  uint64_t rows, deletions;
  uint32_t base_generation = (*store)->AdvanceGeneration();
  const uint64_t full = Write(**store, root, 0, std::nullopt, 0, &seconds, &rows, &deletions);
  std::printf("full checkpoint: %llu rows dim %u adagrad, %.1f MB, %.2f s\n",
              static_cast<unsigned long long>(rows), dim, full / 1e6, seconds);

  Zipf zipf(n, absl::GetFlag(FLAGS_zipf));
  std::mt19937_64 rng(1);
  uint64_t done = 0, base_clock = 0;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_steps), ',')) {
    uint64_t target;
    if (!absl::SimpleAtoi(s, &target) || target < done) return 2;
    const uint64_t steps = target - done;
    for (; done < target; ++done) {
      keys.clear();
      for (int d = 0; d < absl::GetFlag(FLAGS_draws); ++d) keys.push_back(KeyOf(zipf(rng)));
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      Push(**store, keys, dim);
    }
    const uint32_t generation = (*store)->AdvanceGeneration();
    const uint64_t delta =
        Write(**store, root, done, base_generation, base_clock, &seconds, &rows, &deletions);
    std::printf(
        "delta after %llu more steps (%d Zipf(%.2f) draws each): %llu rows changed "
        "(%.1f%%), %.2f MB = %.3f of the full checkpoint, %.2f s\n",
        static_cast<unsigned long long>(steps), absl::GetFlag(FLAGS_draws),
        absl::GetFlag(FLAGS_zipf), static_cast<unsigned long long>(rows), 100.0 * rows / n,
        delta / 1e6, static_cast<double>(delta) / full, seconds);
    base_generation = generation;
    base_clock = done;
  }
  (void)checkpoint::RemoveAll(root);
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return shardps::Run();
}
