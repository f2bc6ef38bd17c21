// Resharding with the real binaries (docs/design.md, "Resharding"): a BSP
// job on 2 servers, with a spare third one registered (cluster.max_servers
// 3), is moved to 3 servers and back to 2 while it trains (the Reshard RPC,
// as ps_status --servers does), and ends with weights bit-identical to the
// same job that never moved: undisturbed, with the destination SIGKILLed
// in the middle of the move, and with the scheduler SIGKILLed in it or after
// it (each restarted by the supervisor). The moves are
// placed by the job's clock (each worker step takes >= kStepDelayMs), and
// the kills by the points the servers and the scheduler stall at (ps_server
// and ps_scheduler --testing_stall_at), not by time.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::JobOutcome;
using testing::SupervisedJob;

// The moves are asked for at clocks 60 and about 130; each lands some tens of
// clocks after it is asked for. 600 steps of at least kStepDelayMs each leave
// the second move over 400 clocks (8 s or more) to land while the job trains.
constexpr uint64_t kSteps = 600;
constexpr int kStepDelayMs = 20;

constexpr char kCluster[] = R"pb(
name: "reshard"
data { format: CRITEO @DATA@ }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 max_servers: 3 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 4000 server_deadline_ms: 30000 worker_deadline_ms: 8000
}
checkpoint { dir: "@CKPT@" every_steps: 1000 keep: 3 }
)pb";

// `mode`: the cluster's consistency mode, as the config writes it.
SupervisedJob::Options JobOptions(const std::string& name, int servers,
                                  const std::string& mode = "BSP") {
  SupervisedJob::Options o;
  o.name = name;
  o.config = absl::StrCat(
      testing::kSmallDlrmTables,
      absl::StrReplaceAll(
          kCluster,
          {{"@DATA@", absl::StrCat("synthetic_dir: \"", ::testing::TempDir(), "/reshard_data\"")},
           {"mode: BSP", absl::StrCat("mode: ", mode)}}));
  o.servers = servers;
  o.worker_flags = {absl::StrCat("--max_steps=", kSteps),
                    absl::StrCat("--step_delay_ms=", kStepDelayMs)};
  o.supervisor = {0, absl::Seconds(1)};
  o.job_secret = false;
  return o;
}

// The sum over the servers of `field` in each one's last PS_SERVER_RESULT:
// "rows" (the rows it held at its end: a partition on two servers counts
// twice, one on none not at all) or "updates" (the optimizer steps its
// pushes applied to rows). nullopt if a server printed none.
std::optional<uint64_t> SumAtEnd(SupervisedJob& job, int servers, const std::string& field) {
  uint64_t total = 0;
  const std::string key = " " + field + "=";
  for (int i = 0; i < servers; ++i) {
    const std::string out = job.sup().Output(job.server(i));
    const size_t at = out.rfind("PS_SERVER_RESULT");
    if (at == std::string::npos) return std::nullopt;
    const size_t line_end = out.find('\n', at);
    const size_t r = out.find(key, at);
    uint64_t value;
    if (r == std::string::npos || r > line_end ||
        !absl::SimpleAtoi(
            out.substr(r + key.size(), out.find_first_of(" \n", r + key.size()) - r - key.size()),
            &value)) {
      return std::nullopt;
    }
    total += value;
  }
  return total;
}

std::optional<uint64_t> RowsAtEnd(SupervisedJob& job, int servers) {
  return SumAtEnd(job, servers, "rows");
}

// Waits until a server stalled at a --testing_stall_at point (its marker
// file exists); the index it wrote there, or nullopt (a test failure naming
// `what`) after `timeout`.
std::optional<int> WaitForStall(SupervisedJob& job, const std::string& marker,
                                const std::string& what, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int index = -1;
    if (std::ifstream in(marker); in >> index) return index;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ADD_FAILURE() << "no server stalled " << what << " within " << timeout << " (marker " << marker
                << ")\n"
                << job.Logs();
  return std::nullopt;
}

// A stall marker in the test's directory, absent: a --testing_stall_at
// armed with it stalls once.
std::string FreshMarker(const std::string& name) {
  const std::string marker = ::testing::TempDir() + "/" + name;
  std::filesystem::remove(marker);
  return marker;
}

class ReshardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(
        testing::MakeSyntheticData(::testing::TempDir() + "/reshard_data", 80000, 10000, 4).ok());
  }

  // The job that never moves, run once for the suite; `rows` its rows at
  // the end.
  static const JobOutcome& Still() {
    if (!still_) {
      SupervisedJob job(JobOptions("reshard_still", 2));
      EXPECT_TRUE(job.Start().ok());
      still_ = job.Finish(absl::Minutes(10), /*trained=*/true);
      still_rows_ = RowsAtEnd(job, 2).value_or(0);
    }
    return *still_;
  }
  static inline std::optional<JobOutcome> still_;
  static inline uint64_t still_rows_ = 0;

  // Moves `job` back to 2 servers while it trains; the answer, or nullopt
  // after a test failure.
  static std::optional<ReshardResponse> MoveBack(SupervisedJob& job) {
    auto down = SchedulerClient(job.address()).Reshard(2, absl::Minutes(2));
    EXPECT_TRUE(down.ok()) << down.status() << "\n" << job.Logs();
    if (!down.ok()) return std::nullopt;
    EXPECT_GT(down->partitions_moved(), 0u);
    EXPECT_LT(down->clock(), kSteps) << "the move back must happen while the job trains";
    return *down;
  }

  // Ends `job` (3 servers started) and expects what the job that never
  // moved ended with: exit 0, the same weights and AUC, and its rows (no
  // partition on two servers or on none). The outcome, for more checks.
  static JobOutcome ExpectAsStill(SupervisedJob& job, const char* what) {
    const JobOutcome moved = job.Finish(absl::Minutes(10), /*trained=*/true);
    EXPECT_EQ(moved.code, 0) << moved.result;
    EXPECT_NE(still_->checksum, 0u);
    EXPECT_EQ(moved.checksum, still_->checksum) << "weights differ after the moves\n" << job.Logs();
    EXPECT_EQ(moved.auc, still_->auc);
    EXPECT_EQ(RowsAtEnd(job, 3), still_rows_) << "a partition on two servers or on none";
    std::printf("BSP, %s: weights %016llx unmoved, %016llx moved\n", what,
                static_cast<unsigned long long>(still_->checksum),
                static_cast<unsigned long long>(moved.checksum));
    return moved;
  }
};

TEST_F(ReshardTest, BspTwoToThreeToTwoEndsBitIdentical) {
  const JobOutcome& still = Still();
  ASSERT_EQ(still.code, 0) << still.result;

  SupervisedJob job(JobOptions("reshard_moved", 3));  // Server 2 is a spare.
  ASSERT_TRUE(job.Start().ok());
  SchedulerClient client(job.address());
  ASSERT_TRUE(job.ExpectClock(60));
  auto up = client.Reshard(3, absl::Minutes(2));
  ASSERT_TRUE(up.ok()) << up.status() << "\n" << job.Logs();
  EXPECT_GT(up->partitions_moved(), 0u);
  ASSERT_TRUE(job.ExpectClock(up->clock() + 20));
  const std::optional<ReshardResponse> down = MoveBack(job);
  ASSERT_TRUE(down.has_value());
  auto status = client.JobStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->reshards(), 2u);
  EXPECT_EQ(status->map_servers(), 2u);
  EXPECT_EQ(status->map_version(), down->map_version());
  EXPECT_EQ(status->partitions_moved(), up->partitions_moved() + down->partitions_moved());
  EXPECT_GT(status->reshard_rows_moved(), 0u);
  EXPECT_GT(status->reshard_bytes_moved(), 0u);
  EXPECT_GT(status->last_reshard_sec(), 0.0);
  const JobOutcome moved = ExpectAsStill(job, "moved 2 -> 3 -> 2");
  EXPECT_EQ(moved.fields.at("reshards"), "2") << moved.result;
  EXPECT_EQ(moved.fields.at("partitions_moved"),
            std::to_string(up->partitions_moved() + down->partitions_moved()))
      << moved.result;
  std::printf("  moved at clocks %llu, %llu\n", static_cast<unsigned long long>(up->clock()),
              static_cast<unsigned long long>(down->clock()));
}

