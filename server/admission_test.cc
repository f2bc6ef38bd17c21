// Admission and shared unadmitted rows (table.h): a key counts once per
// push (in BSP once per rank whose push of the clock held it; a refused
// retry not at all), reads and trains its partition's shared row until
// admitted (its own row then starts at its initial value), and goes back to
// it when evicted;
// shared rows are one optimizer step per push with the summed gradient;
// they travel through FULL and DELTA checkpoints, onto the same servers
// bit for bit and onto another server count with each partition reading
// the row its server trained.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/codec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/core_test_config.h"
#include "server/helper_pool.h"
#include "server/parameter_server_core.h"
#include "server/snapshot_test_util.h"
#include "server/table.h"

namespace shardps {
namespace {

namespace ckpt = checkpoint;

TableConfig AdmissionTable(uint32_t min_count) {
  TableConfig t;
  t.set_id(3);
  t.set_name("emb");
  t.set_kind(TableConfig::SPARSE);
  t.set_dim(2);
  t.set_seed(11);
  t.mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t.mutable_init()->set_scale(0.5f);
  t.mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
  t.mutable_admission()->set_min_count(min_count);
  return t;
}

std::unique_ptr<Table> MakeTable(const TableConfig& t, uint32_t parts = 4096) {
  auto table = Table::Create(t, 4096, nullptr, parts);
  EXPECT_TRUE(table.ok()) << table.status();
  return std::move(*table);
}

std::vector<float> EvalPull(Table& table, uint64_t key) {
  std::vector<float> row(table.dim());
  table.Pull(&key, 1, /*train=*/false, row.data());
  return row;
}

// Two unadmitted keys in one push: one Adagrad step with g_a + g_b (not two
// steps), exactly what one row pushed that sum gets.
TEST(AdmissionTest, SharedRowTakesOneStepWithTheSummedGradient) {
  TableConfig t = AdmissionTable(5);
  t.mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.1f);
  t.mutable_optimizer()->mutable_adagrad()->set_initial_accumulator(0.1f);
  auto table = MakeTable(t);
  TableConfig r = t;
  r.clear_admission();
  r.mutable_init()->set_kind(InitializerConfig::ZEROS);  // Shared rows start at 0.
  auto reference = MakeTable(r);
  EXPECT_EQ(EvalPull(*table, 77), std::vector<float>({0, 0}));
  const uint64_t keys[2] = {10, 20};
  const float grads[4] = {0.5f, -1.0f, 0.25f, 2.0f};
  const PushCounts c = table->Push(keys, 2, grads, 1.0f);
  EXPECT_EQ(c.pending, 2u);
  EXPECT_EQ(c.applied, 0u);
  const uint64_t one = 1;
  const float sum[2] = {0.75f, 1.0f};
  reference->Push(&one, 1, sum, 1.0f);
  const std::vector<float> want = EvalPull(*reference, one);
  for (uint64_t key : {uint64_t{10}, uint64_t{20}, uint64_t{12345}}) {
    EXPECT_EQ(EvalPull(*table, key), want) << key;
  }
  std::vector<float> trained(2);
  table->Pull(keys, 1, /*train=*/true, trained.data());  // Creates nothing.
  EXPECT_EQ(trained, want);
  EXPECT_FALSE(table->Contains(10));
  EXPECT_EQ(table->Counters().shared_updates, 1u);
  EXPECT_EQ(table->Counters().shared_rows, 1u);
}

// Push's occurrences (the BSP path's ranks) count as that many batches.
TEST(AdmissionTest, OccurrencesCountAsThatManyBatches) {
  auto table = MakeTable(AdmissionTable(3));
  const uint64_t key = 9;
  const float grad[2] = {1, 1};
  const uint32_t two = 2;
  EXPECT_EQ(table->Push(&key, 1, grad, 1.0f, &two).pending, 1u);  // 2 of 3.
  EXPECT_FALSE(table->Contains(key));
  EXPECT_EQ(table->Push(&key, 1, grad, 1.0f, &two).applied, 1u);  // 4 >= 3.
  EXPECT_TRUE(table->Contains(key));
}

// Eviction sends an admitted key back to the shared row, counting from zero.
TEST(AdmissionTest, EvictionSendsAKeyBackToTheSharedRow) {
  TableConfig t = AdmissionTable(2);
  t.mutable_init()->set_kind(InitializerConfig::ZEROS);
  t.mutable_eviction()->set_ttl_clocks(2);
  auto table = MakeTable(t);
  const uint64_t key = 4, other = 8;
  const float grad[2] = {1, -1};
  table->SetClock(1);
  table->Push(&key, 1, grad, 1.0f);  // Shared: (-1, 1).
  table->Push(&key, 1, grad, 1.0f);  // Admitted at 0: (-1, 1).
  EXPECT_TRUE(table->Contains(key));
  EXPECT_EQ(EvalPull(*table, key), std::vector<float>({-1, 1}));
  table->Push(&other, 1, grad, 1.0f);  // Shared: (-2, 2).
  EXPECT_EQ(EvalPull(*table, other), std::vector<float>({-2, 2}));
  table->Push(&key, 1, grad, 1.0f);  // Own row: (-2, 2).
  EXPECT_EQ(EvalPull(*table, key), std::vector<float>({-2, 2}));
  EXPECT_EQ(table->Evict(3, 0), 1u);
  EXPECT_FALSE(table->Contains(key));
  EXPECT_EQ(EvalPull(*table, key), std::vector<float>({-2, 2}));
  EXPECT_EQ(table->Push(&key, 1, grad, 1.0f).pending, 1u);  // Counts from 0.
  EXPECT_FALSE(table->Contains(key));
  EXPECT_EQ(EvalPull(*table, key), std::vector<float>({-3, 3}));  // Shared.
}

// INITIAL: the older behaviour, each key its own initial value, gradients
// of unadmitted keys dropped; no shared rows anywhere.
TEST(AdmissionTest, InitialModeReadsInitialValuesAndDropsGradients) {
  TableConfig t = AdmissionTable(2);
  t.mutable_admission()->set_unadmitted(AdmissionConfig::INITIAL);
  auto table = MakeTable(t);
  EXPECT_FALSE(table->has_shared_rows());
  const uint64_t key = 6;
  std::vector<float> initial(2);
  table->InitialRow(key, initial.data());
  const float grad[2] = {1, 1};
  EXPECT_EQ(table->Push(&key, 1, grad, 1.0f).pending, 1u);
  EXPECT_EQ(EvalPull(*table, key), initial);
  EXPECT_EQ(table->Push(&key, 1, grad, 1.0f).applied, 1u);
  EXPECT_EQ(EvalPull(*table, key), std::vector<float>({initial[0] - 1, initial[1] - 1}));
  int shared = 0;
  table->ForEachSharedRow(std::nullopt, [&](uint32_t, uint64_t, const float*) { ++shared; });
  EXPECT_EQ(shared, 0);
}

// Each partition's reserved key lies in it; restoring one partition's record
// changes only what that partition's keys read, and creates no row.
TEST(AdmissionTest, SharedRowKeysAreInTheirPartitionsAndRestorePerPartition) {
  for (uint32_t parts : {1u, 7u, 4096u}) {
    auto table = MakeTable(AdmissionTable(2), parts);
    uint32_t listed = 0;
    table->ForEachSharedRow(std::nullopt, [&](uint32_t p, uint64_t key, const float* payload) {
      EXPECT_EQ(p, listed++);
      EXPECT_EQ(PartitionOf(table->id(), key, parts), p) << parts;
      EXPECT_EQ(key, table->SharedRowKey(p));
      EXPECT_EQ(payload[0], 0.0f);
    });
    EXPECT_EQ(listed, parts);
    const uint32_t target = parts / 2;
    std::vector<float> payload(table->row_stride(), 0.0f);
    payload[0] = 7;
    payload[1] = -7;
    table->RestoreRow(table->SharedRowKey(target), payload.data());
    EXPECT_FALSE(table->Contains(table->SharedRowKey(target)));
    EXPECT_EQ(table->Counters().live_rows, 0u);
    for (uint64_t key = 1; key < 200; ++key) {
      const bool in = PartitionOf(table->id(), key, parts) == target;
      EXPECT_EQ(EvalPull(*table, key),
                in ? std::vector<float>({7, -7}) : std::vector<float>({0, 0}))
          << "P " << parts << " key " << key;
    }
  }
}

// A block restored at once (Table::RestoreRows, the checkpoint restore's
// path) leaves a table as RestoreRow row by row does: rows created and
// overwritten, pending counts dropped, partitions' shared rows written, all
// of it changed since the last generation. From an unaligned buffer, with
// batches below and above the size the helpers split.
TEST(AdmissionTest, RestoreRowsIsRestoreRowForEachRow) {
  constexpr uint32_t kTableParts = 16;
  for (const size_t n : {size_t{7}, size_t{3000}}) {
    TableConfig config = AdmissionTable(3);
    config.mutable_eviction()->set_ttl_clocks(50);
    std::unique_ptr<Table> tables[2];
    for (auto& t : tables) {
      auto made = Table::Create(config, 4096, &HelperPool::Shared(), kTableParts);
      ASSERT_TRUE(made.ok()) << made.status();
      t = std::move(*made);
    }
    const size_t stride = tables[0]->row_stride();
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(1 + i * 7919);
    // The first half admitted (three pushes), the rest pending (one).
    const std::vector<float> grads(n * 2, 0.5f);
    for (auto& t : tables) {
      for (int push = 0; push < 3; ++push) {
        t->Push(keys.data(), push == 0 ? n : n / 2, grads.data(), 1.0f);
      }
      ASSERT_EQ(t->Counters().pending_rows, n - n / 2);
    }
    // The block: every key, then the shared rows of partitions 5 and 9.
    keys.push_back(tables[0]->SharedRowKey(5));
    keys.push_back(tables[0]->SharedRowKey(9));
    std::vector<float> payloads(keys.size() * stride);
    for (size_t i = 0; i < payloads.size(); ++i) payloads[i] = 0.25f * (i % 977) - 3.0f;
    std::vector<char> unaligned(payloads.size() * sizeof(float) + 1);
    std::memcpy(unaligned.data() + 1, payloads.data(), payloads.size() * sizeof(float));
    uint32_t generation[2];
    for (int t = 0; t < 2; ++t) generation[t] = tables[t]->AdvanceGeneration();
    for (size_t i = 0; i < keys.size(); ++i) {
      tables[0]->RestoreRow(keys[i], payloads.data() + i * stride);
    }
    tables[1]->RestoreRows(keys.data(), unaligned.data() + 1, keys.size());

    const TableCounters a = tables[0]->Counters(), b = tables[1]->Counters();
    EXPECT_EQ(b.live_rows, n);
    EXPECT_EQ(b.pending_rows, 0u);
    EXPECT_EQ(a.live_rows, b.live_rows);
    EXPECT_EQ(a.admitted_rows, b.admitted_rows);
    for (int t = 0; t < 2; ++t) {
      size_t changed = 0;
      tables[t]->ForEachChangedRow(
          generation[t], [&](uint64_t, const float*) { ++changed; }, [](uint64_t) {});
      EXPECT_EQ(changed, n) << "table " << t << ", n " << n;
      std::vector<uint32_t> shared;
      tables[t]->ForEachSharedRow(generation[t], [&](uint32_t p, uint64_t, const float* row) {
        shared.push_back(p);
        EXPECT_EQ(0, std::memcmp(row, payloads.data() + (n + (p == 5 ? 0 : 1)) * stride,
                                 stride * sizeof(float)));
      });
      EXPECT_EQ(shared, (std::vector<uint32_t>{5, 9})) << "table " << t;
    }
    // Weights and optimizer state as restored.
    const size_t width = tables[0]->dim() + tables[0]->state_size();
    std::vector<float> rows_a(n * width), rows_b(n * width);
    tables[0]->PullWithState(keys.data(), n, rows_a.data());
    tables[1]->PullWithState(keys.data(), n, rows_b.data());
    EXPECT_EQ(rows_a, rows_b);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(0, std::memcmp(rows_b.data() + i * width, payloads.data() + i * stride,
                               width * sizeof(float)))
          << "key " << keys[i];
    }
  }
}

