#include "scheduler/recovery_book.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RecoveryBookTest, FailuresGatherIntoOnePendingRecoveryEachCauseOnce) {
  RecoveryBook book;
  EXPECT_TRUE(book.idle());
  EXPECT_EQ(book.pending(), nullptr);
  RecoveryBook::Pending& first =
      book.Pend("server 0 missed heartbeats", kT0, kT0 + absl::Seconds(2));
  first.silent.insert(0);
  RecoveryBook::Pending& again = book.Pend("server 1 came back with another state",
                                           kT0 + absl::Seconds(1), kT0 + absl::Seconds(3));
  again.lost.insert(1);
  book.Pend("server 0 missed heartbeats", kT0 + absl::Seconds(5), kT0 + absl::Seconds(6));
  ASSERT_NE(book.pending(), nullptr);
  const RecoveryBook::Pending& p = *book.pending();
  EXPECT_EQ(p.cause, "server 0 missed heartbeats; server 1 came back with another state");
  // The first failure's times stay: detection counts from it.
  EXPECT_EQ(p.failed_at, kT0);
  EXPECT_EQ(p.detected_at, kT0 + absl::Seconds(2));
  EXPECT_EQ(p.silent, std::set<uint32_t>{0});
  EXPECT_EQ(p.lost, std::set<uint32_t>{1});
  EXPECT_FALSE(book.idle());
  EXPECT_EQ(book.Waiting(), "a recovery to start (" + p.cause + ")");
}

TEST(RecoveryBookTest, ARunningRecoveryIsWaitedForUntilItIsOver) {
  RecoveryBook book;
  book.Pend("worker 1 cannot redo step 7 exactly", kT0, kT0).roll_back = true;
  EXPECT_TRUE(book.pending()->roll_back);
  book.ClearPending();
  book.SetDoing("restoring every server");
  EXPECT_FALSE(book.idle());
  EXPECT_EQ(book.Waiting(), "the recovery: restoring every server");
  // A failure during the recovery is pending beside it: the running one
  // is named first.
  book.Pend("server 0 missed heartbeats", kT0, kT0);
  EXPECT_EQ(book.Waiting(), "the recovery: restoring every server");
  book.ClearDoing();
  EXPECT_FALSE(book.idle());
  book.ClearPending();
  EXPECT_TRUE(book.idle());
  EXPECT_EQ(book.Waiting(), "");
}

TEST(RecoveryBookTest, TheRewindCompletesTheNewestIncompleteReport) {
  RecoveryBook book;
  RecoveryReport done;
  done.set_kind("rejoin");
  done.set_complete(true);
  done.set_total_sec(0.5);
  book.Record(done);
  RecoveryReport rollback;
  rollback.set_kind("rollback");
  rollback.set_detect_sec(1);
  rollback.set_wait_sec(2);
  rollback.set_restore_sec(0.25);
  book.Record(rollback);
  book.RewindStarted(kT0);
  book.CompleteRewind(kT0 + absl::Milliseconds(1500));
  ASSERT_EQ(book.reports().size(), 2u);
  const RecoveryReport& r = book.reports()[1];
  EXPECT_TRUE(r.complete());
  EXPECT_DOUBLE_EQ(r.rewind_sec(), 1.5);
  EXPECT_DOUBLE_EQ(r.total_sec(), 1 + 2 + 0.25 + 1.5);
  // The complete one is untouched, and a second completion changes nothing.
  EXPECT_DOUBLE_EQ(book.reports()[0].total_sec(), 0.5);
  book.CompleteRewind(kT0 + absl::Seconds(9));
  EXPECT_DOUBLE_EQ(book.reports()[1].rewind_sec(), 1.5);
}

}  // namespace
}  // namespace shardps
