// Pulls with optimizer state (TableKeys.with_state): what a replaying
// worker reads. The property it relies on: applying a push's gradients to
// the pulled weights and state with the same Optimizer gives, bit for bit,
// what the table holds after that push. Then the core's validation.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/codec.h"
#include "gtest/gtest.h"
#include "server/core_test_config.h"
#include "server/optimizer.h"
#include "server/parameter_server_core.h"
#include "server/table.h"

namespace shardps {
namespace {

constexpr uint32_t kDim = 6;

OptimizerConfig Optimizer(const std::string& kind) {
  OptimizerConfig o;
  if (kind == "sgd") {
    o.mutable_sgd()->set_learning_rate(0.1f);
    o.mutable_sgd()->set_momentum(0.9f);
  } else if (kind == "adagrad") {
    o.mutable_adagrad()->set_learning_rate(0.1f);
    o.mutable_adagrad()->set_initial_accumulator(0.01f);
    o.mutable_adagrad()->set_eps(1e-10f);
  } else if (kind == "rowwise_adagrad") {
    o.mutable_rowwise_adagrad()->set_learning_rate(0.1f);
    o.mutable_rowwise_adagrad()->set_eps(1e-10f);
  } else if (kind == "adam") {
    AdamConfig* a = o.mutable_adam();
    a->set_learning_rate(0.01f);
    a->set_beta1(0.9f);
    a->set_beta2(0.999f);
    a->set_eps(1e-8f);
    o.set_weight_decay(0.01f);
  } else {
    FtrlConfig* f = o.mutable_ftrl();
    f->set_alpha(0.1f);
    f->set_beta(1.0f);
    f->set_l1(0.001f);
    f->set_l2(0.01f);
  }
  o.set_clip_norm(1.5f);
  return o;
}

TableConfig SparseTable(const std::string& optimizer) {
  TableConfig t;
  t.set_id(1);
  t.set_name("emb");
  t.set_kind(TableConfig::SPARSE);
  t.set_dim(kDim);
  t.set_seed(7);
  t.mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t.mutable_init()->set_scale(0.1f);
  *t.mutable_optimizer() = Optimizer(optimizer);
  return t;
}

std::vector<float> Grads(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> out(n * kDim);
  for (float& v : out) v = g(*rng);
  return out;
}

class ReplayTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplayTest, ReplayingAPushOnPulledStateIsThePushBitForBit) {
  const TableConfig config = SparseTable(GetParam());
  auto table_or = Table::Create(config, 8, /*helpers=*/nullptr);
  ASSERT_TRUE(table_or.ok()) << table_or.status();
  Table& table = **table_or;
  auto optimizer = Optimizer::Create(config.optimizer(), kDim);
  ASSERT_TRUE(optimizer.ok());
  const size_t state = (*optimizer)->StateSize();
  ASSERT_EQ(table.state_size(), state);
  ASSERT_GT(state, 0u) << GetParam();
  std::mt19937 rng(3);
  // Old rows with history, and keys never seen (created by the pull).
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 700; ++k) keys.push_back(k * 7919 + 1);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = Grads(500, &rng);
    table.Push(keys.data(), 500, g.data(), 0.5f + step);
  }
  for (int step = 0; step < 4; ++step) {
    std::vector<float> rows(keys.size() * (kDim + state));
    table.PullWithState(keys.data(), keys.size(), rows.data());
    // The weights are what a plain pull reads.
    std::vector<float> plain(keys.size() * kDim);
    table.Pull(keys.data(), keys.size(), /*train=*/false, plain.data());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(std::memcmp(&rows[i * (kDim + state)], &plain[i * kDim], kDim * sizeof(float)), 0)
          << "key " << keys[i];
    }
    // Replay the push on the copy, then push it for real.
    const std::vector<float> g = Grads(keys.size(), &rng);
    const float lr_scale = 0.25f * (step + 1);
    for (size_t i = 0; i < keys.size(); ++i) {
      float* row = &rows[i * (kDim + state)];
      (*optimizer)->Update(row, row + kDim, &g[i * kDim], lr_scale);
    }
    table.Push(keys.data(), keys.size(), g.data(), lr_scale);
    std::vector<float> after(rows.size());
    table.PullWithState(keys.data(), keys.size(), after.data());
    ASSERT_EQ(std::memcmp(after.data(), rows.data(), rows.size() * sizeof(float)), 0)
        << GetParam() << ", step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, ReplayTest,
                         ::testing::Values("sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl"));

