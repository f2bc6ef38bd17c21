#include "scheduler/partition_move.h"

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

ClusterConfig Cluster() {
  ClusterConfig k;
  k.set_heartbeat_ms(100);
  k.set_server_deadline_ms(10000);
  return k;
}

PartitionMove::Step Step(uint64_t clock, uint64_t answers, absl::Status status,
                         uint32_t moved = 0) {
  PartitionMove::Step step;
  step.clock = clock;
  step.answers = answers;
  step.status = std::move(status);
  step.moved = moved;
  step.start = kT0;
  return step;
}

TEST(PartitionMoveTest, ARequestIsServedByTheStepThatMoves) {
  PartitionMove move(Cluster());
  EXPECT_FALSE(move.Wanted());
  const uint64_t seq = move.Request(3);
  EXPECT_TRUE(move.Wanted());
  EXPECT_EQ(move.target(), 3u);
  EXPECT_FALSE(move.Served(seq));
  // The first step pre-copies: the request stays pending.
  PartitionMove::InFlight in_flight;
  in_flight.clock = 10;
  in_flight.target = 3;
  move.Precopied(in_flight);
  PartitionMove::Step first = Step(10, seq, absl::OkStatus());
  first.first_done = true;
  EXPECT_FALSE(move.StepEnded(first, kT0 + absl::Seconds(1)));
  EXPECT_FALSE(move.Served(seq));
  ASSERT_TRUE(move.in_flight().has_value());
  // The second switches: served, counted, the move forgotten.
  PartitionMove::Step second = Step(12, seq, absl::OkStatus(), /*moved=*/5);
  second.stats.rows = 100;
  second.stats.bytes = 4000;
  EXPECT_FALSE(move.StepEnded(second, kT0 + absl::Seconds(3)));
  EXPECT_TRUE(move.Served(seq));
  EXPECT_FALSE(move.Wanted());
  EXPECT_FALSE(move.in_flight().has_value());
  auto answer = move.LastAnswer();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->clock, 12u);
  EXPECT_EQ(answer->moved, 5u);
  JobStatusResponse status;
  move.FillStatus(&status);
  EXPECT_EQ(status.reshards(), 1u);
  EXPECT_EQ(status.partitions_moved(), 5u);
  EXPECT_EQ(status.reshard_rows_moved(), 100u);
  EXPECT_EQ(status.reshard_bytes_moved(), 4000u);
  EXPECT_DOUBLE_EQ(status.last_reshard_sec(), 3.0);
}

// A failure of its own (not a server gone) answers the request with it;
// nothing to move answers it with 0 partitions.
TEST(PartitionMoveTest, AFailureOrNothingToMoveAnswersTheRequest) {
  PartitionMove move(Cluster());
  uint64_t seq = move.Request(2);
  EXPECT_FALSE(move.StepEnded(Step(4, seq,
                                   absl::FailedPreconditionError("server 2 is not "
                                                                 "registered")),
                              kT0));
  EXPECT_TRUE(move.Served(seq));
  EXPECT_EQ(move.LastAnswer().status().message(), "reshard: server 2 is not registered");
  seq = move.Request(2);
  EXPECT_FALSE(move.StepEnded(Step(6, seq, absl::OkStatus()), kT0));
  auto answer = move.LastAnswer();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->moved, 0u);
  JobStatusResponse status;
  move.FillStatus(&status);
  EXPECT_EQ(status.reshards(), 0u);
}

// A server gone before the switch: retried after a doubling backoff and once
// every server of the move is back, until server_deadline_ms after the
// first failure; then the request fails naming the missing servers.
TEST(PartitionMoveTest, AnUnreachableServerIsRetriedUntilTheDeadline) {
  PartitionMove move(Cluster());
  const uint64_t seq = move.Request(3);
  EXPECT_EQ(move.Involved(2), 3u);
  EXPECT_TRUE(move.MayStart(kT0, {}));
  EXPECT_TRUE(move.StepEnded(Step(4, seq, absl::UnavailableError("server 2 gone")), kT0));
  EXPECT_TRUE(move.RetryWaiting());
  EXPECT_FALSE(move.Served(seq));
  EXPECT_FALSE(move.MayStart(kT0 + absl::Milliseconds(100), {})) << "backoff: 200 ms";
  EXPECT_FALSE(move.MayStart(kT0 + absl::Milliseconds(300), {2})) << "server 2 missing";
  EXPECT_TRUE(move.MayStart(kT0 + absl::Milliseconds(300), {}));
  // A restarted destination refuses with a stale generation: retried too,
  // after twice the backoff.
  const absl::Time t1 = kT0 + absl::Milliseconds(300);
  EXPECT_TRUE(move.StepEnded(
      Step(6, seq, absl::FailedPreconditionError("stale generation 3 (server at 4)")), t1));
  EXPECT_FALSE(move.MayStart(t1 + absl::Milliseconds(300), {}));
  EXPECT_TRUE(move.MayStart(t1 + absl::Milliseconds(400), {}));
  // Past the deadline (10 s after the first failure) with server 2 gone.
  EXPECT_FALSE(move.MayStart(kT0 + absl::Seconds(11), {2}));
  EXPECT_TRUE(move.Served(seq));
  EXPECT_FALSE(move.RetryWaiting());
  const absl::Status failed = move.LastAnswer().status();
  EXPECT_NE(failed.message().find("the move at clock 6 failed"), std::string::npos) << failed;
  EXPECT_NE(failed.message().find("servers [2] were not back"), std::string::npos) << failed;
}

// A step whose cut is retried already is not counted as a move retry; a
// server failing after the switch is a recovery's, not the move's.
TEST(PartitionMoveTest, ARetriedCutOrASwitchDoneIsNoMoveRetry) {
  PartitionMove move(Cluster());
  const uint64_t seq = move.Request(3);
  PartitionMove::Step cut = Step(4, seq, absl::InternalError("disk full"));
  cut.cut_retried = true;
  EXPECT_TRUE(move.StepEnded(cut, kT0));
  EXPECT_FALSE(move.RetryWaiting());
  EXPECT_FALSE(move.Served(seq));
  EXPECT_FALSE(move.StepEnded(Step(6, seq, absl::UnavailableError("server 1 gone"), 4), kT0));
  EXPECT_TRUE(move.Served(seq));
  EXPECT_TRUE(move.LastAnswer().ok()) << "the map switched: the move is done";
}

// The move in flight is current only under the same generation, target and
// map; forgetting it starts the move again. Nobody training answers every
// request.
TEST(PartitionMoveTest, AStaleMoveIsForgottenAndAnEndingJobAnswersAll) {
  PartitionMove move(Cluster());
  PartitionMove::InFlight in_flight;
  in_flight.generation = 5;
  in_flight.target = 3;
  in_flight.map_version = 2;
  EXPECT_TRUE(in_flight.Current(5, 3, 2));
  EXPECT_FALSE(in_flight.Current(6, 3, 2));
  EXPECT_FALSE(in_flight.Current(5, 2, 2));
  EXPECT_FALSE(in_flight.Current(5, 3, 3));
  move.Precopied(in_flight);
  move.Forget();
  EXPECT_FALSE(move.in_flight().has_value());

  const uint64_t seq = move.Request(3);
  move.AnswerAll("every worker has finished: the job is ending");
  EXPECT_TRUE(move.Served(seq));
  EXPECT_EQ(move.LastAnswer().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardps
