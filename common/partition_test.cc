#include "common/partition.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

constexpr uint32_t kPartitions = 4096;

// Upper critical value of chi-square with `df` degrees of freedom at
// p = 0.001 (Wilson-Hilferty; z = 3.0902), accurate to < 0.1% at df = 4095.
double ChiSquareCritical(double df) {
  const double z = 3.0902;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

double ChiSquare(const std::vector<uint64_t>& keys, uint32_t table) {
  std::vector<double> counts(kPartitions, 0);
  for (uint64_t k : keys) counts[PartitionOf(table, k, kPartitions)] += 1;
  const double expected = static_cast<double>(keys.size()) / kPartitions;
  double chi = 0;
  for (double c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

void ExpectUniform(const std::vector<uint64_t>& keys, const char* what) {
  const double crit = ChiSquareCritical(kPartitions - 1);
  for (uint32_t table : {0u, 1u, 77u}) {
    const double chi = ChiSquare(keys, table);
    EXPECT_LT(chi, crit) << what << ", table " << table << ": chi-square " << chi << " over "
                         << keys.size() << " keys";
  }
}

TEST(PartitionTest, SequentialIdsSpreadEvenly) {
  std::vector<uint64_t> keys(kPartitions * 50);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  ExpectUniform(keys, "sequential ids");
}

TEST(PartitionTest, HighBitIdsSpreadEvenly) {
  std::vector<uint64_t> keys;
  for (uint64_t i = 1; i <= kPartitions * 50; ++i) keys.push_back(i << 40);
  ExpectUniform(keys, "ids with only high bits set");
}

TEST(PartitionTest, ZipfSampleIdsSpreadEvenly) {
  // Draw 500k ranks from Zipf(s = 1) over 2M ids; keep the distinct ones.
  const size_t n = 2'000'000;
  std::vector<double> cdf(n);
  double sum = 0;
  for (size_t r = 0; r < n; ++r) cdf[r] = (sum += 1.0 / (r + 1));
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, sum);
  std::set<uint64_t> distinct;
  for (int i = 0; i < 500'000; ++i) {
    distinct.insert(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
  }
  std::vector<uint64_t> keys(distinct.begin(), distinct.end());
  ASSERT_GT(keys.size(), 50'000u);
  ExpectUniform(keys, "distinct ids of a Zipf sample");
}

TEST(PartitionTest, MixIsABijectionOnASample) {
  std::set<uint64_t> seen;
  for (uint64_t k = 0; k < 100000; ++k) seen.insert(MixKey(3, k));
  EXPECT_EQ(seen.size(), 100000u);
}

// Frozen values: checkpoints are grouped by partition, so these may never
// change. If this fails, the mixing function changed: restore it.
TEST(PartitionTest, GoldenPartitions) {
  EXPECT_EQ(PartitionOf(0, 0, kPartitions), 1154u);
  EXPECT_EQ(PartitionOf(1, 12345, kPartitions), 1182u);
  EXPECT_EQ(PartitionOf(7, 0xdeadbeefcafef00dULL, kPartitions), 1850u);
  EXPECT_EQ(PartitionOf(2, ~0ULL, kPartitions), 269u);
}

TEST(PartitionTest, SameKeySamePartitionInAnotherProcess) {
  const std::string input = ::testing::TempDir() + "/keys.txt";
  std::vector<std::pair<uint32_t, uint64_t>> pairs;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) pairs.push_back({i % 5u, rng()});
  {
    std::ofstream out(input);
    for (auto& [t, k] : pairs) out << t << " " << k << "\n";
  }
  const std::string cmd = "common/partition_dump 4096 < " + input;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  unsigned table, partition;
  uint64_t key;
  size_t i = 0;
  while (std::fscanf(pipe, "%u %" SCNu64 " %u", &table, &key, &partition) == 3) {
    ASSERT_LT(i, pairs.size());
    EXPECT_EQ(table, pairs[i].first);
    EXPECT_EQ(key, pairs[i].second);
    EXPECT_EQ(partition, PartitionOf(table, key, kPartitions));
    ++i;
  }
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_EQ(i, pairs.size());
}

TEST(PartitionMapTest, ContiguousAssignmentCoversEveryServer) {
  auto map = PartitionMap::Contiguous(5, 4096, 3);
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->version(), 5u);
  std::vector<int> per_server(3, 0);
  for (uint32_t p = 0; p < 4096; ++p) per_server[map->OwnerOfPartition(p)]++;
  EXPECT_EQ(per_server[0] + per_server[1] + per_server[2], 4096);
  for (int n : per_server) EXPECT_NEAR(n, 4096 / 3, 1);
  EXPECT_EQ(map->ServerOf(1, 99), map->OwnerOfPartition(PartitionOf(1, 99, 4096)));
}

TEST(PartitionMapTest, RejectsBadShapes) {
  EXPECT_FALSE(PartitionMap::Contiguous(1, 4, 0).ok());
  EXPECT_FALSE(PartitionMap::Contiguous(1, 4, 5).ok());
  EXPECT_FALSE(PartitionMap::FromOwners(1, {0, 1, 2}, 2).ok());
  EXPECT_FALSE(PartitionMap::FromOwners(1, {}, 2).ok());
}

}  // namespace
}  // namespace shardps