// Pending admission counts carry their last change's generation (for
// deltas), a count evicted is logged as a deletion, and a restored count
// admits its key when the original would.
TEST(AdmissionTest, AdmissionCountsAreTrackedForDeltasAndRestored) {
  TableConfig t = AdmissionTable(3);
  t.mutable_eviction()->set_ttl_clocks(5);
  auto table = MakeTable(t);
  const std::vector<float> grad = {0.5f, -1.0f};
  const auto push = [&](Table& into, uint64_t key) { into.Push(&key, 1, grad.data(), 1.0f); };
  table->SetClock(0);
  push(*table, 3);
  push(*table, 1);
  const uint32_t cut = table->AdvanceGeneration();
  table->SetClock(8);
  push(*table, 1);
  push(*table, 2);
  EXPECT_EQ(table->Evict(10, 0), 0u);  // Key 3's pending count only: no row.
  std::map<uint64_t, std::pair<uint32_t, uint64_t>> all, changed;
  table->ForEachAdmissionCount(std::nullopt, [&](uint64_t key, const AdmissionCount& c) {
    all[key] = {c.count, c.last_clock};
  });
  table->ForEachAdmissionCount(cut, [&](uint64_t key, const AdmissionCount& c) {
    changed[key] = {c.count, c.last_clock};
  });
  using Count = std::pair<uint32_t, uint64_t>;
  EXPECT_EQ(all, (std::map<uint64_t, Count>{{1, {2, 8}}, {2, {1, 8}}}));
  EXPECT_EQ(changed, all);
  std::vector<uint64_t> deleted;
  table->ForEachChangedRow(
      cut, [](uint64_t, const float*) {}, [&](uint64_t key) { deleted.push_back(key); });
  EXPECT_EQ(deleted, std::vector<uint64_t>({3})) << "the evicted count is a deletion";
  changed.clear();
  const uint32_t later = table->AdvanceGeneration();
  table->ForEachAdmissionCount(later,
                               [&](uint64_t key, const AdmissionCount&) { changed[key] = {}; });
  EXPECT_TRUE(changed.empty());

  auto restored = MakeTable(t);
  restored->SetClock(8);
  table->ForEachAdmissionCount(std::nullopt, [&](uint64_t key, const AdmissionCount& c) {
    restored->RestoreAdmissionCounts(&key, &c, 1);
  });
  EXPECT_EQ(restored->Counters().pending_rows, 2u);
  for (Table* each : {table.get(), restored.get()}) {
    push(*each, 1);  // Count 3: admitted.
    push(*each, 2);  // Count 2.
    EXPECT_TRUE(each->Contains(1));
    EXPECT_FALSE(each->Contains(2));
    EXPECT_EQ(each->Counters().pending_rows, 1u);
  }
  EXPECT_EQ(EvalPull(*restored, 1), EvalPull(*table, 1));
  // A key with a row takes no count: a row is admitted. A batch of many
  // keys sets the rest.
  std::vector<uint64_t> keys = {1};
  std::vector<AdmissionCount> counts = {AdmissionCount{1, 0, 0}};
  for (uint64_t k = 100; k < 100 + 2 * Table::kParallelMinKeys; ++k) {
    keys.push_back(k);
    counts.push_back(AdmissionCount{static_cast<uint32_t>(k % 2 + 1), 0, k});
  }
  restored->RestoreAdmissionCounts(keys.data(), counts.data(), keys.size());
  EXPECT_EQ(restored->Counters().pending_rows, 1 + 2 * Table::kParallelMinKeys);
  std::map<uint64_t, std::pair<uint32_t, uint64_t>> got;
  restored->ForEachAdmissionCount(std::nullopt, [&](uint64_t key, const AdmissionCount& c) {
    if (key >= 100) got[key] = {c.count, c.last_clock};
  });
  ASSERT_EQ(got.size(), 2 * Table::kParallelMinKeys);
  for (const auto& [key, count] : got) {
    EXPECT_EQ(count, std::make_pair(static_cast<uint32_t>(key % 2 + 1), key)) << key;
  }
}

