// Recovery the way a cluster runs a job: the bare binaries, each kept up by
// a supervisor (tests/testing/supervised_job.h) that starts
// whatever dies again with exactly the same flags, as a StatefulSet, a
// Deployment, an Indexed Job or a Slurm step loop does. No launcher, and no
// flag an operator would have to remember: the scheduler owns recovery.
//
//  - BSP: a server SIGKILLed three times at random clocks (faults are
//    placed by the job's clock, which the test reads from the scheduler,
//    and every worker step takes >= 20 ms, so no machine is fast enough to
//    end the job first), once during a checkpoint's background write: the job ends with weights
//    bit-identical to the job that never failed, and a push of the generation before the first
//    rollback is refused by a live server.
//  - SSP(2): the same kills; the AUC ends within 0.01 of the uninterrupted
//    run.
//  - The scheduler and a server SIGKILLed together: bit-identical (BSP).
//  - A server stalled (SIGSTOP) past dead_after_ms rejoins with its state;
//    a server stopped by SIGTERM mid-job exits non-zero and is restarted.
//  - Every worker dead (a data file that does not exist): the job fails and
//    says which workers died and why.
#include <signal.h>

#include <cstdio>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::Checkpoints;
using testing::JobOutcome;
using testing::SupervisedJob;

// Each worker trains kSteps steps, each at least kStepDelayMs long (>= 10 s
// of training whatever the machine's speed); faults are planned by clock
// well before kSteps.
constexpr uint64_t kSteps = 500;
constexpr int kStepDelayMs = 20;

// The job after the tables and model (testing::kSmallDlrmTables).
constexpr char kCluster[] = R"pb(
name: "cluster-chaos"
data { format: CRITEO @DATA@ }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 @MODE@
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000 worker_deadline_ms: 4000
}
checkpoint { dir: "@CKPT@" every_steps: 40 keep: 2 }
)pb";

// One job: scheduler, 2 servers and 2 workers, each under the supervisor,
// on fixed ports (a restarted server comes back at its address, as a
// StatefulSet pod does), without a job secret (the test's own pushes and
// JobStatus calls come without one). Start-up failures fail the test.
class Job : public SupervisedJob {
 public:
  Job(const std::string& name, const std::string& mode, const std::string& data,
      const std::vector<std::string>& server_flags = {}, int max_restarts = 5)
      : SupervisedJob(MakeOptions(name, mode, data, server_flags, max_restarts)) {
    const absl::Status started = Start();
    EXPECT_TRUE(started.ok()) << started;
  }

  JobOutcome Finish(bool trained = true) {
    return SupervisedJob::Finish(absl::Minutes(10), trained);
  }

 private:
  static Options MakeOptions(const std::string& name, const std::string& mode,
                             const std::string& data, const std::vector<std::string>& server_flags,
                             int max_restarts) {
    Options o;
    o.name = name;
    o.config = absl::StrCat(testing::kSmallDlrmTables,
                            absl::StrReplaceAll(kCluster, {{"@DATA@", data}, {"@MODE@", mode}}));
    o.server_flags = server_flags;
    o.worker_flags = {absl::StrCat("--max_steps=", kSteps),
                      absl::StrCat("--step_delay_ms=", kStepDelayMs)};
    o.supervisor = {max_restarts, absl::Seconds(1)};
    o.job_secret = false;
    return o;
  }
};

std::string SyntheticData() {
  return absl::StrCat("synthetic_dir: \"", ::testing::TempDir(), "/cluster_chaos_data\"");
}

// Waits for a checkpoint newer than `after`; false if the job ended first.
bool WaitForCheckpointAfter(Job& job, uint64_t after) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    if (Checkpoints(job.ckpt()).complete > after) return true;
    if (job.Ended()) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// Waits until a checkpoint's files are being written (its directory exists,
// its MANIFEST not yet); false if the job ended first.
bool WaitForCheckpointWrite(Job& job) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    if (Checkpoints(job.ckpt()).writing) return true;
    if (job.Ended()) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

// The job's generation and whether its recoveries are all complete.
std::pair<uint64_t, bool> Generation(const std::string& address) {
  SchedulerClient client(address);
  auto status = client.JobStatus();
  if (!status.ok()) return {0, false};
  bool complete = true;
  for (const auto& r : status->recoveries()) complete &= r.complete();
  return {status->generation(), complete && status->state() == "running"};
}

// A push of one key with `generation` to `address`.
grpc::Status PushWithGeneration(const std::string& address, uint64_t generation) {
  auto stub =
      ParameterServer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  PushRequest request;
  request.set_generation(generation);
  request.set_clock(1);
  PushResponse response;
  return stub->Push(&ctx, request, &response);
}

// Runs the job, SIGKILLing servers `kills` times, kill k at a random clock
// in [80 + 130k, 120 + 130k) (checkpoints every 40 clocks: each kill rolls
// back past a fresh checkpoint, and the last one comes >= 120 clocks before
// the job's end); kill number `during_write` (if >= 0) happens at the first
// checkpoint write after its clock. Checks that a push of the generation
// before the first rollback is refused.
JobOutcome RunChaos(const std::string& name, const std::string& mode, int kills, int during_write) {
  Job job(name, mode, SyntheticData(),
          during_write >= 0 ? std::vector<std::string>{"--testing_checkpoint_write_delay_ms=600"}
                            : std::vector<std::string>{});
  std::mt19937 rng(std::hash<std::string>()(name));
  int done = 0;
  for (int k = 0; k < kills; ++k) {
    const uint64_t at = 80 + 130 * k + rng() % 40;
    static_assert(80 + 130 * 2 + 40 + 120 <= kSteps, "the last kill must come well before the end");
    if (!job.ExpectClock(at)) break;
    const uint64_t before = Generation(job.address()).first;
    // The write lasts >= 600 ms (the servers' testing delay): polled every 2 ms.
    if (k == during_write && !WaitForCheckpointWrite(job)) {
      ADD_FAILURE() << "no checkpoint write after clock " << at << "\n" << job.Logs();
      break;
    }
    if (job.Ended()) break;
    job.sup().Signal(job.server(k % 2), SIGKILL);
    ++done;
    // Wait for this kill's recovery to end (so each kill is a recovery of
    // its own, after a checkpoint written since the last one).
    auto recovered = testing::WaitForJob(
        job.address(), absl::StrCat("the recovery from kill ", k + 1),
        [before](const JobStatusResponse& s) {
          bool complete = true;
          for (const auto& r : s.recoveries()) complete &= r.complete();
          return s.generation() > before && complete && s.state() == "running";
        },
        absl::Minutes(2));
    if (!recovered.ok()) {
      ADD_FAILURE() << "no rollback after kill " << k + 1 << ": " << recovered.status() << "\n"
                    << job.Logs();
      break;
    }
    if (k == 0) {
      // Server 1 lived through it: a push still of the old generation (as
      // one in flight at the kill) is refused and changes nothing.
      const grpc::Status st = PushWithGeneration(job.server_address(1), before);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
      EXPECT_NE(st.error_message().find("stale generation"), std::string::npos)
          << st.error_message();
    }
  }
  EXPECT_EQ(done, kills) << "the job ended before every kill\n" << job.Logs();
  JobOutcome out = job.Finish();
  if (during_write >= 0) {
    // The kill cut a checkpoint's write short: that checkpoint never became
    // complete, and the job rolled back to the one before.
    const std::string expected =
        absl::StrCat("failed: UNAVAILABLE: server ", during_write % 2, " (");
    EXPECT_NE(job.SchedulerLog().find(expected), std::string::npos)
        << "no checkpoint write was cut short by the kill";
  }
  return out;
}

class ClusterRecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(
        testing::MakeSyntheticData(::testing::TempDir() + "/cluster_chaos_data", 80000, 10000, 4)
            .ok());
  }
};

