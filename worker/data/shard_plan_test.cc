#include "worker/data/shard_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

using testing::WriteFile;
using testing::WriteGzip;

ShardPlan Plan(const std::vector<std::string>& files, uint32_t rank, uint32_t workers,
               bool shuffle = true, uint64_t seed = 5) {
  auto plan = ShardPlan::Create(files, rank, workers, shuffle, seed);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// Files named `prefix`0.. with `n` lines each; gzip where `gzip(i)`.
std::vector<std::string> Files(const std::string& prefix, int count, int n, bool (*gzip)(int)) {
  std::vector<std::string> files;
  for (int i = 0; i < count; ++i) {
    const std::string content = testing::CriteoLines(i * n, n);
    const std::string name = absl::StrCat(prefix, i);
    files.push_back(gzip(i) ? WriteGzip(name, {content}) : WriteFile(name, content));
  }
  return files;
}

TEST(ShardPlanTest, FileOrderIsASeededPermutationPerEpoch) {
  const auto files = Files("order", 6, 1, [](int) { return false; });
  const ShardPlan a = Plan(files, 0, 1, true, 7);
  const ShardPlan b = Plan(files, 0, 1, true, 7);
  const ShardPlan c = Plan(files, 0, 1, true, 8);
  std::set<std::vector<size_t>> orders;
  for (uint64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(a.FileOrder(e), b.FileOrder(e));
    std::vector<size_t> sorted = a.FileOrder(e);
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
    orders.insert(a.FileOrder(e));
  }
  EXPECT_EQ(orders.size(), 3u);
  EXPECT_NE(a.FileOrder(0), c.FileOrder(0));
  EXPECT_EQ(Plan(files, 0, 1, false).FileOrder(2), (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
}

TEST(ShardPlanTest, AtLeastAsManyFilesAsWorkersDealsWholeFiles) {
  // 5 files (gzip and plain), 2 workers: 3 + 2 in an epoch, 2 + 3 the next.
  const auto files = Files("deal", 5, 3, [](int i) { return i % 2 == 1; });
  for (uint64_t e = 0; e < 4; ++e) {
    std::map<size_t, int> readers;
    size_t count[2] = {0, 0};
    for (uint32_t rank = 0; rank < 2; ++rank) {
      const ShardPlan plan = Plan(files, rank, 2);
      const std::vector<ReadUnit> units = plan.Units(e);
      count[rank] = units.size();
      // In the epoch's file order.
      std::vector<size_t> order = plan.FileOrder(e);
      auto it = order.begin();
      for (const ReadUnit& u : units) {
        EXPECT_EQ(u.begin, 0u);
        EXPECT_EQ(u.end, kToEndOfFile);
        ++readers[u.file];
        it = std::find(it, order.end(), u.file);
        EXPECT_NE(it, order.end()) << "units out of the epoch's order";
      }
    }
    EXPECT_EQ(readers.size(), 5u);
    for (const auto& [file, n] : readers) EXPECT_EQ(n, 1) << "file " << file;
    EXPECT_EQ(count[0], e % 2 == 0 ? 3u : 2u) << "epoch " << e;
    EXPECT_EQ(count[1], e % 2 == 0 ? 2u : 3u) << "epoch " << e;
  }
}

TEST(ShardPlanTest, FewerFilesThanWorkersSplitsPlainFilesByBytes) {
  const std::vector<std::string> files = {
      WriteFile("split.tsv", std::string(1000, 'x')),
      WriteGzip("split.gz", {"a\n"}),
  };
  std::map<uint64_t, int> gzip_reader_per_epoch;
  for (uint64_t e = 0; e < 4; ++e) {
    std::vector<ReadUnit> plain;
    for (uint32_t rank = 0; rank < 4; ++rank) {
      const ShardPlan plan = Plan(files, rank, 4);
      EXPECT_FALSE(plan.files()[0].compressed);
      EXPECT_TRUE(plan.files()[1].compressed);
      EXPECT_EQ(plan.files()[0].size, 1000u);
      for (const ReadUnit& u : plan.Units(e)) {
        if (u.file == 0) {
          plain.push_back(u);
          EXPECT_EQ(u.begin, 250u * rank);
        } else {
          EXPECT_EQ(u.begin, 0u);
          EXPECT_EQ(u.end, kToEndOfFile);
          EXPECT_EQ(gzip_reader_per_epoch.count(e), 0u) << "two readers of the gzip file";
          gzip_reader_per_epoch[e] = static_cast<int>(rank);
        }
      }
    }
    ASSERT_EQ(plain.size(), 4u);  // Contiguous ranges, the last to the end.
    for (size_t r = 0; r + 1 < 4; ++r) EXPECT_EQ(plain[r].end, plain[r + 1].begin);
    EXPECT_EQ(plain[3].end, kToEndOfFile);
  }
  // One gzip file, four workers: it goes round, one worker per epoch.
  ASSERT_EQ(gzip_reader_per_epoch.size(), 4u);
  std::set<int> gzip_readers;
  for (const auto& [e, rank] : gzip_reader_per_epoch) gzip_readers.insert(rank);
  EXPECT_EQ(gzip_readers.size(), 4u);
  // A tiny file: empty ranges are left out.
  // Two bytes over four workers: [0, 0) [0, 1) [1, 1) [1, end).
  const std::vector<std::string> tiny = {WriteFile("tiny.tsv", "ab")};
  EXPECT_TRUE(Plan(tiny, 0, 4).Units(0).empty());
  EXPECT_EQ(Plan(tiny, 1, 4).Units(0), (std::vector<ReadUnit>{{0, 0, 1}}));
  EXPECT_TRUE(Plan(tiny, 2, 4).Units(0).empty());
  EXPECT_EQ(Plan(tiny, 3, 4).Units(0), (std::vector<ReadUnit>{{0, 1, kToEndOfFile}}));
}

TEST(ShardPlanTest, CreateNamesTheBadFile) {
  const std::string ok = WriteFile("ok.tsv", "x\n");
  auto missing = ShardPlan::Create({ok, testing::TempPath("nope.tsv")}, 0, 1, false, 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.tsv"), std::string::npos);
  EXPECT_EQ(ShardPlan::Create({ok}, 2, 2, false, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardPlan::Create({}, 0, 1, false, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace shardps