// ---- Through ParameterServerCore ----

constexpr uint32_t kParts = 16;
constexpr char kJob[] = "admission-test";

JobConfig CoreConfig(ConsistencyMode mode, uint32_t servers, uint32_t min_count) {
  JobConfig c;
  c.set_name(kJob);
  TableConfig* t = c.add_tables();
  *t = AdmissionTable(min_count);
  t->set_id(1);
  t->mutable_init()->set_kind(InitializerConfig::ZEROS);
  testing::SetTestCluster(&c, servers, /*workers=*/2, kParts, mode);
  return c;
}

std::unique_ptr<ParameterServerCore> MakeCore(const JobConfig& config, uint32_t index) {
  CoreOptions options;
  options.config = config;
  options.server_index = index;
  auto core = ParameterServerCore::Create(options);
  EXPECT_TRUE(core.ok()) << core.status();
  return std::move(*core);
}

// Keys 1.. whose owner under the contiguous map of `servers` is `server`.
std::vector<uint64_t> OwnedKeys(uint32_t servers, uint32_t server, size_t n, uint64_t from = 1) {
  auto map = PartitionMap::Contiguous(1, kParts, servers);
  std::vector<uint64_t> keys;
  for (uint64_t k = from; keys.size() < n; ++k) {
    if (map->ServerOf(1, k) == server) keys.push_back(k);
  }
  return keys;
}

