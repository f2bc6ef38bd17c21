// Table: concurrency (exact sums, no torn rows), admission, eviction,
// evaluation pulls, deterministic initial rows, dense chunks, change
// tracking for delta checkpoints.
#include "server/table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

TableConfig SgdTable(uint32_t dim, float lr) {
  TableConfig t;
  t.set_id(3);
  t.set_name("emb");
  t.set_kind(TableConfig::SPARSE);
  t.set_dim(dim);
  t.set_seed(11);
  t.mutable_init()->set_kind(InitializerConfig::ZEROS);
  t.mutable_optimizer()->mutable_sgd()->set_learning_rate(lr);
  return t;
}

std::unique_ptr<Table> MakeTable(const TableConfig& t) {
  auto table = Table::Create(t, 4096);
  EXPECT_TRUE(table.ok()) << table.status();
  return std::move(*table);
}

// `threads` threads each push `pushes` batches of overlapping keys (thread t
// skips key k in push p when (k + p + t) % 3 == 0) into an SGD table with
// lr 0.5 (a power of two) and integer gradients, so the result is exact:
// every row must end at the sequential sum. Meanwhile a reader pulls all
// keys; each row's gradients are uniform across the row, so a row read
// atomically has all elements equal.
void ExpectConcurrentPushesSumExactly(Table& table, int threads, int pushes, int num_keys,
                                      int dim) {
  auto key_of = [](int k) { return uint64_t{1000} + uint64_t(k) * 7919; };
  std::vector<std::thread> pushers;
  for (int t = 0; t < threads; ++t) {
    pushers.emplace_back([&, t] {
      std::vector<uint64_t> keys;
      std::vector<float> grads;
      for (int p = 0; p < pushes; ++p) {
        keys.clear();
        grads.clear();
        for (int k = 0; k < num_keys; ++k) {
          if ((k + p + t) % 3 == 0) continue;
          keys.push_back(key_of(k));
          for (int i = 0; i < dim; ++i) grads.push_back(float((k + t) % 5 + 1));
        }
        const PushCounts counts = table.Push(keys.data(), keys.size(), grads.data(), 1.0f);
        ASSERT_EQ(counts.applied, keys.size());
      }
    });
  }
  std::vector<uint64_t> all;
  for (int k = 0; k < num_keys; ++k) all.push_back(key_of(k));
  std::thread reader([&] {
    std::vector<float> out(all.size() * dim);
    const int rounds = std::max(10, 12800 / num_keys);  // 200 for 64 keys.
    for (int round = 0; round < rounds; ++round) {
      table.Pull(all.data(), all.size(), /*train=*/true, out.data());
      for (int k = 0; k < num_keys; ++k) {
        for (int i = 1; i < dim; ++i) {
          ASSERT_EQ(out[k * dim + i], out[k * dim]) << "torn row " << k;
        }
      }
    }
  });
  for (auto& th : pushers) th.join();
  reader.join();
  std::vector<float> out(all.size() * dim);
  table.Pull(all.data(), all.size(), /*train=*/false, out.data());
  for (int k = 0; k < num_keys; ++k) {
    double expected = 0;
    for (int t = 0; t < threads; ++t) {
      for (int p = 0; p < pushes; ++p) {
        if ((k + p + t) % 3 != 0) expected -= 0.5 * ((k + t) % 5 + 1);
      }
    }
    for (int i = 0; i < dim; ++i) ASSERT_EQ(out[k * dim + i], expected) << k;
  }
}

TEST(TableTest, ConcurrentPushesEndAtTheExactSequentialSum) {
  auto table = MakeTable(SgdTable(8, 0.5f));
  ExpectConcurrentPushesSumExactly(*table, /*threads=*/8, /*pushes=*/300,
                                   /*num_keys=*/64, /*dim=*/8);
}

