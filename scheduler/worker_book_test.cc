#include "scheduler/worker_book.h"

#include "gtest/gtest.h"

namespace shardps {
namespace {

MetricsReport Report(uint32_t rank, uint64_t step, uint64_t samples, bool final = false) {
  MetricsReport r;
  r.set_rank(rank);
  r.set_step(step);
  r.set_samples(samples);
  r.set_final(final);
  r.set_done(final);
  r.set_samples_per_sec(100);
  r.set_train_loss(0.5);
  r.set_train_auc(0.7);
  return r;
}

Member Worker(uint32_t index, MemberState state, const std::string& reason = "") {
  Member m;
  m.role = WORKER;
  m.index = index;
  m.state = state;
  m.reason = reason;
  return m;
}

TEST(WorkerBookTest, APositionBelongsToItsClock) {
  WorkerBook book(2);
  book.RecordPosition(0, 4, "w0@4");
  EXPECT_EQ(book.PositionAt(0, 4), "w0@4");
  EXPECT_EQ(book.PositionAt(0, 5), "") << "none recorded at clock 5";
  EXPECT_EQ(book.PositionAt(1, 4), "");
  book.RecordPosition(1, 4, "w1@4");
  EXPECT_EQ(book.LatestPositions(), (WorkerBook::Positions{{0, "w0@4"}, {1, "w1@4"}}));
}

TEST(WorkerBookTest, ReportsMarkTheFinalOneAndARewindForgetsThem) {
  WorkerBook book(3);
  book.RecordReport(Report(0, 10, 40));
  EXPECT_FALSE(book.reported_final(0));
  book.RecordReport(Report(1, 12, 48, /*final=*/true));
  book.RecordReport(Report(2, 9, 36, /*final=*/true));
  EXPECT_TRUE(book.reported_final(1));
  EXPECT_EQ(book.LongestFinished(), 12u);
  book.RecordPosition(0, 10, "w0@10");
  book.Enter("eval", 2);
  book.Rewind(8, {{0, "p0"}, {1, "p1"}});
  EXPECT_FALSE(book.reported_final(1));
  EXPECT_TRUE(book.reports().empty());
  EXPECT_FALSE(book.Entered("eval", 2));
  EXPECT_EQ(book.PositionAt(0, 8), "p0");
  EXPECT_EQ(book.PositionAt(0, 10), "");
  EXPECT_EQ(book.LongestFinished(), 0u);
}

TEST(WorkerBookTest, ARejoiningWorkerBringsItsPositionReportAndFinish) {
  WorkerBook book(2);
  Rejoin training;
  training.set_clock(7);
  training.set_position("w0@7");
  *training.mutable_last_report() = Report(0, 6, 24);
  book.Rejoined(0, training);
  EXPECT_EQ(book.PositionAt(0, 7), "w0@7");
  EXPECT_EQ(book.reports().at(0).step(), 6u);
  EXPECT_FALSE(book.reported_final(0));
  Rejoin finished;
  finished.set_clock(20);
  finished.set_finished(true);
  *finished.mutable_last_report() = Report(1, 20, 80, /*final=*/true);
  book.Rejoined(1, finished);
  EXPECT_TRUE(book.reported_final(1));
}

TEST(WorkerBookTest, ABarrierCountsItsOwnEntries) {
  WorkerBook book(2);
  EXPECT_FALSE(book.Entered("a", 0));
  book.Enter("a", 0);
  EXPECT_TRUE(book.Entered("a", 0));
  EXPECT_FALSE(book.Entered("a", 1));
  EXPECT_FALSE(book.Entered("b", 0));
}

TEST(WorkerBookTest, TheSummaryAndTheTrainingFigures) {
  WorkerBook book(3);
  book.RecordReport(Report(0, 12, 48, /*final=*/true));
  book.RecordReport(Report(1, 5, 20));
  const std::vector<Member> members = {Worker(0, FINISHED), Worker(1, ALIVE),
                                       Worker(2, DEAD, "missed heartbeats")};
  const std::string waited = book.Summary(members, {12, 6, 3}, /*drops=*/false);
  EXPECT_NE(waited.find("worker 0: finished after 12 steps"), std::string::npos) << waited;
  EXPECT_NE(waited.find("worker 1: training after 6 steps"), std::string::npos) << waited;
  EXPECT_NE(waited.find("worker 2: DEAD, data unfinished after 3 steps (waited for; its shard "
                        "from step 3 on is not trained yet): missed heartbeats"),
            std::string::npos)
      << waited;
  const std::string dropped = book.Summary(members, {12, 6, 3}, /*drops=*/true);
  EXPECT_NE(dropped.find("(its shard from step 3 on was not trained)"), std::string::npos)
      << dropped;

  JobStatusResponse status;
  // Worker 1's tick is ahead of its report; worker 2 only ticked.
  book.FillStatus({{1, 24}, {2, 12}}, &status);
  EXPECT_EQ(status.total_samples(), 48u + 24u + 12u);
  EXPECT_DOUBLE_EQ(status.samples_per_sec(), 100) << "the finished worker does not count";
  EXPECT_DOUBLE_EQ(status.train_loss(), 0.5);
  EXPECT_DOUBLE_EQ(status.train_auc(), 0.7);
  JobStatusResponse saturated;
  book.FillStatus({{2, UINT64_MAX}}, &saturated);
  EXPECT_EQ(saturated.total_samples(), UINT64_MAX);
}

}  // namespace
}  // namespace shardps
