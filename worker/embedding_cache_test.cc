#include "worker/embedding_cache.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/config.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Positions = std::vector<std::vector<uint32_t>>;

constexpr uint32_t kDim = 4;

JobConfig Config(const std::string& optimizer, const std::string& extra = "") {
  auto config = ParseJobConfig(R"pb(
    name: "t"
    tables { id: 1 name: "emb" kind: SPARSE dim: 4 seed: 1 init { kind: UNIFORM scale: 0.1 }
             optimizer { )pb" + optimizer +
                                   R"pb( } )pb" + extra + R"pb( }
    tables { id: 2 name: "mlp" kind: DENSE seed: 2 optimizer { sgd { learning_rate: 0.1 } } }
    fields { name: "f" column: 14 table: "emb" }
    model { kind: DLRM bottom_mlp: [4] top_mlp: [4] dense_table: "mlp" }
    data { train_files: "x" }
    cluster { mode: SSP staleness: 2 }
  )pb",
                               "test");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

std::unique_ptr<EmbeddingCache> Cache(EmbeddingCache::Options o,
                                      const std::string& optimizer = "sgd { learning_rate: 0.5 }",
                                      const std::string& extra = "") {
  auto cache = EmbeddingCache::Create(o, Config(optimizer, extra), {{1, kDim}});
  EXPECT_TRUE(cache.ok()) << cache.status();
  return *std::move(cache);
}

// A row of width w whose weights are v, v+1, ... and state 1, 1, ...
std::vector<float> Row(const EmbeddingCache& c, float v) {
  std::vector<float> row(c.width(0), 1.0f);
  for (uint32_t i = 0; i < kDim; ++i) row[i] = v + i;
  return row;
}

// Plans `keys` for `step`: the hit positions.
std::vector<uint32_t> Hits(EmbeddingCache* c, uint64_t step, const std::vector<uint64_t>& keys,
                           std::optional<uint64_t> known_min = std::nullopt) {
  Positions hit, miss;
  c->PlanStep(step, known_min, {keys}, &hit, &miss);
  EXPECT_EQ(hit[0].size() + miss[0].size(), keys.size());
  return hit[0];
}

TEST(EmbeddingCacheTest, ServesARowOnlyWhileItsReadClockIsWithinTheStaleness) {
  EmbeddingCache::Options o;
  o.staleness = 2;
  auto c = Cache(o);
  const std::vector<float> row = Row(*c, 1.0f);
  c->Insert(0, std::vector<uint64_t>{7}.data(), 1, row.data(), /*read_clock=*/10);
  // Read when every worker had ticked 10: it holds every push of steps < 10,
  // what a pull for step 12 under SSP(2) must hold, not one for step 13.
  EXPECT_THAT(Hits(c.get(), 11, {7, 8}), ElementsAre(0));
  EXPECT_THAT(Hits(c.get(), 12, {8, 7}), ElementsAre(1));
  EXPECT_THAT(Hits(c.get(), 13, {7}), ElementsAre());
}

// A key seen for the first time is not worth its state: most ids of a long
// tail occur once. Asked for, the plan puts it apart (pulled without state,
// not cached); seen before, or cached but stale, it is a miss to cache.
TEST(EmbeddingCacheTest, AKeySeenForTheFirstTimeIsColdWhenAskedFor) {
  EmbeddingCache::Options o;
  o.staleness = 1;
  auto c = Cache(o);
  c->Insert(0, std::vector<uint64_t>{9}.data(), 1, Row(*c, 1.0f).data(), 0);
  const std::vector<uint64_t> keys = {5, 9};
  Positions hit, miss, cold;
  c->PlanStep(3, std::nullopt, {keys}, &hit, &miss, &cold);  // 9: cached, stale.
  EXPECT_THAT(hit[0], ElementsAre());
  EXPECT_THAT(miss[0], ElementsAre(1));
  EXPECT_THAT(cold[0], ElementsAre(0));
  hit.clear(), miss.clear(), cold.clear();
  c->PlanStep(4, std::nullopt, {keys}, &hit, &miss, &cold);  // 5: seen at step 3.
  EXPECT_THAT(miss[0], ElementsAre(0, 1));
  EXPECT_THAT(cold[0], ElementsAre());
  // Without `cold` every miss is to be cached.
  hit.clear(), miss.clear();
  c->PlanStep(5, std::nullopt, {std::vector<uint64_t>{77}}, &hit, &miss);
  EXPECT_THAT(miss[0], ElementsAre(0));
}

TEST(EmbeddingCacheTest, FillCopiesTheHitsWeightsAndCountsThem) {
  EmbeddingCache::Options o;
  o.staleness = 2;
  auto c = Cache(o, "rowwise_adagrad { learning_rate: 0.1 }");
  ASSERT_EQ(c->state(0), 1u);
  const std::vector<float> a = Row(*c, 1.0f), b = Row(*c, 5.0f);
  c->Insert(0, std::vector<uint64_t>{3}.data(), 1, a.data(), 9);
  c->Insert(0, std::vector<uint64_t>{4}.data(), 1, b.data(), 10);
  const std::vector<uint64_t> keys = {4, 5, 3};
  Positions hit, miss;
  c->PlanStep(11, 10, {keys}, &hit, &miss);
  EXPECT_THAT(hit[0], ElementsAre(0, 2));
  EXPECT_THAT(miss[0], ElementsAre(1));
  std::vector<std::vector<float>> rows = {std::vector<float>(3 * kDim, -1.0f)};
  ASSERT_TRUE(c->Fill(11, {keys}, hit, &rows).ok());
  EXPECT_THAT(rows[0], ElementsAre(5, 6, 7, 8, -1, -1, -1, -1, 1, 2, 3, 4));
  const EmbeddingCache::Stats s = c->stats();
  EXPECT_EQ(s.lookups, 3u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.bytes_saved, 2u * (8 + 4 * kDim));
  EXPECT_EQ(s.staleness_sum, (11u - 10) + (11u - 9));
  EXPECT_EQ(s.staleness_max, 2u);
  EXPECT_EQ(s.rows, 2u);
  EXPECT_EQ(s.bytes, 2 * (4 * (kDim + 1) + EmbeddingCache::kEntryBytes));
}

// The worker's own push reaches its cached rows exactly as the server's
// optimizer applies it: weights and state, bit for bit.
TEST(EmbeddingCacheTest, ApplyPushIsTheServersUpdate) {
  for (const std::string opt :
       {"sgd { learning_rate: 0.5 momentum: 0.9 }", "adagrad { learning_rate: 0.1 }",
        "rowwise_adagrad { learning_rate: 0.15 initial_accumulator: 3e-6 }",
        "adam { learning_rate: 0.01 }", "ftrl { alpha: 0.1 l1: 0.01 }"}) {
    SCOPED_TRACE(opt);
    EmbeddingCache::Options o;
    o.staleness = 2;
    auto c = Cache(o, opt);
    const JobConfig config = Config(opt);
    auto server = Optimizer::Create(config.tables(0).optimizer(), kDim);
    ASSERT_TRUE(server.ok());
    std::vector<float> expect(c->width(0));
    for (uint32_t i = 0; i < kDim; ++i) expect[i] = 0.01f * (i + 1);
    (*server)->InitState(expect.data() + kDim);
    c->Insert(0, std::vector<uint64_t>{42}.data(), 1, expect.data(), 0);
    const std::vector<uint64_t> keys = {41, 42};  // 41 is not cached: ignored.
    for (int step = 0; step < 3; ++step) {
      std::vector<float> grads = {1, 2, 3, 4, 0.1f, -0.2f * step, 0.3f, -0.4f};
      c->ApplyPush(0, keys.data(), 2, grads.data(), 0.5f);
      (*server)->Update(expect.data(), expect.data() + kDim, grads.data() + kDim, 0.5f);
    }
    std::vector<float> got;
    uint64_t read_clock = 99;
    ASSERT_TRUE(c->Peek(0, 42, &got, &read_clock));
    EXPECT_EQ(read_clock, 0u);
    ASSERT_EQ(got.size(), expect.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expect[i]) << "float " << i;
    EXPECT_FALSE(c->Peek(0, 41, &got, &read_clock));
  }
}

TEST(EmbeddingCacheTest, ANonFiniteGradientIsSkippedWhereTheServerSkipsIt) {
  EmbeddingCache::Options o;
  auto c = Cache(o, "sgd { learning_rate: 1 }", "non_finite: SKIP_AND_COUNT");
  const std::vector<float> row = Row(*c, 1.0f);
  c->Insert(0, std::vector<uint64_t>{1}.data(), 1, row.data(), 0);
  const std::vector<float> grads = {1, std::numeric_limits<float>::quiet_NaN(), 0, 0};
  c->ApplyPush(0, std::vector<uint64_t>{1}.data(), 1, grads.data(), 1.0f);
  std::vector<float> got;
  uint64_t read_clock;
  ASSERT_TRUE(c->Peek(0, 1, &got, &read_clock));
  EXPECT_EQ(got, row);
}

TEST(EmbeddingCacheTest, APlannedHitIsNeverEvictedBeforeItsStepIsFilled) {
  EmbeddingCache::Options o;
  o.max_rows = 2;
  o.staleness = 4;
  auto c = Cache(o);
  const std::vector<float> row = Row(*c, 1.0f);
  c->Insert(0, std::vector<uint64_t>{1, 2}.data(), 2, std::vector<float>(2 * c->width(0)).data(),
            5);
  ASSERT_THAT(Hits(c.get(), 6, {1, 2}), ElementsAre(0, 1));
  // Both rows are pinned by step 6: a stale victim would go without the
  // admission test, a pinned one does not go at all.
  for (int i = 0; i < 20; ++i) Hits(c.get(), 6, {3});  // Rate key 3 above 1 and 2.
  c->Insert(0, std::vector<uint64_t>{3}.data(), 1, row.data(), 6);
  std::vector<float> got;
  uint64_t read_clock;
  EXPECT_FALSE(c->Peek(0, 3, &got, &read_clock));
  EXPECT_EQ(c->stats().declined, 1u);
  std::vector<std::vector<float>> rows = {std::vector<float>(2 * kDim)};
  ASSERT_TRUE(c->Fill(6, {std::vector<uint64_t>{1, 2}}, {{0, 1}}, &rows).ok());
  c->Release(6);
  c->Insert(0, std::vector<uint64_t>{3}.data(), 1, row.data(), 6);
  EXPECT_TRUE(c->Peek(0, 3, &got, &read_clock));
  EXPECT_EQ(c->stats().rows, 2u);
  EXPECT_EQ(c->stats().evictions, 1u);
}

TEST(EmbeddingCacheTest, ANewRowIsAdmittedOnlyIfRatedAboveTheVictimUnlessTheVictimIsStale) {
  EmbeddingCache::Options o;
  o.max_rows = 1;
  o.staleness = 2;
  auto c = Cache(o);
  const std::vector<float> row = Row(*c, 1.0f);
  for (int i = 0; i < 5; ++i) Hits(c.get(), 10, {1});  // Key 1 is looked up often.
  c->Insert(0, std::vector<uint64_t>{1}.data(), 1, row.data(), 10);
  c->Release(10);
  Hits(c.get(), 11, {2});  // Key 2 once: not above key 1.
  c->Insert(0, std::vector<uint64_t>{2}.data(), 1, row.data(), 11);
  std::vector<float> got;
  uint64_t read_clock;
  EXPECT_TRUE(c->Peek(0, 1, &got, &read_clock));
  EXPECT_FALSE(c->Peek(0, 2, &got, &read_clock));
  // At step 13 key 1's row (read at 10) can serve no step any more: it goes
  // for key 2, however rarely key 2 is seen.
  Hits(c.get(), 13, {2});
  c->Insert(0, std::vector<uint64_t>{2}.data(), 1, row.data(), 12);
  EXPECT_FALSE(c->Peek(0, 1, &got, &read_clock));
  EXPECT_TRUE(c->Peek(0, 2, &got, &read_clock));
  EXPECT_EQ(read_clock, 12u);
}

TEST(EmbeddingCacheTest, AReplacedRowKeepsItsPlaceAndTakesTheNewValueAndClock) {
  EmbeddingCache::Options o;
  o.max_rows = 1;
  auto c = Cache(o);
  c->Insert(0, std::vector<uint64_t>{1}.data(), 1, Row(*c, 1.0f).data(), 3);
  c->Insert(0, std::vector<uint64_t>{1}.data(), 1, Row(*c, 9.0f).data(), 4);
  std::vector<float> got;
  uint64_t read_clock;
  ASSERT_TRUE(c->Peek(0, 1, &got, &read_clock));
  EXPECT_EQ(got, Row(*c, 9.0f));
  EXPECT_EQ(read_clock, 4u);
  EXPECT_EQ(c->stats().rows, 1u);
  EXPECT_EQ(c->stats().declined, 0u);
}

TEST(EmbeddingCacheTest, MaxBytesCountsWeightsStateAndBookkeeping) {
  EmbeddingCache::Options o;
  const uint64_t row_bytes = 4 * (kDim + 1) + EmbeddingCache::kEntryBytes;  // Row-wise Adagrad.
  o.max_bytes = 3 * row_bytes + row_bytes / 2;
  o.staleness = 100;
  auto c = Cache(o, "rowwise_adagrad { learning_rate: 0.1 }");
  for (uint64_t k = 0; k < 10; ++k) {
    for (int i = 0; i < 3; ++i) Hits(c.get(), k, {k});  // Each newer key rated higher.
    c->Insert(0, &k, 1, Row(*c, 1.0f).data(), k);
    c->Release(k);
  }
  EXPECT_EQ(c->stats().rows, 3u);
  EXPECT_LE(c->stats().bytes, o.max_bytes);
}

TEST(EmbeddingCacheTest, ALowerMinimumClockEmptiesTheCache) {
  EmbeddingCache::Options o;
  o.staleness = 2;
  auto c = Cache(o);
  c->Insert(0, std::vector<uint64_t>{1}.data(), 1, Row(*c, 1.0f).data(), 20);
  EXPECT_THAT(Hits(c.get(), 21, {1}, 20), ElementsAre(0));
  c->Release(21);
  EXPECT_THAT(Hits(c.get(), 22, {1}, 21), ElementsAre(0));  // Higher: kept.
  c->Release(22);
  // A worker came back below the minimum: rows read at 20 may lack the
  // pushes it sends again.
  EXPECT_THAT(Hits(c.get(), 22, {1}, 18), ElementsAre());
  EXPECT_EQ(c->stats().clears, 1u);
  EXPECT_EQ(c->stats().rows, 0u);
}

TEST(EmbeddingCacheTest, RefusesATableWithAdmission) {
  EmbeddingCache::Options o;
  auto cache = EmbeddingCache::Create(
      o, Config("sgd { learning_rate: 0.1 }", "admission { min_count: 2 }"), {{1, kDim}});
  EXPECT_TRUE(absl::IsFailedPrecondition(cache.status())) << cache.status();
  EXPECT_THAT(cache.status().message(), HasSubstr("admission"));
}

TEST(EmbeddingCacheTest, PublishesItsSeriesWithTheRank) {
  EmbeddingCache::Options o;
  o.staleness = 2;
  o.metrics_rank = "7";
  auto c = Cache(o);
  c->Insert(0, std::vector<uint64_t>{1}.data(), 1, Row(*c, 1.0f).data(), 5);
  const std::vector<uint64_t> keys = {1, 2};
  Positions hit, miss;
  c->PlanStep(6, std::nullopt, {keys}, &hit, &miss);
  std::vector<std::vector<float>> rows = {std::vector<float>(2 * kDim)};
  ASSERT_TRUE(c->Fill(6, {keys}, hit, &rows).ok());
  c->NoteStatePulled(40);
  const std::string text = metrics::Scrape();
  EXPECT_THAT(text, HasSubstr("shardps_worker_cache_lookups_total{rank=\"7\"} 2"));
  EXPECT_THAT(text, HasSubstr("shardps_worker_cache_hits_total{rank=\"7\"} 1"));
  EXPECT_THAT(text, HasSubstr("shardps_worker_cache_bytes_saved_total{rank=\"7\"} 24"));
  EXPECT_THAT(text, HasSubstr("shardps_worker_cache_state_bytes_total{rank=\"7\"} 40"));
  EXPECT_THAT(text, HasSubstr("shardps_worker_cache_hit_staleness_clocks_total{rank=\"7\"} 1"));
  EXPECT_THAT(text, HasSubstr("shardps_worker_cache_rows{rank=\"7\"} 1"));
}

}  // namespace
}  // namespace shardps
