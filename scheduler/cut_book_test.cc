#include "scheduler/cut_book.h"

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

JobConfig Config(uint64_t every_steps, uint32_t eval_every_steps, uint64_t every_seconds) {
  JobConfig config;
  config.mutable_checkpoint()->set_every_steps(every_steps);
  config.mutable_checkpoint()->set_every_seconds(every_seconds);
  config.mutable_training()->set_eval_every_steps(eval_every_steps);
  return config;
}

TEST(CutBookTest, CutsGoAtTheFirstMultipleOfEitherCadence) {
  const CutBook book(Config(10, 4, 0));
  EXPECT_EQ(book.multiples(), (std::vector<uint64_t>{10, 4}));
  EXPECT_EQ(book.NextAfter(0), 4u);
  EXPECT_EQ(book.NextAfter(4), 8u);
  EXPECT_EQ(book.NextAfter(8), 10u);
  EXPECT_EQ(book.NextAfter(10), 12u);
  const CutBook none(Config(0, 0, 0));
  EXPECT_TRUE(none.multiples().empty());
  EXPECT_EQ(none.NextAfter(7), 0u);
  EXPECT_FALSE(none.TimeDue(kT0));
}

TEST(CutBookTest, VersionsGoBetweenCheckpointsOnceOneIsComplete) {
  JobConfig config = Config(30, 0, 0);
  config.mutable_checkpoint()->set_version_every_steps(10);
  CutBook book(config);
  EXPECT_EQ(book.NextAfter(0), 10u);
  EXPECT_EQ(book.NextAfter(20), 30u);
  // No complete checkpoint to be a delta on: the first cut is a checkpoint.
  EXPECT_FALSE(book.VersionOnly(10, kT0));
  book.Completed(10, absl::OkStatus(), 0, absl::Milliseconds(10), absl::Seconds(1), kT0);
  EXPECT_TRUE(book.VersionOnly(20, kT0));
  EXPECT_FALSE(book.VersionOnly(30, kT0));  // A checkpoint multiple.
  EXPECT_FALSE(book.VersionOnly(25, kT0));  // No multiple (a time-due cut).
  book.VersionCompleted(20, absl::OkStatus(), absl::Milliseconds(5));
  book.VersionCompleted(40, absl::UnavailableError("server 1 gone"), absl::Milliseconds(5));
  EXPECT_EQ(book.versions(), 1u);
  EXPECT_EQ(book.last_version(), 20u);
  EXPECT_EQ(book.last_complete(), 10u);  // Versions are no checkpoints.
  // A request not served yet, or a failed checkpoint to retry: a checkpoint.
  book.Request();
  EXPECT_FALSE(book.VersionOnly(40, kT0));
  book.Completed(30, absl::InternalError("disk full"), book.requested(), absl::ZeroDuration(),
                 absl::ZeroDuration(), kT0);
  ASSERT_TRUE(book.CountFailure(kT0).has_value());
  EXPECT_FALSE(book.VersionOnly(40, kT0));
  book.Completed(30, absl::OkStatus(), book.requested(), absl::Milliseconds(10), absl::Seconds(1),
                 kT0);
  EXPECT_TRUE(book.VersionOnly(40, kT0));
  // Due by time: a checkpoint.
  JobConfig timed = config;
  timed.mutable_checkpoint()->set_every_seconds(60);
  CutBook by_time(timed);
  by_time.Completed(10, absl::OkStatus(), 0, absl::Milliseconds(10), absl::Seconds(1), kT0);
  EXPECT_TRUE(by_time.VersionOnly(20, kT0 + absl::Seconds(59)));
  EXPECT_FALSE(by_time.VersionOnly(20, kT0 + absl::Seconds(60)));
  // A rollback to the initial values: no base until a checkpoint again.
  book.StartFrom(0);
  EXPECT_FALSE(book.VersionOnly(40, kT0));
}