// Batches of >= kParallelMinKeys keys are shared with the helper pool; the
// same holds with 4 callers pushing large batches through a 2-helper pool.
TEST(TableTest, LargeConcurrentPushesOnTheHelperPoolEndAtTheExactSum) {
  constexpr int kKeys = 3000;
  static_assert(kKeys * 2 / 3 >= Table::kParallelMinKeys, "batches must be large");
  HelperPool pool(2, /*only_when_idle=*/false);
  auto created = Table::Create(SgdTable(4, 0.5f), 4096, &pool);
  ASSERT_TRUE(created.ok()) << created.status();
  ExpectConcurrentPushesSumExactly(**created, /*threads=*/4, /*pushes=*/40,
                                   /*num_keys=*/kKeys, /*dim=*/4);
}

// The pooled path gives what the serial one gives: pulled values, push
// counts, admission counts and every row's payload, bit for bit (Adagrad,
// admission after 2 pushes with the shared row trained and read, pull
// batches with repeated keys).
TEST(TableTest, HelperPoolGivesTheSameRowsAsASerialTable) {
  constexpr int kDim = 8;
  TableConfig config = SgdTable(kDim, 0.1f);
  config.mutable_init()->set_kind(InitializerConfig::UNIFORM);
  config.mutable_init()->set_scale(0.5f);
  config.mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.05f);
  config.mutable_admission()->set_min_count(2);
  HelperPool pool(2, /*only_when_idle=*/false);
  auto pooled = Table::Create(config, 4096, &pool);
  auto serial = Table::Create(config, 4096, nullptr);
  ASSERT_TRUE(pooled.ok() && serial.ok());
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    std::vector<uint64_t> pull_keys(3000);
    for (uint64_t& k : pull_keys) k = rng() % 5000;  // Repeats.
    std::vector<float> a(pull_keys.size() * kDim), b(a.size());
    (*pooled)->Pull(pull_keys.data(), pull_keys.size(), true, a.data());
    (*serial)->Pull(pull_keys.data(), pull_keys.size(), true, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << round;
    std::set<uint64_t> unique;
    while (unique.size() < 1500) unique.insert(rng() % 5000);
    std::vector<uint64_t> push_keys(unique.begin(), unique.end());
    std::vector<float> grads(push_keys.size() * kDim);
    for (float& g : grads) g = float(rng() % 1000) / 500.0f - 1.0f;
    const PushCounts pc = (*pooled)->Push(push_keys.data(), push_keys.size(), grads.data(), 1.0f);
    const PushCounts sc = (*serial)->Push(push_keys.data(), push_keys.size(), grads.data(), 1.0f);
    ASSERT_EQ(pc.applied, sc.applied) << round;
    ASSERT_EQ(pc.pending, sc.pending) << round;
    ASSERT_GT(round == 0 ? pc.pending : pc.applied, 0u) << round;
  }
  EXPECT_EQ((*pooled)->Counters().shared_updates, 20u);
  EXPECT_EQ((*pooled)->Counters().live_rows, (*serial)->Counters().live_rows);
  EXPECT_EQ((*pooled)->Counters().pending_rows, (*serial)->Counters().pending_rows);
  const size_t stride = (*serial)->row_stride();
  std::map<uint64_t, std::vector<float>> rows;
  (*serial)->ForEachRow(
      [&](uint64_t key, const float* payload) { rows[key].assign(payload, payload + stride); });
  size_t seen = 0;
  (*pooled)->ForEachRow([&](uint64_t key, const float* payload) {
    ++seen;
    auto it = rows.find(key);
    ASSERT_NE(it, rows.end()) << key;
    ASSERT_EQ(0, std::memcmp(it->second.data(), payload, stride * sizeof(float))) << key;
  });
  EXPECT_EQ(seen, rows.size());
}