JobConfig CoreConfig() {
  JobConfig c;
  TableConfig* t = c.add_tables();
  *t = SparseTable("adagrad");
  TableConfig* a = c.add_tables();
  *a = SparseTable("adagrad");
  a->set_id(2);
  a->set_name("admitted");
  a->mutable_admission()->set_min_count(3);
  testing::SetTestCluster(&c, /*servers=*/1, /*workers=*/1, /*partitions=*/16, ASP);
  return c;
}

PullRequest StatePull(uint32_t table, const std::vector<uint64_t>& keys) {
  PullRequest r;
  r.set_map_version(1);
  r.set_purpose(TRAIN);
  TableKeys* tk = r.add_tables();
  tk->set_table_id(table);
  tk->set_with_state(true);
  for (uint64_t k : keys) tk->add_keys(k);
  return r;
}

TEST(StatePullTest, CoreAnswersWeightsAndStateAndRefusesWhatCannotBeReplayed) {
  CoreOptions options;
  options.config = CoreConfig();
  auto core_or = ParameterServerCore::Create(options);
  ASSERT_TRUE(core_or.ok()) << core_or.status();
  ParameterServerCore& core = **core_or;
  const std::vector<uint64_t> keys = {5, 6, 7};

  PullResponse resp;
  ASSERT_TRUE(core.Pull(StatePull(1, keys), absl::InfiniteFuture(), &resp).ok());
  ASSERT_EQ(resp.tables_size(), 1);
  EXPECT_EQ(resp.tables(0).dim(), 2 * kDim);  // Adagrad: one sum per weight.
  std::vector<float> rows(keys.size() * 2 * kDim);
  ASSERT_TRUE(
      DecodeValues(resp.tables(0).values(), Encoding::kFp32, rows.size(), rows.data()).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (uint32_t j = 0; j < kDim; ++j) {
      EXPECT_EQ(rows[i * 2 * kDim + kDim + j], 0.01f) << "the initial accumulator";
    }
  }
  // A plain pull of the same rows in the same request is as ever.
  PullRequest both = StatePull(1, keys);
  *both.add_tables() = both.tables(0);
  both.mutable_tables(1)->set_with_state(false);
  resp.Clear();
  ASSERT_TRUE(core.Pull(both, absl::InfiniteFuture(), &resp).ok());
  EXPECT_EQ(resp.tables(1).dim(), kDim);
  ASSERT_EQ(resp.tables(1).values().size(), keys.size() * kDim * 4);
  for (size_t i = 0; i < keys.size(); ++i) {  // The weights of the state pull.
    EXPECT_EQ(resp.tables(1).values().substr(i * kDim * 4, kDim * 4),
              resp.tables(0).values().substr(i * 2 * kDim * 4, kDim * 4));
  }

  const TableCounters before = core.store()->FindTable(2)->Counters();
  PullRequest eval = StatePull(1, keys);
  eval.set_purpose(EVAL);
  PullRequest bf16 = StatePull(1, keys);
  bf16.set_encoding(BF16);
  for (const PullRequest& bad : {eval, bf16, StatePull(2, keys)}) {
    resp.Clear();
    const absl::Status st = core.Pull(bad, absl::InfiniteFuture(), &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("with_state"), std::string::npos) << st;
  }
  // Refused before anything changed: no key counted towards admission.
  EXPECT_EQ(core.store()->FindTable(2)->Counters().pending_rows, before.pending_rows);
  EXPECT_EQ(core.store()->FindTable(1)->Counters().pulls, 3u);  // None refused.
}

}  // namespace
}  // namespace shardps
