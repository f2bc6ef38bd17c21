// Prints the forward+backward throughput (samples/s) of the default job's
// DLRM (configs/default.pbtxt: 13 dense, 26 fields on one table of dim 16,
// bottom [64, 16], top [64, 32], batch 256) on the CPU with one intra-op
// thread, plus the cost of key dedup for the same batches.
//
//   bazel run -c opt //bench:dlrm_bench -- [steps] [config.pbtxt]
//
// Figures only: it never fails on time.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "torch/torch.h"
#include "worker/model/dedup.h"
#include "worker/model/interaction.h"
#include "worker/model/model_factory.h"

namespace shardps {
namespace {

using Clock = std::chrono::steady_clock;

// Process CPU time: with one intra-op thread this is the compute time even
// when other processes share the cores (wall time is printed too).
struct Times {
  Clock::time_point wall;
  std::clock_t cpu;
};

Times Now() { return {Clock::now(), std::clock()}; }

struct Span {
  double wall, cpu;
};

Span Between(const Times& a, const Times& b) {
  return {std::chrono::duration<double>(b.wall - a.wall).count(),
          static_cast<double>(b.cpu - a.cpu) / CLOCKS_PER_SEC};
}

void Print(const char* what, int steps, int64_t batch, Span s) {
  std::printf("%-22s %9.0f samples/s CPU time (%.3f ms/step), %9.0f samples/s wall\n", what,
              steps * batch / s.cpu, 1e3 * s.cpu / steps, steps * batch / s.wall);
}

// The interaction alone at DLRM's shape: fused kernel vs bmm + index_select.
void InteractionBench(int steps, int64_t b, int64_t n, int64_t d) {
  torch::Tensor x = torch::randn({b, n, d});
  torch::Tensor w = torch::randn({b, n * (n - 1) / 2});
  for (int variant = 0; variant < 2; ++variant) {
    auto step = [&] {
      torch::Tensor a = x.detach().requires_grad_(true);
      torch::Tensor out = variant == 0 ? PairwiseDots(a) : PairwiseDotsReference(a);
      (out * w).sum().backward();
    };
    for (int i = 0; i < 10; ++i) step();
    const Times t0 = Now();
    for (int i = 0; i < steps; ++i) step();
    Print(variant == 0 ? "interaction fused:" : "interaction bmm:", steps, b, Between(t0, Now()));
  }
}

// One synthetic batch: one id per field, ids from a heavy-tailed distribution
// (so dedup has work to do), dedup'ed per table as the trainer does.
struct Batch {
  std::vector<float> labels, dense, params;
  std::vector<std::vector<uint64_t>> keys;  // Per field.
  std::vector<std::vector<float>> rows;     // Per table.
  std::vector<std::vector<int64_t>> offsets;
  std::vector<TableRows> tables;
  std::vector<FieldBag> fields;
};

void Dedup(const ModelSpec& spec, std::vector<KeyDeduper>* dedup, Batch* b) {
  for (size_t t = 0; t < spec.tables.size(); ++t) (*dedup)[t].Reset(b->labels.size() * 26);
  std::vector<size_t> start(spec.fields.size());
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    KeyDeduper& d = (*dedup)[spec.fields[f].table];
    start[f] = d.inverse().size();
    d.Add(b->keys[f]);
  }
  b->tables.clear();
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    b->rows[t].assign((*dedup)[t].unique_keys().size() * spec.tables[t].dim, 0.01f);
    b->tables.push_back({b->rows[t]});
  }
  b->fields.clear();
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    const KeyDeduper& d = (*dedup)[spec.fields[f].table];
    b->fields.push_back(
        {absl::MakeConstSpan(d.inverse()).subspan(start[f], b->keys[f].size()), b->offsets[f]});
  }
}

int Run(int steps, const std::string& config_path) {
  torch::set_num_threads(1);
  absl::StatusOr<JobConfig> config = LoadJobConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Model>> model =
      CreateModel(*config, c10::Device(c10::DeviceType::CPU));
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const ModelSpec& spec = (*model)->spec();
  const int64_t bsz = config->training().batch_size();
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> heavy(3.0, 3.0);
  Batch b;
  for (int64_t i = 0; i < bsz; ++i) b.labels.push_back(static_cast<float>(rng() % 2));
  for (int64_t i = 0; i < bsz * spec.num_dense; ++i) b.dense.push_back(std::log1p(rng() % 100));
  b.params.resize((*model)->NumDenseParams());
  (*model)->InitDenseParams(18, b.params.data());
  b.keys.resize(spec.fields.size());
  b.rows.resize(spec.tables.size());
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    for (int64_t i = 0; i < bsz; ++i) b.keys[f].push_back(f * 1000003 + (uint64_t)heavy(rng));
    std::vector<int64_t> off(bsz + 1);
    for (int64_t i = 0; i <= bsz; ++i) off[i] = i;
    b.offsets.push_back(off);
  }
  std::vector<KeyDeduper> dedup(spec.tables.size());
  Dedup(spec, &dedup, &b);
  ModelInputs in{bsz, b.labels, b.dense, b.params, b.tables, b.fields};
  StepResult result;
  for (int i = 0; i < 10; ++i) (void)(*model)->ForwardBackward(in, true, &result);  // Warm-up.

  const Times t0 = Now();
  for (int i = 0; i < steps; ++i) {
    absl::Status s = (*model)->ForwardBackward(in, true, &result);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  const Times t1 = Now();
  for (int i = 0; i < steps; ++i) (void)(*model)->ForwardBackward(in, false, &result);
  const Times t2 = Now();
  for (int i = 0; i < steps; ++i) Dedup(spec, &dedup, &b);
  const Times t3 = Now();

  std::printf("model: %s\n", (*model)->DebugString().c_str());
  std::printf("config: %s, batch %lld, %zu unique keys of %lld, 1 intra-op thread, CPU, %d steps\n",
              config_path.c_str(), static_cast<long long>(bsz), dedup[0].unique_keys().size(),
              static_cast<long long>(bsz * spec.fields.size()), steps);
  Print("forward+backward:", steps, bsz, Between(t0, t1));
  Print("forward only:", steps, bsz, Between(t1, t2));
  Print("key dedup:", steps, bsz, Between(t2, t3));
  InteractionBench(steps, bsz, 1 + static_cast<int64_t>(spec.fields.size()),
                   spec.tables.empty() ? 16 : spec.tables[0].dim);
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  const std::string config = argc > 2 ? argv[2] : "configs/default.pbtxt";
  return shardps::Run(steps > 0 ? steps : 200, config);
}