PushRequest MakePush(uint32_t rank, uint64_t clock, const std::vector<uint64_t>& keys, float grad) {
  PushRequest p;
  p.set_map_version(1);
  p.set_worker_rank(rank);
  p.set_clock(clock);
  TableGradients* tg = p.add_tables();
  tg->set_table_id(1);
  std::vector<float> g(keys.size() * 2, grad);
  for (uint64_t k : keys) tg->add_keys(k);
  if (!g.empty()) EncodeValues(g.data(), g.size(), Encoding::kFp32, tg->mutable_gradients());
  return p;
}

std::vector<float> CorePull(ParameterServerCore& core, const std::vector<uint64_t>& keys,
                            uint64_t clock = 0) {
  PullRequest r;
  r.set_map_version(1);
  r.set_purpose(EVAL);
  r.set_clock(clock);
  TableKeys* tk = r.add_tables();
  tk->set_table_id(1);
  for (uint64_t k : keys) tk->add_keys(k);
  PullResponse resp;
  const absl::Status s = core.Pull(r, absl::InfiniteFuture(), &resp);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> out(keys.size() * 2);
  if (!out.empty()) {
    EXPECT_TRUE(
        DecodeValues(resp.tables(0).values(), Encoding::kFp32, out.size(), out.data()).ok());
  }
  return out;
}