// PullEncoded gives the bytes of an fp32 pull encoded afterwards: for rows
// that exist and for unseen keys (their initial value), serial and pooled.
TEST(TableTest, EncodedPullsEqualEncodingAnFp32Pull) {
  constexpr int kDim = 12;
  TableConfig config = SgdTable(kDim, 0.25f);
  config.mutable_init()->set_kind(InitializerConfig::NORMAL);
  config.mutable_init()->set_scale(0.3f);
  HelperPool pool(2, /*only_when_idle=*/false);
  auto table = std::move(*Table::Create(config, 4096, &pool));
  std::vector<uint64_t> keys(1200);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7919 + 3;
  std::vector<float> grads(600 * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(i % 13) - 6.0f;
  table->Push(keys.data(), 600, grads.data(), 1.0f);  // Half the keys exist.
  for (size_t n : {size_t{5}, keys.size()}) {         // Serial and pooled batches.
    std::vector<float> fp32(n * kDim);
    table->Pull(keys.data(), n, /*train=*/false, fp32.data());
    for (Encoding e : {Encoding::kFp32, Encoding::kBf16, Encoding::kFp16}) {
      std::string want;
      EncodeValues(fp32.data(), fp32.size(), e, &want);
      std::vector<float> room(n * kDim);  // Float-aligned bytes.
      char* out = reinterpret_cast<char*>(room.data());
      table->PullEncoded(keys.data(), n, /*train=*/false, e, out);
      ASSERT_EQ(std::string(out, want.size()), want)
          << "n " << n << " encoding " << static_cast<int>(e);
    }
  }
}

TEST(TableTest, FindDuplicateKeyFindsARepeatAnywhereInTheBatch) {
  auto table = MakeTable(SgdTable(4, 1.0f));
  // 100 keys: a few a stripe (compared pairwise); 50000 keys: about 200 a
  // stripe (sorted).
  for (size_t n : {size_t{100}, size_t{50000}}) {
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = i * 0x9e3779b97f4a7c15ULL + 3;
    uint64_t dup = 0;
    EXPECT_FALSE(table->FindDuplicateKey(keys.data(), n, &dup)) << n;
    for (size_t at : {size_t{1}, n / 2, n - 1}) {
      std::vector<uint64_t> with = keys;
      with[at] = keys[at / 3];  // Repeats an earlier key.
      ASSERT_TRUE(table->FindDuplicateKey(with.data(), n, &dup)) << n << " " << at;
      EXPECT_EQ(dup, keys[at / 3]);
    }
  }
  uint64_t dup = 0;
  EXPECT_FALSE(table->FindDuplicateKey(nullptr, 0, &dup));
}

TEST(TableTest, EvalPullNeverInsertsAndReadsTheInitialValue) {
  TableConfig t = SgdTable(4, 0.1f);
  t.mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t.mutable_init()->set_scale(0.5f);
  auto table = MakeTable(t);
  const uint64_t key = 42;
  float eval[4], init[4], train[4];
  table->Pull(&key, 1, /*train=*/false, eval);
  EXPECT_FALSE(table->Contains(key));
  EXPECT_EQ(table->Counters().live_rows, 0u);
  table->InitialRow(key, init);
  table->Pull(&key, 1, /*train=*/true, train);
  EXPECT_TRUE(table->Contains(key));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(eval[i], init[i]);
    EXPECT_EQ(train[i], init[i]);
    EXPECT_LE(std::fabs(init[i]), 0.5f);
  }
}

TEST(TableTest, InitialRowsDependOnlyOnSeedAndKey) {
  for (auto kind : {InitializerConfig::UNIFORM, InitializerConfig::NORMAL}) {
    TableConfig t = SgdTable(16, 0.1f);
    t.mutable_init()->set_kind(kind);
    t.mutable_init()->set_scale(0.1f);
    auto a = MakeTable(t);
    auto b = MakeTable(t);
    t.set_seed(12);
    auto c = MakeTable(t);
    float ra[16], rb[16], rc[16], other[16];
    a->InitialRow(7, ra);
    b->InitialRow(7, rb);
    c->InitialRow(7, rc);
    a->InitialRow(8, other);
    EXPECT_EQ(0, std::memcmp(ra, rb, sizeof ra));
    EXPECT_NE(0, std::memcmp(ra, rc, sizeof ra));
    EXPECT_NE(0, std::memcmp(ra, other, sizeof ra));
  }
}

