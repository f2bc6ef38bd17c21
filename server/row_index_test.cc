#include "server/row_index.h"

#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// Every key of `want` is found with its value, nothing else is, and a full
// scan sees exactly `want`.
void ExpectSame(const RowIndex& index, const absl::flat_hash_map<uint64_t, uint32_t>& want,
                const std::vector<uint64_t>& absent) {
  ASSERT_EQ(index.size(), want.size());
  for (const auto& [key, slot] : want) {
    const RowIndex::Bucket* b = index.Find(key);
    ASSERT_NE(b, nullptr) << key;
    EXPECT_EQ(b->slot, slot);
    EXPECT_EQ(b->generation, slot ^ 0x5a5a);
  }
  for (uint64_t key : absent) {
    if (!want.contains(key)) {
      EXPECT_FALSE(index.Contains(key)) << key;
    }
  }
  size_t seen = 0;
  index.ForEach([&](const RowIndex::Bucket& b) {
    ++seen;
    auto it = want.find(b.key);
    ASSERT_NE(it, want.end()) << b.key;
    EXPECT_EQ(b.slot, it->second);
  });
  EXPECT_EQ(seen, want.size());
}

TEST(RowIndexTest, EmptyIndexFindsNothing) {
  RowIndex index;
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.capacity(), 0u);
  EXPECT_EQ(index.Find(0), nullptr);
  EXPECT_FALSE(index.Erase(7));
  index.Prefetch(3);  // No buckets: must not touch memory.
  index.ForEach([](const RowIndex::Bucket&) { FAIL(); });
}

TEST(RowIndexTest, RandomInsertsAndErasesMatchAReferenceMap) {
  std::mt19937_64 rng(7);
  RowIndex index;
  absl::flat_hash_map<uint64_t, uint32_t> want;
  std::vector<uint64_t> keys;
  // Keys 0 and ~0 are ordinary keys (emptiness is in the slot).
  for (uint64_t k : {uint64_t{0}, ~uint64_t{0}}) {
    index.Insert(k, static_cast<uint32_t>(k & 0xffff), (k & 0xffff) ^ 0x5a5a);
    want[k] = static_cast<uint32_t>(k & 0xffff);
    keys.push_back(k);
  }
  for (int round = 0; round < 20000; ++round) {
    const int op = static_cast<int>(rng() % 3);
    if (op < 2 || keys.empty()) {
      // Small key space too, so probe runs collide and wrap.
      const uint64_t key = (round % 2) ? rng() : rng() % 5000;
      if (want.contains(key)) continue;
      const uint32_t slot = static_cast<uint32_t>(rng() % 1000000);
      index.Insert(key, slot, slot ^ 0x5a5a);
      want[key] = slot;
      keys.push_back(key);
    } else {
      const size_t pick = rng() % keys.size();
      const uint64_t key = keys[pick];
      keys[pick] = keys.back();
      keys.pop_back();
      EXPECT_TRUE(index.Erase(key));
      EXPECT_FALSE(index.Erase(key));
      want.erase(key);
    }
    if (round % 4000 == 0) ExpectSame(index, want, {1, 2, 3, 4999, 123456789});
  }
  ExpectSame(index, want, {1, 2, 3, 4999, 123456789});
  // The load stays at most 3/4.
  EXPECT_LE(index.size() * 4, index.capacity() * 3);
}

TEST(RowIndexTest, EraseKeepsEveryOtherKeyOfAFullIndexReachable) {
  // Fill a 16-bucket index to its limit (12 keys) with keys of many homes,
  // then erase them one by one; after each erase every other key is found.
  RowIndex index;
  absl::flat_hash_map<uint64_t, uint32_t> want;
  for (uint32_t k = 0; k < 12; ++k) {
    index.Insert(k * 977, k, k ^ 0x5a5a);
    want[k * 977] = k;
  }
  ASSERT_EQ(index.capacity(), 16u);
  for (uint32_t k = 0; k < 12; ++k) {
    ASSERT_TRUE(index.Erase(k * 977));
    want.erase(k * 977);
    ExpectSame(index, want, {k * 977});
  }
}

TEST(RowIndexTest, BucketsAreMutableAndClearFreesTheMemory) {
  RowIndex index;
  for (uint32_t k = 0; k < 100; ++k) index.Insert(k, k, 0);
  index.Find(42)->generation = 9;
  EXPECT_EQ(index.Find(42)->generation, 9u);
  index.ForEachMutable([](RowIndex::Bucket& b) { b.generation = b.slot + 1; });
  EXPECT_EQ(index.Find(7)->generation, 8u);
  EXPECT_EQ(index.MemoryBytes(), index.capacity() * 16);
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.MemoryBytes(), 0u);
  EXPECT_FALSE(index.Contains(7));
  index.Insert(7, 1, 2);
  EXPECT_EQ(index.Find(7)->slot, 1u);
}

}  // namespace
}  // namespace shardps