// BSP: a clock counts each rank whose push held the key; a refused retry
// counts nothing; the shared row takes the mean of the ranks' sums.
TEST(AdmissionCoreTest, BspCountsEveryRanksPushOnceAndRetriesNotAtAll) {
  auto core = MakeCore(CoreConfig(BSP, 1, 4), 0);
  const std::vector<uint64_t> key = {42};
  PushResponse resp;
  ASSERT_TRUE(core->Push(MakePush(0, 0, key, 1.0f), &resp).ok());
  EXPECT_EQ(core->Push(MakePush(0, 0, key, 1.0f), &resp).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(core->Push(MakePush(1, 0, {}, 0.0f), &resp).ok());           // Count 1.
  EXPECT_EQ(CorePull(*core, key, 1), std::vector<float>({-0.5f, -0.5f}));  // -(1 + 0) / 2.
  ASSERT_TRUE(core->Push(MakePush(0, 1, key, 1.0f), &resp).ok());
  ASSERT_TRUE(core->Push(MakePush(1, 1, key, 3.0f), &resp).ok());  // Count 3.
  Table* table = core->store()->FindTable(1);
  EXPECT_FALSE(table->Contains(42));
  EXPECT_EQ(CorePull(*core, key, 2), std::vector<float>({-2.5f, -2.5f}));  // -0.5 - 4/2.
  ASSERT_TRUE(core->Push(MakePush(0, 2, key, 1.0f), &resp).ok());
  ASSERT_TRUE(core->Push(MakePush(1, 2, key, 1.0f), &resp).ok());  // Count 5: admitted.
  EXPECT_TRUE(table->Contains(42));
  EXPECT_EQ(CorePull(*core, key, 3), std::vector<float>({-1.0f, -1.0f}));   // From 0.
  EXPECT_EQ(CorePull(*core, {43}, 3), std::vector<float>({-2.5f, -2.5f}));  // Shared.
}

// A checkpoint at `clock` on every core (a DELTA on `base` if given) and its
// manifest, as the scheduler writes them.
ckpt::CheckpointManifest Checkpoint(std::vector<std::unique_ptr<ParameterServerCore>>& cores,
                                    const std::string& root, uint64_t clock,
                                    const ckpt::CheckpointManifest* base) {
  return testing::CheckpointCores(cores, root, clock, base, kJob, kParts);
}

void Restore(ParameterServerCore& core, const std::string& root, uint64_t clock) {
  core.SetCheckpointRoot(root);
  RestoreRequest request;
  request.set_clock(clock);
  RestoreResponse response;
  const absl::Status st = core.Restore(request, &response);
  ASSERT_TRUE(st.ok()) << st;
}

// Two ASP servers train different shared rows; a FULL checkpoint, more
// training, a DELTA. Restored onto two servers: every shared row bit for
// bit. Restored onto one server: unseen keys of each old server's
// partitions read that server's row, and both keep training apart.
TEST(AdmissionCoreTest, SharedRowsTravelThroughFullAndDeltaCheckpoints) {
  const std::string root = ::testing::TempDir() + "/admission_ckpt";
  ASSERT_TRUE(ckpt::RemoveAll(root).ok());
  const JobConfig config = CoreConfig(ASP, 2, 3);
  std::vector<std::unique_ptr<ParameterServerCore>> cores;
  for (uint32_t s = 0; s < 2; ++s) cores.push_back(MakeCore(config, s));
  PushResponse resp;
  for (uint32_t s = 0; s < 2; ++s) {  // Server s: gradient s + 1 on 4 keys.
    ASSERT_TRUE(cores[s]->Push(MakePush(0, 0, OwnedKeys(2, s, 4), s + 1.0f), &resp).ok());
  }
  const ckpt::CheckpointManifest full = Checkpoint(cores, root, 1, nullptr);
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_TRUE(cores[s]->Push(MakePush(0, 1, OwnedKeys(2, s, 1), 0.5f), &resp).ok());
  }
  Checkpoint(cores, root, 2, &full);
  // Unseen keys of each server: shared rows -4(s+1) - 0.5.
  std::vector<std::vector<uint64_t>> unseen = {OwnedKeys(2, 0, 3, 1000), OwnedKeys(2, 1, 3, 1000)};
  const std::vector<float> want0 = CorePull(*cores[0], unseen[0]);
  const std::vector<float> want1 = CorePull(*cores[1], unseen[1]);
  EXPECT_EQ(want0[0], -4.5f);
  EXPECT_EQ(want1[0], -8.5f);
  for (uint32_t s = 0; s < 2; ++s) {
    auto again = MakeCore(config, s);
    Restore(*again, root, 2);
    EXPECT_EQ(CorePull(*again, unseen[s]), s == 0 ? want0 : want1) << s;
  }
  auto one = MakeCore(CoreConfig(ASP, 1, 3), 0);
  Restore(*one, root, 2);
  EXPECT_EQ(CorePull(*one, unseen[0]), want0);
  EXPECT_EQ(CorePull(*one, unseen[1]), want1);
  EXPECT_EQ(one->store()->FindTable(1)->Counters().shared_rows, 2u);
  ASSERT_TRUE(one->Push(MakePush(0, 2, {unseen[1][0]}, 1.0f), &resp).ok());
  EXPECT_EQ(CorePull(*one, unseen[0]), want0);  // Only server 1's row moved.
  EXPECT_EQ(CorePull(*one, {unseen[1][1]})[0], -9.5f);
}

