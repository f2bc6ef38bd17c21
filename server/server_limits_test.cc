// What one request may cost a ParameterServerCore (server/request_limits.h)
// and what clocks pushes may claim: keys per request, the order of the
// checks (refusals before any expansion), dense chunk ranges without
// dense_size, gradient magnitudes, and eviction clocks bounded by the
// scheduler's grants. No network.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/codec.h"
#include "gtest/gtest.h"
#include "server/core_test_config.h"
#include "server/parameter_server_core.h"
#include "server/request_limits.h"

namespace shardps {
namespace {

constexpr uint32_t kParts = 8;
constexpr uint32_t kBatch = 4;  // x 26 Criteo fields = 104 keys per request.

JobConfig Config() {
  JobConfig c;
  c.mutable_training()->set_batch_size(kBatch);
  TableConfig* t = testing::AddSparseTable(&c, 1, "emb");
  t->mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.1f);
  t->mutable_eviction()->set_ttl_clocks(128);
  TableConfig* s = c.add_tables();
  *s = *t;
  s->set_id(2);
  s->set_name("skip");
  s->set_non_finite(SKIP_AND_COUNT);
  TableConfig* d = c.add_tables();
  d->set_id(3);
  d->set_name("mlp");
  d->set_kind(TableConfig::DENSE);
  d->mutable_init()->set_kind(InitializerConfig::ZEROS);
  d->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  ModelConfig* m = c.mutable_model();
  m->add_bottom_mlp(16);
  m->add_bottom_mlp(4);
  m->add_top_mlp(8);
  m->set_dense_table("mlp");
  testing::SetTestCluster(&c, /*servers=*/1, /*workers=*/2, kParts, ASP)->set_dense_chunk_size(64);
  return c;
}

std::unique_ptr<ParameterServerCore> MakeCore(const JobConfig& config = Config()) {
  CoreOptions options;
  options.config = config;
  auto core = ParameterServerCore::Create(options);
  EXPECT_TRUE(core.ok()) << core.status();
  return core.ok() ? std::move(*core) : nullptr;
}

std::vector<uint64_t> Keys(uint64_t first, size_t n) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(first + i);
  return keys;
}

PushRequest MakePush(uint64_t clock, uint32_t table, const std::vector<uint64_t>& keys,
                     const std::vector<float>& grads) {
  PushRequest p;
  p.set_map_version(1);
  p.set_clock(clock);
  TableGradients* tg = p.add_tables();
  tg->set_table_id(table);
  for (uint64_t k : keys) tg->add_keys(k);
  if (!grads.empty())
    EncodeValues(grads.data(), grads.size(), Encoding::kFp32, tg->mutable_gradients());
  return p;
}

PullRequest MakePull(PullPurpose purpose, uint32_t table, const std::vector<uint64_t>& keys) {
  PullRequest r;
  r.set_map_version(1);
  r.set_purpose(purpose);
  TableKeys* tk = r.add_tables();
  tk->set_table_id(table);
  for (uint64_t k : keys) tk->add_keys(k);
  return r;
}

std::string Rows(ParameterServerCore& core, uint32_t table, const std::vector<uint64_t>& keys) {
  PullResponse resp;
  const absl::Status s = core.Pull(MakePull(EVAL, table, keys), absl::InfiniteFuture(), &resp);
  EXPECT_TRUE(s.ok()) << s;
  return resp.tables_size() ? resp.tables(0).values() : "";
}

uint64_t LiveRows(ParameterServerCore& core, uint32_t table) {
  return core.store()->FindTable(table)->Counters().live_rows;
}