TEST_F(ClusterRecoveryTest, BspServerKilledThreeTimesEndsBitIdentical) {
  const JobOutcome clean = RunChaos("c_bsp_clean", "mode: BSP", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  const JobOutcome chaos = RunChaos("c_bsp_chaos", "mode: BSP", 3, 1);
  EXPECT_EQ(chaos.code, 0) << chaos.result;
  EXPECT_NE(clean.checksum, 0u);
  EXPECT_EQ(chaos.checksum, clean.checksum) << "weights differ after the recoveries";
  EXPECT_EQ(chaos.auc, clean.auc);
  EXPECT_GE(chaos.recoveries, 3) << chaos.result;
  std::printf(
      "BSP: weights %016llx without kills, %016llx with 3 kills (%d recoveries); "
      "AUC %.6f\n  %s\n",
      static_cast<unsigned long long>(clean.checksum),
      static_cast<unsigned long long>(chaos.checksum), chaos.recoveries, chaos.auc,
      chaos.result.c_str());
}

TEST_F(ClusterRecoveryTest, Ssp2ServerKilledThreeTimesReachesTheSameAuc) {
  const JobOutcome clean = RunChaos("c_ssp_clean", "mode: SSP staleness: 2", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  const JobOutcome chaos = RunChaos("c_ssp_chaos", "mode: SSP staleness: 2", 3, -1);
  EXPECT_EQ(chaos.code, 0) << chaos.result;
  EXPECT_GE(chaos.recoveries, 3) << chaos.result;
  std::printf("SSP(2): AUC %.6f without kills, %.6f with 3 kills\n  %s\n", clean.auc, chaos.auc,
              chaos.result.c_str());
  EXPECT_NEAR(chaos.auc, clean.auc, 0.01);
}

// The scheduler and a server die together; the supervisor starts both again
// with their flags. The new scheduler finds the workers and the other server
// alive (they rejoin with their state) and the restarted server empty: it
// rolls the job back to the last checkpoint, and BSP ends bit-identical.
TEST_F(ClusterRecoveryTest, SchedulerAndServerKilledTogetherEndBitIdentical) {
  const JobOutcome clean = RunChaos("c_bsp_clean2", "mode: BSP", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  Job job("c_bsp_both", "mode: BSP", SyntheticData());
  ASSERT_TRUE(WaitForCheckpointAfter(job, 0)) << job.Logs();
  // Mid-way to the next checkpoint.
  ASSERT_TRUE(job.ExpectClock(Checkpoints(job.ckpt()).complete + 20));
  job.sup().Signal(job.scheduler(), SIGKILL);
  job.sup().Signal(job.server(1), SIGKILL);
  const JobOutcome out = job.Finish();
  EXPECT_EQ(out.code, 0) << out.result << job.Logs();
  EXPECT_EQ(out.checksum, clean.checksum) << "weights differ after the recovery";
  const std::string log = job.SchedulerLog();
  EXPECT_NE(log.find("server 1 registered without the state it had"), std::string::npos)
      << job.Logs();
  EXPECT_NE(log.find("rejoined (generation"), std::string::npos);
  std::printf("BSP, scheduler and server 1 killed together: weights %016llx (without: %016llx)\n",
              static_cast<unsigned long long>(out.checksum),
              static_cast<unsigned long long>(clean.checksum));
}

// A server stalls (SIGSTOP) for longer than dead_after_ms: the scheduler
// declares it dead and pauses the clocks; when it resumes (SIGCONT) it
// rejoins with its state, so nothing is restored or rolled back ("rejoin"),
// and the BSP job ends bit-identical. A paused process is not a dead one.
TEST_F(ClusterRecoveryTest, StalledServerRejoinsWithoutRollback) {
  const JobOutcome clean = RunChaos("c_bsp_clean3", "mode: BSP", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  Job job("c_bsp_stall", "mode: BSP", SyntheticData());
  ASSERT_TRUE(WaitForCheckpointAfter(job, 0)) << job.Logs();
  const uint64_t before = Generation(job.address()).first;
  const pid_t pid = job.sup().Pid(job.server(1));
  ASSERT_GT(pid, 0);
  kill(pid, SIGSTOP);
  // Declared dead after dead_after_ms (2 s), and clocks paused.
  bool recovering = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!recovering && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    SchedulerClient client(job.address());
    auto status = client.JobStatus();
    recovering = status.ok() && status->state() == "recovering";
  }
  EXPECT_TRUE(recovering) << "the stalled server was not noticed\n" << job.Logs();
  absl::SleepFor(absl::Seconds(1));
  kill(pid, SIGCONT);
  const JobOutcome out = job.Finish();
  EXPECT_EQ(out.code, 0) << out.result << job.Logs();
  EXPECT_EQ(out.checksum, clean.checksum) << "weights differ after the stall";
  EXPECT_EQ(job.sup().Restarts(job.server(1)), 0) << "the stalled server was restarted";
  const std::string log = job.SchedulerLog();
  EXPECT_NE(log.find("recovery (rejoin)"), std::string::npos) << job.Logs();
  EXPECT_EQ(log.find("every server restored the checkpoint"), std::string::npos)
      << "a rollback happened";
  EXPECT_NE(out.result.find(absl::StrCat("generation=", before)), std::string::npos)
      << "the generation changed: " << out.result;
  std::printf("BSP, server 1 stalled: weights %016llx (without: %016llx); %s\n",
              static_cast<unsigned long long>(out.checksum),
              static_cast<unsigned long long>(clean.checksum), out.result.c_str());
}

// A server stopped by SIGTERM while the job runs (an operator's kill, a node
// drain) exits 128 + 15, not 0 ("the job ended"), so the supervisor starts it
// again and the job recovers as from a crash: done, bit-identical (BSP).
TEST_F(ClusterRecoveryTest, ServerTerminatedBeforeTheEndIsRestarted) {
  const JobOutcome clean = RunChaos("c_bsp_clean4", "mode: BSP", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  Job job("c_bsp_term", "mode: BSP", SyntheticData());
  ASSERT_TRUE(WaitForCheckpointAfter(job, 0)) << job.Logs();
  const pid_t pid = job.sup().Pid(job.server(0));
  ASSERT_GT(pid, 0);
  kill(pid, SIGTERM);
  const JobOutcome out = job.Finish();
  EXPECT_EQ(out.code, 0) << out.result << job.Logs();
  EXPECT_EQ(job.sup().Restarts(job.server(0)), 1) << job.Logs();
  EXPECT_EQ(out.checksum, clean.checksum) << "weights differ after the restart";
  EXPECT_GE(out.recoveries, 1) << out.result;
}

// Every worker fails on a data file that does not exist; the supervisor
// restarts them once each, they fail again. The job fails after
// worker_deadline_ms and says which workers died and why.
TEST_F(ClusterRecoveryTest, EveryWorkerDeadFailsTheJobWithTheReason) {
  Job job("c_no_data", "mode: SSP staleness: 2",
          "train_files: \"/nonexistent/shardps-train-0.tsv\"", {}, /*max_restarts=*/1);
  const JobOutcome out = job.Finish(/*trained=*/false);
  EXPECT_EQ(out.code, 1) << out.result;
  EXPECT_NE(out.result.find("state=failed"), std::string::npos) << out.result;
  const std::string log = job.SchedulerLog();
  EXPECT_NE(log.find("every worker died and none came back"), std::string::npos) << job.Logs();
  EXPECT_NE(log.find("worker 1"), std::string::npos);
  EXPECT_NE(log.find("shardps-train-0.tsv"), std::string::npos) << "the failure does not say why\n"
                                                                << job.Logs();
  std::printf("every worker dead: %s\n", out.result.c_str());
}

}  // namespace
}  // namespace shardps