// The destination of the 2 -> 3 move (the spare, server 2) is SIGKILLed
// three times in it: after it pre-copied the moving partitions and before
// it answered, then after its catch-up and before it answered (each time
// the move fails before its switch, the old map stays, and the move starts
// again from a pre-copy once the supervisor has restarted it), then in the
// switch, before it took the new map (a server lost under the new map: the
// job rolls back to the move's cut). Every server holds the stall flags;
// the markers make each stall happen once. The job then moves back to 2
// servers and ends bit-identical to the job that never moved, with each
// partition on exactly one server.
TEST_F(ReshardTest, BspDestinationKilledMidMoveEndsBitIdentical) {
  const JobOutcome& still = Still();
  ASSERT_EQ(still.code, 0) << still.result;

  SupervisedJob::Options o = JobOptions("reshard_killed", 3);
  o.supervisor = {5, absl::Seconds(1)};
  const std::string added = FreshMarker("stall-partitions-added");
  const std::string caught_up = FreshMarker("stall-caught-up");
  const std::string switching = FreshMarker("stall-switching-map");
  o.server_flags = {absl::StrCat("--testing_stall_at=partitions_added:", added,
                                 ",caught_up:", caught_up, ",switching_map:", switching)};
  SupervisedJob job(o);
  ASSERT_TRUE(job.Start().ok());
  ASSERT_TRUE(job.ExpectClock(60));
  const std::string address = job.address();
  auto up = std::async(std::launch::async,
                       [address] { return SchedulerClient(address).Reshard(3, absl::Minutes(4)); });

  for (const auto& [marker, where] : {std::make_pair(added, "after pre-copying its partitions"),
                                      std::make_pair(caught_up, "after its catch-up")}) {
    const std::optional<int> stalled = WaitForStall(job, marker, where, absl::Minutes(3));
    ASSERT_TRUE(stalled.has_value());
    EXPECT_EQ(*stalled, 2) << "the destination of 2 -> 3 is the spare";
    job.sup().Signal(job.server(*stalled), SIGKILL);
  }
  const std::optional<int> switched =
      WaitForStall(job, switching, "in the map switch", absl::Minutes(3));
  ASSERT_TRUE(switched.has_value());
  EXPECT_EQ(*switched, 2);
  job.sup().Signal(job.server(*switched), SIGKILL);

  auto moved_up = up.get();
  ASSERT_TRUE(moved_up.ok()) << moved_up.status() << "\n" << job.Logs();
  EXPECT_GT(moved_up->partitions_moved(), 0u);
  ASSERT_TRUE(job.ExpectClock(moved_up->clock() + 20));
  ASSERT_TRUE(MoveBack(job).has_value());
  auto status = SchedulerClient(job.address()).JobStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->reshards(), 2u);
  EXPECT_EQ(status->map_servers(), 2u);

  const JobOutcome moved = ExpectAsStill(job, "the destination killed three times mid-move");
  EXPECT_EQ(job.sup().Restarts(job.server(2)), 3) << "server 2 was killed three times";
  EXPECT_GE(moved.recoveries, 1) << "the kill in the switch rolls the job back\n" << job.Logs();
}