TEST(ServerLimitsTest, KeysPerRequestAreBoundedByTheBatch) {
  auto core = MakeCore();
  const uint64_t limit = uint64_t{kBatch} * 26;
  ASSERT_EQ(core->store()->FindTable(1)->config().max_keys_per_request(), limit);
  const std::vector<uint64_t> many = Keys(1, limit + 1);
  PushResponse resp;
  absl::Status st =
      core->Push(MakePush(0, 1, many, std::vector<float>(many.size() * 4, 0.1f)), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("max_keys_per_request 104"), std::string::npos) << st;
  PullResponse pulled;
  st = core->Pull(MakePull(TRAIN, 1, many), absl::InfiniteFuture(), &pulled);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  InitRowsRequest init;
  init.set_map_version(1);
  init.set_table_id(1);
  for (uint64_t k : many) init.add_keys(k);
  const std::vector<float> values(many.size() * 4, 1.0f);
  EncodeValues(values.data(), values.size(), Encoding::kFp32, init.mutable_values());
  InitRowsResponse init_resp;
  st = core->InitRows(init, &init_resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(LiveRows(*core, 1), 0u) << "a refused request created rows";
  // An evaluation pull creates nothing and is not bounded by it.
  EXPECT_EQ(Rows(*core, 1, many).size(), many.size() * 4 * sizeof(float));
  // The bound itself is allowed.
  const std::vector<uint64_t> batch = Keys(1, limit);
  EXPECT_TRUE(
      core->Push(MakePush(0, 1, batch, std::vector<float>(batch.size() * 4, 0.1f)), &resp).ok());
  EXPECT_EQ(LiveRows(*core, 1), limit);
}

// A sparse push that the server refuses for its generation or map costs no
// expansion: the refusal comes first (the expansion's own error, here
// malformed index gaps, is not reached).
TEST(ServerLimitsTest, RefusalsComeBeforeTheSparseExpansion) {
  auto core = MakeCore();
  PushRequest p = MakePush(0, 1, Keys(1, 100), {});
  SparseGradients* sparse = p.mutable_tables(0)->mutable_sparse();
  sparse->add_index_gaps(1u << 30);  // Far outside the 400 values.
  const float v = 1.0f;
  EncodeValues(&v, 1, Encoding::kFp32, sparse->mutable_values());
  PushResponse resp;
  p.set_map_version(7);
  EXPECT_EQ(core->Push(p, &resp).code(), absl::StatusCode::kAborted);
  p.set_map_version(1);
  p.set_generation(3);
  EXPECT_EQ(core->Push(p, &resp).code(), absl::StatusCode::kUnavailable);
  p.set_generation(0);
  const absl::Status st = core->Push(p, &resp);  // Now it is expanded, and refused.
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // More keys than the bound: refused before the 64 MiB expansion is sized.
  PushRequest big = MakePush(0, 1, Keys(1, 1 << 20), {});
  big.mutable_tables(0)->mutable_sparse();
  const absl::Status too_many = core->Push(big, &resp);
  EXPECT_NE(too_many.message().find("max_keys_per_request"), std::string::npos) << too_many;
  EXPECT_EQ(LiveRows(*core, 1), 0u);
}

TEST(ServerLimitsTest, DenseChunksAreBoundedByTheModelWithoutDenseSize) {
  const JobConfig config = Config();
  // bottom 13 -> 16 -> 4, top (4 + 27 * 26 / 2) -> 8 -> 1.
  const uint64_t params = (13 * 16 + 16) + (16 * 4 + 4) + (355 * 8 + 8) + (8 + 1);
  ASSERT_EQ(ModelDenseParams(config), params);
  auto core = MakeCore(config);
  const uint64_t chunks = (params + 63) / 64;
  ASSERT_EQ(core->store()->FindTable(3)->num_chunks(), chunks);
  PushResponse resp;
  for (uint64_t chunk : {chunks, uint64_t{1000000}, UINT64_MAX}) {
    const absl::Status st =
        core->Push(MakePush(0, 3, {chunk}, std::vector<float>(64, 0.5f)), &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << chunk << ": " << st;
    EXPECT_NE(st.message().find("out of range"), std::string::npos) << st;
    PullResponse pulled;
    EXPECT_EQ(core->Pull(MakePull(EVAL, 3, {chunk}), absl::InfiniteFuture(), &pulled).code(),
              absl::StatusCode::kInvalidArgument)
        << chunk;
  }
  EXPECT_EQ(LiveRows(*core, 3), 0u);
  EXPECT_TRUE(core->Push(MakePush(0, 3, {chunks - 1}, std::vector<float>(64, 0.5f)), &resp).ok());
  // A dense table the config does not size: as many chunks as one message.
  JobConfig other = config;
  other.mutable_model()->clear_dense_table();
  auto unsized = MakeCore(other);
  EXPECT_EQ(unsized->store()->FindTable(3)->num_chunks(), (64u << 20) / 4 / 64);
}

TEST(ServerLimitsTest, AbsurdGradientsFollowTheNonFinitePolicy) {
  auto core = MakeCore();
  const std::vector<uint64_t> keys = {1, 2};
  PushResponse resp;
  ASSERT_TRUE(core->Push(MakePush(0, 1, keys, std::vector<float>(8, 0.1f)), &resp).ok());
  ASSERT_TRUE(core->Push(MakePush(0, 2, keys, std::vector<float>(8, 0.1f)), &resp).ok());
  const std::string rejected = Rows(*core, 1, keys), skipped = Rows(*core, 2, keys);
  std::vector<float> absurd(8, 0.1f);
  absurd[1] = 3e38f;  // Key 1's row; key 2's is normal.
  // REJECT: the push is refused, nothing changes.
  absl::Status st = core->Push(MakePush(1, 1, keys, absurd), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("beyond max_gradient_abs 1e+06"), std::string::npos) << st;
  EXPECT_EQ(Rows(*core, 1, keys), rejected);
  absurd[1] = -1.5e6f;
  EXPECT_FALSE(core->Push(MakePush(1, 1, keys, absurd), &resp).ok());
  // SKIP_AND_COUNT: key 1's row is skipped and counted, key 2's applies.
  resp.Clear();
  ASSERT_TRUE(core->Push(MakePush(1, 2, keys, absurd), &resp).ok());
  EXPECT_EQ(resp.rows_applied(), 1u);
  EXPECT_EQ(resp.rows_skipped_nonfinite(), 1u);
  const std::string after = Rows(*core, 2, keys);
  EXPECT_EQ(after.substr(0, 16), skipped.substr(0, 16)) << "the skipped row moved";
  EXPECT_NE(after.substr(16), skipped.substr(16));
  // The row is not frozen: a normal push still moves it (Adagrad's
  // accumulator never saw 3e38 squared).
  ASSERT_TRUE(core->Push(MakePush(2, 2, keys, std::vector<float>(8, 0.1f)), &resp).ok());
  EXPECT_NE(Rows(*core, 2, keys).substr(0, 16), after.substr(0, 16));
  // The bound itself passes.
  std::vector<float> edge(8, 0.1f);
  edge[0] = -1e6f;
  EXPECT_TRUE(core->Push(MakePush(3, 1, keys, edge), &resp).ok());
}

// Without the scheduler's grant, ceil(ttl / 64) + 1 pushes with clock
// 2^64-1 would age every row out; with it, no number of them does.
TEST(ServerLimitsTest, PushedClocksCannotAgeRowsPastTheGrantedClock) {
  auto core = MakeCore();
  core->GrantClock(0);
  const std::vector<uint64_t> keys = Keys(1, 50);
  PushResponse resp;
  for (uint64_t clock = 0; clock < 5; ++clock) {
    ASSERT_TRUE(core->Push(MakePush(clock, 1, keys, std::vector<float>(200, 0.1f)), &resp).ok());
    core->GrantClock(clock);
  }
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(
        core->Push(MakePush(UINT64_MAX, 1, {1000}, std::vector<float>(4, 0.1f)), &resp).ok());
  }
  EXPECT_EQ(core->eviction_clock(), 4u);
  EXPECT_EQ(core->Evict(), 0u);
  EXPECT_EQ(LiveRows(*core, 1), 51u);
  // The job really runs 128 clocks past the last touch: the rows go (key
  // 1000's, stamped with a claimed clock far ahead, stays).
  core->GrantClock(4 + 127);
  EXPECT_EQ(core->Evict(), 0u);
  core->GrantClock(4 + 128);
  EXPECT_EQ(core->Evict(), 50u);
  EXPECT_EQ(LiveRows(*core, 1), 1u);
}

// Without a scheduler (no grants) a push still moves the eviction clock 64
// clocks at most.
TEST(ServerLimitsTest, WithoutGrantsAPushMovesTheEvictionClockBoundedly) {
  auto core = MakeCore();
  PushResponse resp;
  ASSERT_TRUE(core->Push(MakePush(UINT64_MAX, 1, {1}, std::vector<float>(4, 0.1f)), &resp).ok());
  EXPECT_EQ(core->eviction_clock(), 64u);
}

TEST(RequestLimitsTest, DerivedKeyBounds) {
  JobConfig c = Config();
  auto resolved = [&](int i) {
    auto t = ResolveLimits(c, c.tables(i));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : TableConfig();
  };
  EXPECT_EQ(resolved(0).max_keys_per_request(), kBatch * 26u);  // The Criteo fields.
  EXPECT_EQ(resolved(1).max_keys_per_request(), kBatch);        // No field feeds it.
  EXPECT_EQ(resolved(0).max_gradient_abs(), kDefaultMaxGradientAbs);
  for (const char* table : {"emb", "skip", "skip"}) {
    FieldConfig* f = c.add_fields();
    f->set_name(absl::StrCat("f", c.fields_size()));
    f->set_table(table);
  }
  EXPECT_EQ(resolved(0).max_keys_per_request(), kBatch * 1u);
  EXPECT_EQ(resolved(1).max_keys_per_request(), kBatch * 2u);
  c.mutable_data()->set_format(DataConfig::TSV_MULTIHOT);
  EXPECT_EQ(resolved(1).max_keys_per_request(), kBatch * 2u * kMultiHotKeysPerField);
  c.mutable_tables(1)->set_max_keys_per_request(7);
  c.mutable_tables(1)->set_max_gradient_abs(5);
  EXPECT_EQ(resolved(1).max_keys_per_request(), 7u);
  EXPECT_EQ(resolved(1).max_gradient_abs(), 5.0f);
  c.mutable_tables(2)->set_dense_size(100);
  EXPECT_EQ(resolved(2).dense_size(), 100u);
  for (float bad : {-1.0f, NAN, INFINITY}) {
    c.mutable_tables(0)->set_max_gradient_abs(bad);
    EXPECT_EQ(ResolveLimits(c, c.tables(0)).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(RequestLimitsTest, AWideTableIsFedByTheCriteoFieldsAndLeavesTheMlpAlone) {
  JobConfig c = Config();
  const uint64_t dense = ModelDenseParams(c);
  c.mutable_tables(1)->set_dim(1);
  c.mutable_model()->set_wide_table(c.tables(1).name());
  auto wide = ResolveLimits(c, c.tables(1));
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->max_keys_per_request(), kBatch * 26u);
  auto emb = ResolveLimits(c, c.tables(0));
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(emb->max_keys_per_request(), kBatch * 26u);
  EXPECT_EQ(ModelDenseParams(c), dense);  // Its fields are not interaction vectors.
}

TEST(RequestLimitsTest, FirstBeyond) {
  const uint32_t bound = MagnitudeBits(10.0f);
  std::vector<float> v(200, 1.0f);
  v[3] = -10.0f;
  v[4] = 10.0f;
  EXPECT_EQ(FirstBeyond(v.data(), v.size(), bound), v.size());
  for (float bad : {10.001f, -11.0f, 3e38f, INFINITY, -INFINITY, NAN}) {
    v[150] = bad;
    EXPECT_EQ(FirstBeyond(v.data(), v.size(), bound), 150u) << bad;
  }
  EXPECT_EQ(FirstBeyond(v.data(), 150, bound), 150u);
}

// Every position and length, so the vector rounds, the value-by-value tail
// and the search inside a bad round are all crossed; the first bad value wins.
TEST(RequestLimitsTest, FirstBeyondEveryPositionAndLength) {
  const uint32_t bound = MagnitudeBits(10.0f);
  for (size_t n = 0; n <= 70; ++n) {
    std::vector<float> v(n, -9.5f);
    ASSERT_EQ(FirstBeyond(v.data(), n, bound), n);
    for (size_t at = 0; at < n; ++at) {
      for (float bad : {10.001f, -11.0f, INFINITY, -INFINITY, NAN, -NAN}) {
        v[at] = bad;
        ASSERT_EQ(FirstBeyond(v.data(), n, bound), at) << "n " << n << " bad " << bad;
        if (at + 1 < n) {
          v[n - 1] = bad;  // A second bad value later changes nothing.
          ASSERT_EQ(FirstBeyond(v.data(), n, bound), at) << "n " << n << " bad " << bad;
          v[n - 1] = -9.5f;
        }
        v[at] = 10.0f;  // At the bound is within.
        ASSERT_EQ(FirstBeyond(v.data(), n, bound), n);
        v[at] = -9.5f;
      }
    }
  }
  // The largest bound: only NaN's bits are above it.
  const uint32_t widest = MagnitudeBits(std::numeric_limits<float>::max());
  std::vector<float> v(40, 3e38f);
  EXPECT_EQ(FirstBeyond(v.data(), v.size(), widest), v.size());
  v[33] = INFINITY;
  EXPECT_EQ(FirstBeyond(v.data(), v.size(), widest), 33u);
  // A bound no magnitude can pass.
  v[20] = NAN;
  EXPECT_EQ(FirstBeyond(v.data(), v.size(), 0x7fffffffu), v.size());
}

}  // namespace
}  // namespace shardps
