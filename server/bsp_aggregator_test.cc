#include "server/bsp_aggregator.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// One sparse SGD table (lr 1, zeros, dim 2).
std::unique_ptr<TableStore> MakeStore() {
  JobConfig c;
  TableConfig* t = c.add_tables();
  t->set_id(1);
  t->set_name("t");
  t->set_kind(TableConfig::SPARSE);
  t->set_dim(2);
  t->mutable_init()->set_kind(InitializerConfig::ZEROS);
  t->mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
  auto store = TableStore::Create(c);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

BspAggregator::BufferedPush Push(std::vector<uint64_t> keys, std::vector<float> grads,
                                 float lr_scale = 1) {
  BspAggregator::BufferedPush p;
  p.lr_scale = lr_scale;
  p.tables.push_back({1, std::move(keys), std::move(grads)});
  return p;
}

std::vector<float> Row(TableStore& store, uint64_t key) {
  std::vector<float> out(2);
  EXPECT_TRUE(store.Pull(1, &key, 1, false, out.data()).ok());
  return out;
}

TEST(BspAggregatorTest, AClockIsAppliedOnceEveryActiveRankPushedItAsTheMeanInRankOrder) {
  auto store = MakeStore();
  std::vector<uint64_t> applied;
  BspAggregator bsp(0, 2, store.get(), [&](uint64_t c) { applied.push_back(c); });
  ASSERT_TRUE(bsp.Buffer(1, 0, Push({7, 8}, {2, 4, 6, 8}, 0.5f)).ok());
  EXPECT_EQ(bsp.applied_clock(), 0u);
  EXPECT_EQ(Row(*store, 7), (std::vector<float>{0, 0}));  // Buffered, not applied.
  ASSERT_TRUE(bsp.Buffer(0, 0, Push({7}, {10, 20})).ok());
  EXPECT_EQ(bsp.applied_clock(), 1u);
  EXPECT_EQ(applied, std::vector<uint64_t>{1});
  // Key 7: (10 + 2) / 2 ranks, lr_scale of the lowest rank (1); key 8: rank
  // 1's alone, still divided by 2.
  EXPECT_EQ(Row(*store, 7), (std::vector<float>{-6, -12}));
  EXPECT_EQ(Row(*store, 8), (std::vector<float>{-3, -4}));
}

TEST(BspAggregatorTest, RefusedPushesChangeNothing) {
  auto store = MakeStore();
  BspAggregator bsp(3, 2, store.get(), nullptr);
  ASSERT_TRUE(bsp.Buffer(0, 0, Push({1}, {1, 1})).ok());
  EXPECT_EQ(bsp.Buffer(0, 0, Push({1}, {1, 1})).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bsp.Buffer(5, 0, Push({1}, {1, 1})).code(), absl::StatusCode::kFailedPrecondition);
  const absl::Status far = bsp.Buffer(1, BspAggregator::kClocksAhead, Push({1}, {1, 1}));
  EXPECT_EQ(far.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(far.message().find("server 3 has applied clocks < 0"), std::string::npos) << far;
  ASSERT_TRUE(bsp.Buffer(1, 0, Push({1}, {3, 3})).ok());
  EXPECT_EQ(bsp.applied_clock(), 1u);
  EXPECT_EQ(Row(*store, 1), (std::vector<float>{-2, -2}));  // Only the accepted two.
  EXPECT_EQ(bsp.Buffer(0, 0, Push({1}, {1, 1})).code(), absl::StatusCode::kAlreadyExists);
}

TEST(BspAggregatorTest, ASmallerActiveSetClosesTheClocksItCompletes) {
  auto store = MakeStore();
  BspAggregator bsp(0, 3, store.get(), nullptr);
  ASSERT_TRUE(bsp.Buffer(0, 0, Push({1}, {3, 3})).ok());
  ASSERT_TRUE(bsp.Buffer(0, 1, Push({1}, {3, 3})).ok());
  EXPECT_EQ(bsp.applied_clock(), 0u);
  bsp.SetActive({0});  // Ranks 1 and 2 left.
  EXPECT_EQ(bsp.applied_clock(), 2u);
  EXPECT_EQ(Row(*store, 1), (std::vector<float>{-6, -6}));
}

TEST(BspAggregatorTest, AWaitingPullWakesWhenItsClockCloses) {
  auto store = MakeStore();
  BspAggregator bsp(0, 1, store.get(), nullptr);
  absl::Status waited = absl::UnknownError("not returned");
  std::thread pull([&] { waited = bsp.WaitForClock(1, 0, absl::Now() + absl::Seconds(60)); });
  ASSERT_TRUE(bsp.Buffer(0, 0, Push({1}, {1, 1})).ok());
  pull.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST(BspAggregatorTest, AWaitEndsAtItsDeadlineNamingTheMissingRanksAtAResetOrAtShutdown) {
  auto store = MakeStore();
  BspAggregator bsp(2, 3, store.get(), nullptr);
  ASSERT_TRUE(bsp.Buffer(1, 0, Push({1}, {1, 1})).ok());
  const absl::Status late = bsp.WaitForClock(1, 0, absl::Now());
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.message().find("ranks [0,2]"), std::string::npos) << late;

  absl::Status reset = absl::UnknownError("not returned");
  std::thread pull([&] { reset = bsp.WaitForClock(5, 0, absl::Now() + absl::Seconds(60)); });
  bsp.Reset(3, /*generation=*/4);  // A restore into generation 4.
  pull.join();
  EXPECT_TRUE(reset.ok()) << reset;  // The caller's generation check refuses it.
  EXPECT_EQ(bsp.applied_clock(), 3u);
  // Buffered pushes of the old generation are gone: clock 3 needs all three.
  ASSERT_TRUE(bsp.Buffer(1, 3, Push({1}, {1, 1})).ok());
  EXPECT_EQ(bsp.applied_clock(), 3u);

  bsp.Shutdown();
  EXPECT_EQ(bsp.WaitForClock(9, 4, absl::Now() + absl::Seconds(60)).code(),
            absl::StatusCode::kUnavailable);
}

TEST(BspAggregatorTest, ACheckpointCopiesOnlyAtItsClock) {
  auto store = MakeStore();
  BspAggregator bsp(0, 1, store.get(), nullptr);
  bool copied = false;
  const absl::Status early = bsp.AtClock(1, [&] { copied = true; });
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(copied);
  ASSERT_TRUE(bsp.Buffer(0, 0, Push({1}, {1, 1})).ok());
  EXPECT_TRUE(bsp.AtClock(1, [&] { copied = true; }).ok());
  EXPECT_TRUE(copied);
}

}  // namespace
}  // namespace shardps