// Only pushes count (once per push); until admitted the key reads and trains
// the shared row; the admitted row starts at its initial value. More in
// admission_test.
TEST(TableTest, AdmissionCountsPushesBeforeCreatingTheRow) {
  TableConfig t = SgdTable(2, 1.0f);
  t.mutable_admission()->set_min_count(3);
  auto table = MakeTable(t);
  const uint64_t key = 5;
  const float grad[2] = {1, 1};
  float row[2];
  table->Pull(&key, 1, true, row);                  // A pull does not count.
  PushCounts c = table->Push(&key, 1, grad, 1.0f);  // 1: the shared row.
  EXPECT_EQ(c.applied, 0u);
  EXPECT_EQ(c.pending, 1u);
  EXPECT_FALSE(table->Contains(key));
  EXPECT_EQ(table->Counters().pending_rows, 1u);
  table->Pull(&key, 1, false, row);  // Eval reads the shared row.
  EXPECT_EQ(row[0], -1.0f);
  c = table->Push(&key, 1, grad, 1.0f);  // 2.
  EXPECT_EQ(c.applied, 0u);
  table->Pull(&key, 1, true, row);
  EXPECT_EQ(row[0], -2.0f);
  c = table->Push(&key, 1, grad, 1.0f);  // 3: admitted at 0, applied.
  EXPECT_EQ(c.applied, 1u);
  EXPECT_TRUE(table->Contains(key));
  table->Pull(&key, 1, false, row);
  EXPECT_EQ(row[0], -1.0f);
  const TableCounters counters = table->Counters();
  EXPECT_EQ(counters.pending_rows, 0u);
  EXPECT_EQ(counters.admitted_rows, 1u);
  EXPECT_EQ(counters.live_rows, 1u);
  EXPECT_EQ(counters.shared_updates, 2u);
}

TEST(TableTest, EvictionByClocksDropsIdleRows) {
  TableConfig t = SgdTable(2, 1.0f);
  t.mutable_eviction()->set_ttl_clocks(5);
  auto table = MakeTable(t);
  const uint64_t a = 1, b = 2;
  const float grad[2] = {1, 1};
  table->SetClock(1);
  table->Push(&a, 1, grad, 1.0f);
  table->Push(&b, 1, grad, 1.0f);
  table->SetClock(4);
  float row[2];
  table->Pull(&b, 1, true, row);      // b touched at clock 4.
  EXPECT_EQ(table->Evict(5, 0), 0u);  // a idle 4 clocks.
  EXPECT_EQ(table->Evict(6, 0), 1u);  // a idle 5 clocks: dropped.
  EXPECT_FALSE(table->Contains(a));
  EXPECT_TRUE(table->Contains(b));
  EXPECT_EQ(table->Evict(9, 0), 1u);
  const TableCounters c = table->Counters();
  EXPECT_EQ(c.live_rows, 0u);
  EXPECT_EQ(c.evicted_rows, 2u);
  // A later touch recreates the row at its initial value (zeros).
  table->Pull(&a, 1, true, row);
  EXPECT_EQ(row[0], 0.0f);
  EXPECT_EQ(table->Counters().live_rows, 1u);
}

TEST(TableTest, EvictionBySecondsDropsIdleRows) {
  TableConfig t = SgdTable(2, 1.0f);
  t.mutable_eviction()->set_ttl_seconds(100);
  auto table = MakeTable(t);
  const uint64_t a = 1;
  float row[2];
  table->Pull(&a, 1, true, row);
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  EXPECT_EQ(table->Evict(0, now), 0u);
  EXPECT_EQ(table->Evict(0, now + 200), 1u);
  EXPECT_FALSE(table->Contains(a));
}

TEST(TableTest, NoEvictionWithoutTtl) {
  auto table = MakeTable(SgdTable(2, 1.0f));
  const uint64_t a = 1;
  float row[2];
  table->Pull(&a, 1, true, row);
  EXPECT_EQ(table->Evict(1000000, 1LL << 40), 0u);
  EXPECT_TRUE(table->Contains(a));
}

