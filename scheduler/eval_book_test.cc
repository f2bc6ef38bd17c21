#include "scheduler/eval_book.h"

#include <cmath>
#include <string>

#include "common/checkpoint/file_io.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/eval_book_" + name;
  (void)checkpoint::RemoveAll(root);
  EXPECT_TRUE(checkpoint::MakeDir(root).ok());
  return root;
}

CheckpointEval Eval(uint64_t clock, double auc) {
  CheckpointEval e;
  e.set_clock(clock);
  e.set_auc(auc);
  e.set_logloss(0.5);
  e.set_examples(100);
  e.set_seconds(1.5);
  return e;
}

EvalBook::Options Opts(const std::string& dir, uint32_t patience, double min_delta = 0) {
  EvalBook::Options o;
  o.dir = dir;
  o.every_steps = 100;
  o.patience = patience;
  o.min_delta = min_delta;
  return o;
}

TEST(EvalBookTest, DueCheckpointsAreHandedOutOnceInClockOrder) {
  EvalBook book(Opts("", 0));
  book.Enqueue(150, false);  // Not a multiple of 100 and not final: not due.
  book.Enqueue(200, false);
  book.Enqueue(100, false);
  book.Enqueue(250, true);  // The final one is.
  EXPECT_EQ(book.DueClocks(), (std::vector<uint64_t>{100, 200, 250}));
  EXPECT_EQ(book.Take(0), 100u);
  EXPECT_EQ(book.Take(0), 100u);  // Asked again: the same one.
  EXPECT_EQ(book.Take(1), 200u);
  book.Release(0);  // Worker 0 is gone: 100 is free again.
  EXPECT_EQ(book.Take(2), 100u);
  ASSERT_TRUE(book.Record(2, Eval(100, 0.7)).ok());
  ASSERT_TRUE(book.Record(2, Eval(100, 0.9)).ok());  // A duplicate: ignored.
  EXPECT_EQ(book.evaluations().at(100).auc(), 0.7);
  book.Enqueue(100, false);  // Evaluated already.
  EXPECT_EQ(book.DueClocks(), (std::vector<uint64_t>{200, 250}));
  EXPECT_TRUE(book.Outstanding());
  EXPECT_FALSE(book.Record(1, Eval(200, 1.5)).ok());
}

// Only the worker a checkpoint is leased to reports its evaluation: another
// rank's result is refused and recorded nowhere (its AUC would choose BEST),
// and its failure report does not end the holder's lease. A checkpoint no
// one holds (a scheduler restarted since) is taken from any rank.
TEST(EvalBookTest, OnlyTheLeaseHolderReports) {
  EvalBook book(Opts("", 0));
  book.Enqueue(100, false);
  book.Enqueue(200, false);
  EXPECT_EQ(book.Take(0), 100u);
  const absl::Status other = book.Record(1, Eval(100, 0.99));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_EQ(book.evaluations().count(100), 0u);
  book.Failed(1, 100, "not mine");
  EXPECT_EQ(book.Take(2), 200u) << "100 is still worker 0's";
  ASSERT_TRUE(book.Record(0, Eval(100, 0.7)).ok());
  EXPECT_EQ(book.evaluations().at(100).auc(), 0.7);
  book.Enqueue(300, false);  // Not taken by anyone.
  ASSERT_TRUE(book.Record(1, Eval(300, 0.8)).ok());
  EXPECT_EQ(book.evaluations().at(300).auc(), 0.8);
}

// An evaluator that is alive but never answers does not hold the job: its
// lease ends after Options::lease, as a failed attempt, and the checkpoint
// goes to another worker; after kMaxAttempts such leases it is dropped.
TEST(EvalBookTest, AStuckEvaluationIsGivenToAnotherWorker) {
  EvalBook::Options o = Opts("", 0);
  o.lease = absl::Minutes(10);
  EvalBook book(o);
  book.Enqueue(100, false);
  const absl::Time t0 = absl::FromUnixSeconds(1000000);
  EXPECT_EQ(book.Take(0, t0), 100u);
  book.ExpireLeases(t0 + absl::Minutes(9));
  EXPECT_FALSE(book.Take(1, t0 + absl::Minutes(9)).has_value()) << "still worker 0's";
  book.ExpireLeases(t0 + absl::Minutes(11));
  EXPECT_EQ(book.Take(1, t0 + absl::Minutes(11)), 100u);
  book.ExpireLeases(t0 + absl::Minutes(22));
  EXPECT_EQ(book.Take(2, t0 + absl::Minutes(22)), 100u);
  book.ExpireLeases(t0 + absl::Minutes(33));  // The third expiry: given up.
  EXPECT_FALSE(book.Outstanding());
  EXPECT_FALSE(book.Take(0, t0 + absl::Minutes(33)).has_value());
}

TEST(EvalBookTest, FailedEvaluationsAreRetriedThenDropped) {
  EvalBook book(Opts("", 0));
  book.Enqueue(100, false);
  for (int i = 0; i < EvalBook::kMaxAttempts; ++i) {
    EXPECT_EQ(book.Take(0), 100u);
    book.Failed(0, 100, "cannot read the checkpoint");
  }
  EXPECT_FALSE(book.Outstanding());
  EXPECT_FALSE(book.Take(0).has_value());
}

TEST(EvalBookTest, EarlyStoppingAfterPatienceEvaluationsWithoutImprovement) {
  EvalBook book(Opts("", 2, 0.01));
  for (uint64_t c : {100, 200, 300, 400, 500}) book.Enqueue(c, false);
  ASSERT_TRUE(book.Record(0, Eval(100, 0.70)).ok());
  ASSERT_TRUE(book.Record(0, Eval(200, 0.75)).ok());  // Improves.
  // 400 without 300 yet: only the evaluations before the first due one count.
  ASSERT_TRUE(book.Record(0, Eval(400, 0.755)).ok());
  EXPECT_FALSE(book.ShouldStop());
  ASSERT_TRUE(book.Record(0, Eval(300, 0.758)).ok());  // Better, but < min_delta.
  EXPECT_TRUE(book.ShouldStop());                      // 300 and 400: 2 without.
  EXPECT_EQ(book.Best()->clock(), 300u);               // Kept: the highest AUC.
  EXPECT_EQ(book.Pinned(), (std::vector<uint64_t>{500, 300}));
}

TEST(EvalBookTest, NanNeverImprovesAndIsNeverBest) {
  EvalBook book(Opts("", 1));
  book.Enqueue(100, false);
  book.Enqueue(200, false);
  ASSERT_TRUE(book.Record(0, Eval(100, std::nan(""))).ok());
  EXPECT_TRUE(book.ShouldStop());
  EXPECT_FALSE(book.Best().has_value());
  ASSERT_TRUE(book.Record(0, Eval(200, 0.6)).ok());
  EXPECT_FALSE(book.ShouldStop());
  EXPECT_EQ(book.Best()->clock(), 200u);
}

TEST(EvalBookTest, PersistedAcrossRestartsAndForgottenAfterARollback) {
  const std::string dir = FreshDir("persist");
  {
    EvalBook book(Opts(dir, 1));
    for (uint64_t c : {100, 200, 300}) book.Enqueue(c, false);
    ASSERT_TRUE(book.Record(0, Eval(100, 0.61)).ok());
    ASSERT_TRUE(book.Record(0, Eval(200, 0.8123456789012345)).ok());
    ASSERT_TRUE(book.Record(0, Eval(300, 0.7)).ok());
    ASSERT_TRUE(book.SetStopped(301).ok());
  }
  EXPECT_EQ(*checkpoint::ReadFileToString(dir + "/BEST"), "200\n");
  EvalBook again(Opts(dir, 1));
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.evaluations().size(), 3u);
  EXPECT_EQ(again.Best()->auc(), 0.8123456789012345);  // Bit for bit.
  EXPECT_EQ(again.stopped_at(), 301u);
  EXPECT_TRUE(again.ShouldStop());
  // A rollback to clock 150 forgets 200, 300 and the stop.
  ASSERT_TRUE(again.DropAfter(150).ok());
  EXPECT_EQ(again.stopped_at(), 0u);
  EXPECT_EQ(again.Best()->clock(), 100u);
  EXPECT_EQ(*checkpoint::ReadFileToString(dir + "/BEST"), "100\n");
  EvalBook third(Opts(dir, 1));
  ASSERT_TRUE(third.Load().ok());
  EXPECT_EQ(third.evaluations().size(), 1u);
}

TEST(EvalBookTest, AMalformedFileIsRefusedNamingTheLine) {
  const std::string dir = FreshDir("malformed");
  ASSERT_TRUE(checkpoint::WriteFileAtomically(dir + "/EVALUATIONS",
                                              "# header\neval 100 0.7 0.5 10 1\neval x\n")
                  .ok());
  EvalBook book(Opts(dir, 0));
  const absl::Status st = book.Load();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("EVALUATIONS:3"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace shardps
