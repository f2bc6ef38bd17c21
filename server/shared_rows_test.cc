// SharedRows: reserved keys, summed pushes, pulls of keys without rows, and
// restores that share bit-identical rows.
#include "server/shared_rows.h"

#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "common/partition.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

constexpr uint32_t kTable = 3, kPartitions = 16, kDim = 2;

std::unique_ptr<Optimizer> Sgd() {
  OptimizerConfig c;
  c.mutable_sgd()->set_learning_rate(0.5f);
  return std::move(*Optimizer::Create(c, kDim));
}

// A key of partition `p` that is not its reserved key.
uint64_t KeyIn(uint32_t p, int nth = 0) {
  for (uint64_t k = 1;; ++k) {
    if (PartitionOf(kTable, k, kPartitions) == p && nth-- == 0) return k;
  }
}

TEST(SharedRowsTest, ReservedKeysNameTheirPartitionOnly) {
  const auto opt = Sgd();
  std::atomic<uint32_t> generation{1};
  SharedRows rows(kTable, kPartitions, kDim, kDim + opt->StateSize(), opt.get(), &generation);
  for (uint32_t p = 0; p < kPartitions; ++p) {
    uint32_t q = kPartitions;
    EXPECT_TRUE(rows.IsKey(rows.Key(p), &q)) << p;
    EXPECT_EQ(q, p);
    EXPECT_EQ(PartitionOf(kTable, rows.Key(p), kPartitions), p);
    EXPECT_FALSE(rows.IsKey(KeyIn(p), &q)) << p;
  }
}

// After Reset every partition shares one zero row: a push sums the marked
// gradients and applies one step; a pull of a key without a row reads it.
TEST(SharedRowsTest, PushSumsTheMarkedGradientsIntoOneStep) {
  const auto opt = Sgd();
  std::atomic<uint32_t> generation{1};
  SharedRows rows(kTable, kPartitions, kDim, kDim + opt->StateSize(), opt.get(), &generation);
  rows.Reset();
  const std::vector<uint64_t> keys = {KeyIn(0), KeyIn(5), KeyIn(9)};
  const std::vector<uint32_t> order = {0, 1, 2};
  const std::vector<uint8_t> to_shared = {1, 0, 1};  // Key 1 has a row of its own.
  const std::vector<float> grads = {1, 2, 10, 20, 3, 4};
  rows.Push(keys.data(), order.data(), to_shared.data(), keys.size(), grads.data(), 1.0f);
  EXPECT_EQ(rows.Updates(), 1u);
  EXPECT_EQ(rows.RowsInUse(), 1u);
  float own[kDim] = {7, 7};
  const std::vector<float*> found = {nullptr, own, nullptr};
  std::vector<float> out(keys.size() * kDim, -1);
  rows.Pull(keys.data(), order.data(), found.data(), keys.size(), Encoding::kFp32,
            reinterpret_cast<char*>(out.data()));
  // SGD lr 0.5 on the sum (4, 6) from zero.
  EXPECT_EQ(out, (std::vector<float>{-2, -3, -1, -1, -2, -3}));
}

// A restore gives a partition the checkpoint's row, sharing a row with the
// same bits; ForEach(since) lists the partitions whose row changed after.
TEST(SharedRowsTest, RestoreSharesIdenticalRowsAndStampsTheirChange) {
  const auto opt = Sgd();
  std::atomic<uint32_t> generation{1};
  const size_t stride = kDim + opt->StateSize();
  SharedRows rows(kTable, kPartitions, kDim, stride, opt.get(), &generation);
  rows.Reset();
  generation = 5;
  const std::vector<float> a(stride, 1.5f), b(stride, -2.0f);
  rows.Restore(0, a.data());
  rows.Restore(1, a.data());
  rows.Restore(2, b.data());
  EXPECT_EQ(rows.RowsInUse(), 3u);  // The reset row (13 partitions), a, b.
  std::map<uint32_t, float> changed;
  rows.ForEach(4, [&](uint32_t p, uint64_t key, const float* payload) {
    EXPECT_EQ(key, rows.Key(p));
    changed[p] = payload[0];
  });
  EXPECT_EQ(changed, (std::map<uint32_t, float>{{0, 1.5f}, {1, 1.5f}, {2, -2.0f}}));
  int all = 0;
  rows.ForEach(std::nullopt, [&](uint32_t, uint64_t, const float*) { ++all; });
  EXPECT_EQ(all, static_cast<int>(kPartitions));
}

}  // namespace
}  // namespace shardps
