// TableStore: validation on raw arrays leaves state unchanged.
#include "server/table_store.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

JobConfig TwoTables() {
  JobConfig c;
  for (uint32_t id : {1, 2}) {
    TableConfig* t = c.add_tables();
    t->set_id(id);
    t->set_name(id == 1 ? "reject" : "skip");
    t->set_kind(TableConfig::SPARSE);
    t->set_dim(2);
    t->mutable_init()->set_kind(InitializerConfig::ZEROS);
    t->mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
    t->set_non_finite(id == 1 ? REJECT : SKIP_AND_COUNT);
  }
  TableConfig* d = c.add_tables();
  d->set_id(3);
  d->set_name("dense");
  d->set_kind(TableConfig::DENSE);
  d->set_dense_size(6);
  d->mutable_init()->set_kind(InitializerConfig::ZEROS);
  d->mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.1f);
  c.mutable_cluster()->set_dense_chunk_size(4);
  return c;
}

std::unique_ptr<TableStore> MakeStore() {
  auto store = TableStore::Create(TwoTables());
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

std::vector<float> Read(TableStore& store, uint32_t table, std::vector<uint64_t> keys) {
  std::vector<float> out(keys.size() * store.FindTable(table)->dim());
  EXPECT_TRUE(store.Pull(table, keys.data(), keys.size(), false, out.data()).ok());
  return out;
}

TEST(TableStoreTest, PushThenPull) {
  auto store = MakeStore();
  const uint64_t keys[2] = {10, 20};
  const float grads[4] = {1, 2, 3, 4};
  auto c = store->Push(1, keys, 2, grads, 0.5f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->applied, 2u);
  EXPECT_EQ(Read(*store, 1, {10, 20}), (std::vector<float>{-0.5, -1, -1.5, -2}));
}

TEST(TableStoreTest, BadPushesChangeNothing) {
  auto store = MakeStore();
  const uint64_t keys[2] = {10, 20};
  const float ok_grads[4] = {1, 1, 1, 1};
  ASSERT_TRUE(store->Push(1, keys, 2, ok_grads, 1.0f).ok());
  const std::vector<float> before = Read(*store, 1, {10, 20});

  EXPECT_EQ(store->Push(99, keys, 2, ok_grads, 1.0f).status().code(),
            absl::StatusCode::kInvalidArgument);
  const uint64_t dup[2] = {10, 10};
  auto s = store->Push(1, dup, 2, ok_grads, 1.0f).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate key 10"), std::string::npos) << s;
  const float nan_grads[4] = {1, 1, 1, std::numeric_limits<float>::quiet_NaN()};
  s = store->Push(1, keys, 2, nan_grads, 1.0f).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("key 20"), std::string::npos) << s;
  EXPECT_EQ(store->Push(1, keys, 2, ok_grads, INFINITY).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Read(*store, 1, {10, 20}), before);
}

TEST(TableStoreTest, SkipAndCountAppliesTheFiniteRows) {
  auto store = MakeStore();
  const uint64_t keys[2] = {10, 20};
  const float grads[4] = {1, 1, INFINITY, 1};
  auto c = store->Push(2, keys, 2, grads, 1.0f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->applied, 1u);
  EXPECT_EQ(c->skipped_nonfinite, 1u);
  EXPECT_EQ(Read(*store, 2, {10, 20}), (std::vector<float>{-1, -1, 0, 0}));
  EXPECT_EQ(store->FindTable(2)->Counters().rows_skipped_nonfinite, 1u);
  EXPECT_FALSE(store->FindTable(2)->Contains(20));
}

TEST(TableStoreTest, DenseChunksAreRangeChecked) {
  auto store = MakeStore();
  EXPECT_EQ(store->FindTable(3)->dim(), 4u);
  const uint64_t bad = 2;  // 6 elements in chunks of 4: chunks 0 and 1.
  float out[4];
  EXPECT_EQ(store->Pull(3, &bad, 1, true, out).code(), absl::StatusCode::kInvalidArgument);
  const float values[4] = {1, 2, 3, 4};
  EXPECT_EQ(store->InitRows(3, &bad, 1, values).status().code(),
            absl::StatusCode::kInvalidArgument);
  const uint64_t good = 1;
  auto written = store->InitRows(3, &good, 1, values);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 1u);
}

TEST(TableStoreTest, NonFiniteInitRowsValueIsRejectedAndWritesNothing) {
  auto store = MakeStore();
  const uint64_t keys[2] = {7, 9};
  const float values[4] = {1, 2, 3, std::numeric_limits<float>::infinity()};
  auto written = store->InitRows(1, keys, 2, values);
  ASSERT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(written.status().message().find("InitRows value for key 9 is not finite"),
            std::string::npos)
      << written.status();
  EXPECT_FALSE(store->FindTable(1)->Contains(7));
  EXPECT_FALSE(store->FindTable(1)->Contains(9));
}

}  // namespace
}  // namespace shardps