TEST(CutBookTest, EverySecondsCountsFromTheLastCutWhateverItsOutcome) {
  CutBook book(Config(0, 0, 30));
  EXPECT_TRUE(book.TimeDue(kT0));  // No cut yet: at once.
  book.Completed(5, absl::OkStatus(), 0, absl::Milliseconds(10), absl::Seconds(1), kT0);
  EXPECT_FALSE(book.TimeDue(kT0 + absl::Seconds(29)));
  EXPECT_TRUE(book.TimeDue(kT0 + absl::Seconds(30)));
  book.Completed(9, absl::InternalError("disk full"), 0, absl::ZeroDuration(), absl::ZeroDuration(),
                 kT0 + absl::Seconds(40));
  EXPECT_FALSE(book.TimeDue(kT0 + absl::Seconds(60)));
}

TEST(CutBookTest, ARequestIsServedByTheFirstCutCompletedAfterIt) {
  CutBook book(Config(0, 0, 0));
  const uint64_t first = book.Request();
  const uint64_t second = book.Request();
  EXPECT_EQ(book.requested(), second);
  EXPECT_FALSE(book.Served(first));
  // The cut placed for the first request completes; the second waits.
  book.Completed(3, absl::OkStatus(), first, absl::ZeroDuration(), absl::ZeroDuration(), kT0);
  EXPECT_TRUE(book.Served(first));
  EXPECT_FALSE(book.Served(second));
  EXPECT_EQ(*book.LastCut(), 3u);
  book.Completed(6, absl::UnavailableError("server 1 is gone"), second, absl::ZeroDuration(),
                 absl::ZeroDuration(), kT0);
  EXPECT_TRUE(book.Served(second));
  EXPECT_EQ(book.LastCut().status().code(), absl::StatusCode::kUnavailable);
  // Only the written one counts as a checkpoint.
  EXPECT_EQ(book.written(), std::vector<uint64_t>{3});
  EXPECT_EQ(book.last_complete(), 3u);
}

TEST(CutBookTest, FailuresInARowBackOffThenFailTheJobAndAWrittenCutResetsThem) {
  CutBook book(Config(10, 0, 0));
  EXPECT_FALSE(book.RetryDue(kT0));
  ASSERT_EQ(book.CountFailure(kT0), absl::Seconds(1));
  EXPECT_FALSE(book.RetryDue(kT0 + absl::Milliseconds(999)));
  EXPECT_TRUE(book.RetryDue(kT0 + absl::Seconds(1)));
  EXPECT_FALSE(book.FinalDue(kT0));  // The final cut waits for the retry's time too.
  ASSERT_EQ(book.CountFailure(kT0 + absl::Seconds(1)), absl::Seconds(2));
  EXPECT_FALSE(book.CountFailure(kT0 + absl::Seconds(3)).has_value());
  EXPECT_EQ(book.failures(), CutBook::kAttempts);

  CutBook again(Config(10, 0, 0));
  ASSERT_TRUE(again.CountFailure(kT0).has_value());
  ASSERT_TRUE(again.CountFailure(kT0).has_value());
  again.Completed(10, absl::OkStatus(), 0, absl::Milliseconds(20), absl::Milliseconds(300), kT0);
  EXPECT_EQ(again.failures(), 0);
  EXPECT_FALSE(again.RetryDue(kT0 + absl::Seconds(10)));
  EXPECT_DOUBLE_EQ(again.last_hold_sec(), 0.02);
  EXPECT_DOUBLE_EQ(again.last_write_sec(), 0.3);
}

TEST(CutBookTest, ARollbackTakesTheFinalCutAgain) {
  CutBook book(Config(10, 0, 0));
  book.Completed(20, absl::OkStatus(), 0, absl::ZeroDuration(), absl::ZeroDuration(), kT0);
  book.FinalDone();
  EXPECT_FALSE(book.FinalDue(kT0));
  book.StartFrom(10);
  EXPECT_TRUE(book.FinalDue(kT0));
  EXPECT_EQ(book.last_complete(), 10u);
  book.StartFrom(0);  // To the initial values.
  EXPECT_EQ(book.last_complete(), 0u);
  // What was written stays written.
  EXPECT_EQ(book.written(), std::vector<uint64_t>{20});
}

}  // namespace
}  // namespace shardps