TEST(TableTest, DenseModelTableWaitsForInitRows) {
  TableConfig t;
  t.set_id(9);
  t.set_name("mlp");
  t.set_kind(TableConfig::DENSE);
  t.set_dense_size(10);
  t.mutable_init()->set_kind(InitializerConfig::MODEL);
  t.mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
  auto created = Table::Create(t, 4);
  ASSERT_TRUE(created.ok());
  Table& table = **created;
  EXPECT_EQ(table.dim(), 4u);
  EXPECT_EQ(table.num_chunks(), 3u);  // 4 + 4 + 2 (padded to 4).
  const uint64_t chunk = 2;
  float row[4];
  table.Pull(&chunk, 1, true, row);
  EXPECT_FALSE(table.Contains(chunk));  // MODEL rows wait for InitRows.
  const float init[4] = {1, 2, 3, 4}, again[4] = {9, 9, 9, 9};
  EXPECT_EQ(table.InitRows(&chunk, 1, init), 1u);
  EXPECT_EQ(table.InitRows(&chunk, 1, again), 0u);  // Idempotent.
  table.Pull(&chunk, 1, true, row);
  EXPECT_EQ(row[3], 4.0f);
}

TEST(TableTest, StatsReportBytesPerRow) {
  auto table = MakeTable(SgdTable(16, 1.0f));
  std::vector<uint64_t> keys(10000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 1315423911u;
  std::vector<float> out(keys.size() * 16);
  table->Pull(keys.data(), keys.size(), true, out.data());
  const TableCounters c = table->Counters();
  EXPECT_EQ(c.live_rows, 10000u);
  EXPECT_GE(c.bytes_per_row, 64u);
  EXPECT_EQ(c.pulls, 1u);
}

TEST(TableTest, RowsRoundTripThroughPayloads) {
  TableConfig t = SgdTable(3, 0.5f);
  t.mutable_optimizer()->mutable_sgd()->set_momentum(0.5f);
  t.mutable_eviction()->set_ttl_clocks(100);
  auto a = MakeTable(t);
  const uint64_t keys[3] = {4, 5, 6};
  const float grads[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  a->SetClock(7);
  a->Push(keys, 3, grads, 1.0f);
  a->Push(keys, 3, grads, 1.0f);
  EXPECT_EQ(a->row_stride(), 3u + 3u + 3u);  // weights, momentum, meta.
  auto b = MakeTable(t);
  b->Push(keys, 1, grads, 1.0f);  // Overwritten by the restore.
  a->ForEachRow([&](uint64_t key, const float* payload) { b->RestoreRow(key, payload); });
  EXPECT_EQ(b->Counters().live_rows, 3u);
  // The last-touch clock (7) came along: at clock 106 nothing is idle for
  // 100 clocks (b's own clock is 0, so its own stamp would be).
  EXPECT_EQ(b->Evict(106, 0), 0u);
  // Same weights and momentum: one more identical push keeps them equal.
  a->Push(keys, 3, grads, 1.0f);
  b->Push(keys, 3, grads, 1.0f);
  float ra[9], rb[9];
  a->Pull(keys, 3, false, ra);
  b->Pull(keys, 3, false, rb);
  EXPECT_EQ(0, std::memcmp(ra, rb, sizeof ra));
  b->Clear();
  EXPECT_EQ(b->Counters().live_rows, 0u);
  EXPECT_FALSE(b->Contains(4));
}

// The keys ForEachChangedRow reports since `since`: rows and deletions.
struct Changes {
  std::set<uint64_t> rows, deleted;
};
Changes ChangedSince(const Table& table, uint32_t since) {
  Changes c;
  table.ForEachChangedRow(
      since, [&](uint64_t key, const float*) { EXPECT_TRUE(c.rows.insert(key).second); },
      [&](uint64_t key) { EXPECT_TRUE(c.deleted.insert(key).second); });
  return c;
}

TEST(TableTest, ChangeTrackingSeesPushesAndCreationsOnly) {
  auto table = MakeTable(SgdTable(2, 0.5f));
  const std::vector<uint64_t> keys = {1, 2, 3, 4};
  const std::vector<float> grads(8, 1.0f);
  table->Push(keys.data(), 4, grads.data(), 1.0f);
  const uint32_t g1 = table->AdvanceGeneration();
  EXPECT_EQ(ChangedSince(*table, g1).rows, (std::set<uint64_t>{}));
  EXPECT_EQ(ChangedSince(*table, 0).rows, (std::set<uint64_t>{1, 2, 3, 4}));

  table->Push(keys.data() + 1, 1, grads.data(), 1.0f);  // Key 2 changes.
  std::vector<float> out(4);
  const std::vector<uint64_t> pulled = {3, 9};
  table->Pull(pulled.data(), 2, /*train=*/true, out.data());  // 9 is created.
  table->Pull(keys.data(), 2, /*train=*/false, out.data());   // Nothing.
  const std::vector<uint64_t> init = {4, 10};
  table->InitRows(init.data(), 2, grads.data());  // 10 is created, 4 exists.
  EXPECT_EQ(ChangedSince(*table, g1).rows, (std::set<uint64_t>{2, 9, 10}));

  const uint32_t g2 = table->AdvanceGeneration();
  EXPECT_GT(g2, g1);
  EXPECT_TRUE(ChangedSince(*table, g2).rows.empty());
  // Still visible against the older generation.
  EXPECT_EQ(ChangedSince(*table, g1).rows, (std::set<uint64_t>{2, 9, 10}));
}

TEST(TableTest, ChangeTrackingLogsEvictionsAsDeletions) {
  TableConfig t = SgdTable(2, 0.5f);
  t.mutable_eviction()->set_ttl_clocks(2);
  auto table = MakeTable(t);
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> grads(6, 1.0f);
  table->SetClock(1);
  table->Push(keys.data(), 3, grads.data(), 1.0f);
  const uint32_t g1 = table->AdvanceGeneration();
  table->SetClock(3);
  std::vector<float> out(2);
  table->Pull(keys.data(), 1, /*train=*/true, out.data());  // Stamps key 1.
  EXPECT_EQ(table->Evict(3, 0), 2u);                        // Drops 2 and 3.
  table->Push(keys.data() + 2, 1, grads.data(), 1.0f);      // 3 is back.
  Changes c = ChangedSince(*table, g1);
  // A training touch rewrites the last-touch stamp: key 1 changed too.
  EXPECT_EQ(c.rows, (std::set<uint64_t>{1, 3}));
  EXPECT_EQ(c.deleted, (std::set<uint64_t>{2}));  // 3 is a row again.
  EXPECT_EQ(table->LoggedDeletions(), 2u);

  // Deleting and re-evicting: each key reported once.
  table->SetClock(10);
  EXPECT_EQ(table->Evict(10, 0), 2u);
  c = ChangedSince(*table, g1);
  EXPECT_EQ(c.deleted, (std::set<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(c.rows.empty());

  const uint32_t g2 = table->AdvanceGeneration();
  EXPECT_TRUE(ChangedSince(*table, g2).deleted.empty());
  table->TrimDeletions(g2);
  EXPECT_EQ(table->LoggedDeletions(), 0u);
}

TEST(TableTest, DeleteRowIsNotLoggedAndClearForgetsTheLog) {
  TableConfig t = SgdTable(2, 0.5f);
  t.mutable_eviction()->set_ttl_clocks(1);
  auto table = MakeTable(t);
  const std::vector<uint64_t> keys = {5, 6};
  const std::vector<float> grads(4, 1.0f);
  table->Push(keys.data(), 2, grads.data(), 1.0f);
  EXPECT_TRUE(table->DeleteRow(5));
  EXPECT_FALSE(table->DeleteRow(5));
  EXPECT_FALSE(table->Contains(5));
  EXPECT_EQ(table->LoggedDeletions(), 0u);
  EXPECT_EQ(table->Evict(5, 0), 1u);
  EXPECT_EQ(table->LoggedDeletions(), 1u);
  table->Clear();
  EXPECT_EQ(table->LoggedDeletions(), 0u);
}

}  // namespace
}  // namespace shardps