// The scheduler is SIGKILLed after a 2 -> 3 move and restarted by the
// supervisor: the servers rejoin holding the moved map, and the restarted
// scheduler takes the job over on it (3 servers), moves it back to 2 and
// ends bit-identical to the job that never moved.
TEST_F(ReshardTest, BspSchedulerKilledAfterMoveEndsBitIdentical) {
  const JobOutcome& still = Still();
  ASSERT_EQ(still.code, 0) << still.result;

  SupervisedJob::Options o = JobOptions("reshard_scheduler", 3);
  o.supervisor = {5, absl::Seconds(1)};
  SupervisedJob job(o);
  ASSERT_TRUE(job.Start().ok());
  ASSERT_TRUE(job.ExpectClock(60));
  auto up = SchedulerClient(job.address()).Reshard(3, absl::Minutes(2));
  ASSERT_TRUE(up.ok()) << up.status() << "\n" << job.Logs();
  EXPECT_GT(up->partitions_moved(), 0u);
  ASSERT_TRUE(job.ExpectClock(up->clock() + 20));

  job.sup().Signal(job.scheduler(), SIGKILL);
  auto back = job.WaitFor(
      "the restarted scheduler running the job on the moved map",
      [&job](const JobStatusResponse& s) {
        return job.sup().Restarts(job.scheduler()) == 1 && s.state() == "running" &&
               s.map_servers() == 3;
      },
      absl::Minutes(2));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << job.Logs();
  EXPECT_GT(back->map_version(), up->map_version());
  ASSERT_TRUE(job.ExpectClock(back->min_clock() + 20));
  ASSERT_TRUE(MoveBack(job).has_value());

  ExpectAsStill(job, "the scheduler killed after a move");
  EXPECT_EQ(job.sup().Restarts(job.scheduler()), 1);
  EXPECT_TRUE(absl::StrContains(job.SchedulerLog(), "the job goes on with its owners"))
      << job.Logs();
}

// The scheduler is SIGKILLed twice during a 2 -> 3 move and restarted by
// the supervisor each time (ps_scheduler --testing_stall_at; the markers
// make each stall happen once): first after every destination added its
// partitions, before the switch (the servers still agree on the old map:
// the restarted scheduler takes the job over on it, the move is lost with
// its request and asked for again; the destination drops the rows it holds
// unowned before it adds them again); then in the switch of the second
// try, once server 0 has taken the new map and the others not (the
// servers rejoin with different maps: the job rolls back to the move's
// cut under the newest map). The job then moves back to 2 servers and ends
// bit-identical to the job that never moved, each partition on one server.
TEST_F(ReshardTest, BspSchedulerKilledDuringMoveEndsBitIdentical) {
  const JobOutcome& still = Still();
  ASSERT_EQ(still.code, 0) << still.result;

  SupervisedJob::Options o = JobOptions("reshard_scheduler_mid", 3);
  o.supervisor = {5, absl::Seconds(1)};
  const std::string added = FreshMarker("stall-reshard-added");
  const std::string switching = FreshMarker("stall-reshard-switch");
  o.scheduler_flags = {
      absl::StrCat("--testing_stall_at=reshard_added:", added, ",reshard_switching:", switching)};
  SupervisedJob job(o);
  ASSERT_TRUE(job.Start().ok());
  ASSERT_TRUE(job.ExpectClock(60));

  // Asks for 2 -> 3 in the background, waits for the scheduler's stall at
  // `marker`, SIGKILLs it there and waits for its `restarts`-th incarnation
  // to run the job on `servers` servers.
  auto kill_in_move = [&](const std::string& marker, const char* where, int restarts,
                          uint32_t servers) {
    const std::string address = job.address();
    auto up = std::async(std::launch::async, [address] {
      return SchedulerClient(address).Reshard(3, absl::Minutes(4));
    });
    ASSERT_TRUE(WaitForStall(job, marker, where, absl::Minutes(3)).has_value());
    job.sup().Signal(job.scheduler(), SIGKILL);
    EXPECT_FALSE(up.get().ok()) << "the request dies with its scheduler";
    auto back = job.WaitFor(
        absl::StrCat("the restarted scheduler running the job on ", servers, " servers"),
        [&](const JobStatusResponse& s) {
          return job.sup().Restarts(job.scheduler()) == restarts && s.state() == "running" &&
                 s.map_servers() == servers;
        },
        absl::Minutes(3));
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << job.Logs();
    ASSERT_TRUE(job.ExpectClock(back->min_clock() + 10));
  };
  kill_in_move(added, "after the destinations added their partitions", 1, 2);
  kill_in_move(switching, "in the map switch", 2, 3);

  ASSERT_TRUE(MoveBack(job).has_value());

  const JobOutcome moved = ExpectAsStill(job, "the scheduler killed twice mid-move");
  EXPECT_EQ(job.sup().Restarts(job.scheduler()), 2);
  EXPECT_GE(moved.recoveries, 1) << "the kill in the switch rolls the job back\n" << job.Logs();
}

