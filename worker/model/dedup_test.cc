#include "worker/model/dedup.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// Reference: first-occurrence order with std::unordered_map.
void Reference(const std::vector<uint64_t>& keys, std::vector<uint64_t>* unique,
               std::vector<int64_t>* inverse) {
  std::unordered_map<uint64_t, int64_t> index;
  unique->clear();
  inverse->clear();
  for (uint64_t k : keys) {
    auto it = index.find(k);
    if (it == index.end()) {
      it = index.emplace(k, static_cast<int64_t>(unique->size())).first;
      unique->push_back(k);
    }
    inverse->push_back(it->second);
  }
}

TEST(KeyDeduperTest, FirstOccurrenceOrderAndInverse) {
  KeyDeduper d;
  d.Dedup({7, 3, 7, 0, 3, 3, UINT64_MAX, 0});
  EXPECT_EQ(d.unique_keys(), (std::vector<uint64_t>{7, 3, 0, UINT64_MAX}));
  EXPECT_EQ(d.inverse(), (std::vector<int64_t>{0, 1, 0, 2, 1, 1, 3, 2}));
}

TEST(KeyDeduperTest, EmptyBatch) {
  KeyDeduper d;
  d.Dedup({});
  EXPECT_TRUE(d.unique_keys().empty());
  EXPECT_TRUE(d.inverse().empty());
  d.Add({});  // Add without Reset on a fresh deduper is fine too.
  EXPECT_TRUE(d.unique_keys().empty());
}

TEST(KeyDeduperTest, AddWithoutResetOnFreshDeduper) {
  KeyDeduper d;
  d.Add({5, 5, 6});
  EXPECT_EQ(d.unique_keys(), (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(d.inverse(), (std::vector<int64_t>{0, 0, 1}));
}

TEST(KeyDeduperTest, SeveralFieldsShareOneTable) {
  KeyDeduper d;
  d.Reset(6);
  d.Add({10, 11, 10});  // field A
  const size_t b_start = d.inverse().size();
  d.Add({11, 12, 10});  // field B
  EXPECT_EQ(b_start, 3u);
  EXPECT_EQ(d.unique_keys(), (std::vector<uint64_t>{10, 11, 12}));
  EXPECT_EQ(d.inverse(), (std::vector<int64_t>{0, 1, 0, 1, 2, 0}));
}

TEST(KeyDeduperTest, ResetForgetsThePreviousBatch) {
  KeyDeduper d;
  d.Dedup({1, 2, 3});
  d.Dedup({3, 4});
  EXPECT_EQ(d.unique_keys(), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(d.inverse(), (std::vector<int64_t>{0, 1}));
}

TEST(KeyDeduperTest, MatchesReferenceOnRandomBatchesWithGrowth) {
  std::mt19937_64 rng(42);
  KeyDeduper d;
  std::vector<uint64_t> ref_unique;
  std::vector<int64_t> ref_inverse;
  for (int round = 0; round < 50; ++round) {
    const size_t n = rng() % 20000;
    const uint64_t range = 1 + rng() % 5000;  // Many duplicates.
    std::vector<uint64_t> keys(n);
    for (auto& k : keys) k = (rng() % range) * 0x100000001ull;  // Colliding low bits.
    Reference(keys, &ref_unique, &ref_inverse);
    // Under-estimate the size on purpose so the table has to grow.
    d.Reset(round % 2 == 0 ? keys.size() : 1);
    const size_t half = keys.size() / 2;
    d.Add(absl::MakeConstSpan(keys).subspan(0, half));
    d.Add(absl::MakeConstSpan(keys).subspan(half));
    ASSERT_EQ(d.unique_keys(), ref_unique) << "round " << round;
    ASSERT_EQ(d.inverse(), ref_inverse) << "round " << round;
  }
}

TEST(KeyDeduperTest, AllDistinctKeys) {
  KeyDeduper d;
  std::vector<uint64_t> keys(100000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i << 20;
  d.Reset(0);
  d.Add(keys);
  ASSERT_EQ(d.unique_keys(), keys);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(d.inverse()[i], static_cast<int64_t>(i));
}

}  // namespace
}  // namespace shardps
