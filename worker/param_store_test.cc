// The local parameter store serves pulls with optimizer state as a server
// serves TableKeys.with_state, and refuses what a server refuses (a remote
// client sees a wrong state width as DATA_LOSS, tests/ps_client_test.cc).
#include "worker/param_store.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "server/table.h"
#include "server/table_store.h"

namespace shardps {
namespace {

constexpr uint32_t kDim = 4;

JobConfig OneAdagradTable(uint32_t min_count) {
  JobConfig c;
  TableConfig* t = c.add_tables();
  t->set_id(1);
  t->set_name("emb");
  t->set_kind(TableConfig::SPARSE);
  t->set_dim(kDim);
  t->set_seed(3);
  t->mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t->mutable_init()->set_scale(0.1f);
  t->mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.1f);
  t->mutable_optimizer()->mutable_adagrad()->set_initial_accumulator(0.01f);
  t->mutable_admission()->set_min_count(min_count);
  c.mutable_cluster()->set_num_partitions(16);  // Admission's shared rows are per partition.
  return c;
}

// Pulls `keys` through `store` and returns its status; `out` gets the rows.
absl::Status Pull(ParamStore& store, const std::vector<uint64_t>& keys, uint32_t state,
                  PullPurpose purpose, std::vector<float>* out) {
  return store.Pull({{1, kDim, keys.data(), keys.size(), out->data(), state}}, purpose, 1)->Wait();
}

TEST(LocalParamStoreTest, PullsWeightsWithStateAsTheTableHoldsThem) {
  auto store = MakeLocalParamStore(OneAdagradTable(1));
  ASSERT_TRUE(store.ok()) << store.status();
  TableStore* tables = (*store)->local_tables();
  ASSERT_NE(tables, nullptr);
  Table* table = tables->FindTable(1);
  ASSERT_NE(table, nullptr);
  const uint32_t state = static_cast<uint32_t>(table->state_size());
  ASSERT_EQ(state, kDim);  // Adagrad: one accumulator a weight.

  const std::vector<uint64_t> pushed = {11, 22, 33};
  std::vector<float> grads(pushed.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * static_cast<float>(i + 1);
  ASSERT_TRUE((*store)
                  ->Push({{1, kDim, pushed.data(), pushed.size(), grads.data()}}, 1, 1.0f)
                  ->Wait()
                  .ok());

  // Two pushed rows and one the pull creates.
  const std::vector<uint64_t> keys = {22, 44, 11};
  std::vector<float> with_state(keys.size() * (kDim + state), -7.0f);
  ASSERT_TRUE(Pull(**store, keys, state, TRAIN, &with_state).ok());
  std::vector<float> expected(with_state.size());
  table->PullWithState(keys.data(), keys.size(), expected.data());
  EXPECT_EQ(0, std::memcmp(with_state.data(), expected.data(), expected.size() * sizeof(float)));
  // The weights part is what a plain pull returns, and a pushed row's
  // accumulators hold its squared gradients.
  std::vector<float> weights(keys.size() * kDim);
  ASSERT_TRUE(Pull(**store, keys, 0, TRAIN, &weights).ok());
  for (size_t r = 0; r < keys.size(); ++r) {
    for (uint32_t d = 0; d < kDim; ++d) {
      EXPECT_EQ(with_state[r * (kDim + state) + d], weights[r * kDim + d]) << r << " " << d;
    }
  }
  const float g = grads[1 * kDim + 0];  // Key 22, element 0.
  EXPECT_FLOAT_EQ(with_state[0 * (kDim + state) + kDim], 0.01f + g * g);
  // The created row's state is the initial accumulator.
  EXPECT_FLOAT_EQ(with_state[1 * (kDim + state) + kDim], 0.01f);
}

TEST(LocalParamStoreTest, RefusesWhatAServerRefusesAndWritesNothing) {
  auto store = MakeLocalParamStore(OneAdagradTable(1));
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<uint64_t> keys = {5, 6};

  // A state width other than the optimizer's.
  std::vector<float> out(keys.size() * (kDim + kDim), -7.0f);
  absl::Status st = Pull(**store, keys, 1, TRAIN, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("1 floats of state"), std::string::npos) << st;
  for (float v : out) ASSERT_EQ(v, -7.0f);

  // Not a training pull.
  st = Pull(**store, keys, kDim, EVAL, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("with_state"), std::string::npos) << st;
  for (float v : out) ASSERT_EQ(v, -7.0f);

  // A table with admission: a pending key has no row and no state.
  auto admitting = MakeLocalParamStore(OneAdagradTable(3));
  ASSERT_TRUE(admitting.ok()) << admitting.status();
  st = Pull(**admitting, keys, kDim, TRAIN, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("admission"), std::string::npos) << st;
  for (float v : out) ASSERT_EQ(v, -7.0f);
  // The refused pulls created no row.
  EXPECT_EQ((*store)->local_tables()->FindTable(1)->Counters().live_rows, 0u);
}

}  // namespace
}  // namespace shardps