// The job in `mode` (SSP or ASP) without a move, then moved 2 -> 3 -> 2
// while it trains: the same samples, the same rows on one server each, the
// same number of row updates over all servers (each row of each push
// applied once: none lost, none twice), no recovery, and the AUC within
// `auc_bound`.
void ExpectMovedLikeStill(const std::string& name, const std::string& mode, double auc_bound) {
  JobOutcome still;
  std::optional<uint64_t> still_rows, still_updates;
  {
    SupervisedJob job(JobOptions(name + "_still", 2, mode));
    ASSERT_TRUE(job.Start().ok());
    still = job.Finish(absl::Minutes(10), /*trained=*/true);
    still_rows = RowsAtEnd(job, 2);
    still_updates = SumAtEnd(job, 2, "updates");
  }
  ASSERT_EQ(still.code, 0) << still.result;

  SupervisedJob job(JobOptions(name + "_moved", 3, mode));
  ASSERT_TRUE(job.Start().ok());
  SchedulerClient client(job.address());
  ASSERT_TRUE(job.ExpectClock(60));
  auto up = client.Reshard(3, absl::Minutes(2));
  ASSERT_TRUE(up.ok()) << up.status() << "\n" << job.Logs();
  EXPECT_GT(up->partitions_moved(), 0u);
  ASSERT_TRUE(job.ExpectClock(up->clock() + 20));
  auto down = client.Reshard(2, absl::Minutes(2));
  ASSERT_TRUE(down.ok()) << down.status() << "\n" << job.Logs();
  EXPECT_LT(down->clock(), kSteps) << "the second move must happen while the job trains";
  const JobOutcome moved = job.Finish(absl::Minutes(10), /*trained=*/true);
  EXPECT_EQ(moved.code, 0) << moved.result;
  EXPECT_EQ(moved.fields.at("reshards"), "2") << moved.result;
  EXPECT_EQ(moved.fields.at("samples"), still.fields.at("samples"));
  EXPECT_EQ(moved.recoveries, 0) << moved.result;
  EXPECT_NEAR(moved.auc, still.auc, auc_bound);
  ASSERT_TRUE(still_rows.has_value());
  EXPECT_EQ(RowsAtEnd(job, 3), still_rows) << "a partition on two servers or on none";
  ASSERT_TRUE(still_updates.has_value());
  EXPECT_GT(*still_updates, 0u);
  const std::optional<uint64_t> moved_updates = SumAtEnd(job, 3, "updates");
  EXPECT_EQ(moved_updates, still_updates) << "a push lost or applied twice";
  std::printf(
      "%s: AUC %.6f unmoved, %.6f moved 2 -> 3 -> 2 at clocks %llu, %llu; %llu row "
      "updates\n",
      mode.c_str(), still.auc, moved.auc, static_cast<unsigned long long>(up->clock()),
      static_cast<unsigned long long>(down->clock()),
      static_cast<unsigned long long>(moved_updates.value_or(0)));
}

// SSP(2): a move's catch-up holds every worker at the first clock none has
// started, so every push before it is in the cut the destinations catch up
// from (pushes between the steps too, in its delta), and none is sent until
// the switch. The job moved 2 -> 3 -> 2 trains every sample once, applies
// each row of each push once (its servers' row updates sum to the unmoved
// job's exactly: the count depends on the data, not on timing), ends with
// the same rows on one server each, and reaches the AUC of the job that
// never moved within 0.01: SSP is not bit-identical between runs, and eight
// runs of this small job without a move spanned 0.7559 to 0.7640.
TEST_F(ReshardTest, Ssp2TwoToThreeToTwoAppliesEveryPushOnce) {
  ExpectMovedLikeStill("reshard_ssp", "SSP staleness: 2", 0.01);
}

// ASP: the same argument (the catch-up's cut holds every push acknowledged
// before it; none is sent until the switch; a refused push is sent again to
// the new owner). Two unmoved ASP runs of this job differ as SSP's do.
TEST_F(ReshardTest, AspTwoToThreeToTwoAppliesEveryPushOnce) {
  ExpectMovedLikeStill("reshard_asp", "ASP", 0.01);
}

}  // namespace
}  // namespace shardps