// Pending counts travel through FULL and DELTA checkpoints: a server
// restored from the chain admits each key on the same push as the one that
// wrote it, for counts of the full link unchanged since (`early`) as for
// counts of the delta (`late`).
TEST(AdmissionCoreTest, AdmissionCountsTravelThroughFullAndDeltaCheckpoints) {
  const std::string root = ::testing::TempDir() + "/admission_counts_ckpt";
  ASSERT_TRUE(ckpt::RemoveAll(root).ok());
  const JobConfig config = CoreConfig(ASP, 1, 3);
  std::vector<std::unique_ptr<ParameterServerCore>> cores;
  cores.push_back(MakeCore(config, 0));
  const std::vector<uint64_t> early = OwnedKeys(1, 0, 5), late = OwnedKeys(1, 0, 5, 1000);
  PushResponse resp;
  ASSERT_TRUE(cores[0]->Push(MakePush(0, 0, early, 1.0f), &resp).ok());
  ASSERT_TRUE(cores[0]->Push(MakePush(1, 0, early, 1.0f), &resp).ok());  // Count 2.
  const ckpt::CheckpointManifest full = Checkpoint(cores, root, 1, nullptr);
  ASSERT_TRUE(cores[0]->Push(MakePush(0, 1, late, 1.0f), &resp).ok());  // Count 1.
  Checkpoint(cores, root, 2, &full);
  auto restored = MakeCore(config, 0);
  Restore(*restored, root, 2);
  for (ParameterServerCore* core : {cores[0].get(), restored.get()}) {
    Table* table = core->store()->FindTable(1);
    EXPECT_EQ(table->Counters().pending_rows, 10u);
    ASSERT_TRUE(core->Push(MakePush(0, 2, early, 1.0f), &resp).ok());  // Count 3: admitted.
    ASSERT_TRUE(core->Push(MakePush(0, 2, late, 1.0f), &resp).ok());   // Count 2.
    ASSERT_TRUE(core->Push(MakePush(1, 2, late, 1.0f), &resp).ok());   // Count 3: admitted.
    for (uint64_t key : early) EXPECT_TRUE(table->Contains(key)) << key;
    for (uint64_t key : late) EXPECT_TRUE(table->Contains(key)) << key;
    EXPECT_EQ(table->Counters().pending_rows, 0u);
  }
  EXPECT_EQ(CorePull(*restored, early), CorePull(*cores[0], early));
  EXPECT_EQ(CorePull(*restored, late), CorePull(*cores[0], late));
}

}  // namespace
}  // namespace shardps
