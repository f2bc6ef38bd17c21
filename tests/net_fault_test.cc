// A cluster's first faults, on a cluster in a box (tests/testing/netbox.h):
// five hosts (network namespaces joined by a bridge), ps_scheduler on a
// fixed address on host 0, ps_server i on host 1 + i, ps_worker r on host
// 3 + r, the bare binaries each under a supervisor that restarts whatever
// exits non-zero with the same flags (as Kubernetes and a Slurm loop do).
// A BSP job with checkpoints every 40 steps meets one fault mid-job, and
// must end `done` with weights bit-identical to the same job without it:
//
//  (a) worker 1 SIGKILLed, restarted 5 s later;
//  (b) a node lost: server 1 and worker 1 (on one host) killed together;
//  (c) both workers killed, restarted 1 s apart;
//  (d) server 1's host cut off for 12 s;
//  (e) worker 1's host cut off for 12 s;
//  (f) the scheduler's host cut off for 12 s;
//  (g) server 1 cut from both workers (not from the scheduler) for 12 s;
//  (h) worker 1's link flapping, 1 s down / 1 s up, for 20 s;
//  (i) both workers killed, restarted 12 s later: the final checkpoint and
//      evaluation exist.
//
// No verdict depends on the machine's speed: each fault starts once every
// worker has completed kFaultClock steps (read from the scheduler), and each
// worker step takes at least kStepDelayMs, so the (kSteps - kFaultClock)
// steps left take longer than any fault lasts (25 s against 12 s cuts and a
// 20 s flap). The fault-free run has no delay: the delay changes no value.
// Needs root and iproute2; without them every test fails saying so.
// Built as three targets (tests/BUILD.bazel: net_fault_{kill,cut,link}_test),
// each running the fault-free job once and then its share of the cases.
#include <signal.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/netbox.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::JobOutcome;
using testing::NetBox;
using testing::SupervisedJob;

constexpr uint64_t kSteps = 350;           // Per worker (--max_steps).
constexpr int kStepDelayMs = 100;          // Per worker step, faulted runs.
constexpr uint64_t kFaultClock = 100;      // Between the checkpoints at 80 and 120.
constexpr absl::Duration kCut = absl::Seconds(12);
static_assert((kSteps - kFaultClock) * kStepDelayMs >= 25000,
              "the steps after the fault must outlast every fault");

constexpr char kCluster[] = R"pb(
name: "net-fault"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 60000 worker_deadline_ms: 60000
}
checkpoint { dir: "@CKPT@" every_steps: 40 keep: 2 }
)pb";

std::string DataDir() { return ::testing::TempDir() + "/net_fault_data"; }

std::string Config() {
  return absl::StrCat(testing::kSmallDlrmTables,
                      absl::StrReplaceAll(kCluster, {{"@DATA@", DataDir()}}));
}

// What a test does to a running job (its fault), given the box it runs on.
using Fault = std::function<void(SupervisedJob&, NetBox&)>;

struct JobRun {
  JobOutcome outcome;
  std::string logs;
  uint64_t final_checkpoint = 0;
  int server_restarts[2] = {0, 0};  // By the supervisor.
  int worker_restarts[2] = {0, 0};
};

// Runs the job on a fresh box of 5 hosts; once every worker has completed
// kFaultClock steps (if `fault` is set), applies it. `worker_host` moves
// workers (rank -> host).
JobRun RunJob(const std::string& name, const Fault& fault, int step_delay_ms,
           std::map<int, int> worker_host = {}) {
  JobRun run;
  auto box = NetBox::Create({5});
  if (!box.ok()) {
    ADD_FAILURE() << box.status();
    return run;
  }
  SupervisedJob::Options o;
  o.name = name;
  o.config = Config();
  o.worker_flags = {absl::StrCat("--max_steps=", kSteps),
                    absl::StrCat("--step_delay_ms=", step_delay_ms)};
  o.worker_host = std::move(worker_host);
  o.supervisor = {/*max_restarts=*/10, absl::Seconds(1)};
  o.box = box->get();
  // Declared after the box: the job (and its supervisor) stops first.
  SupervisedJob job(o);
  const absl::Status started = job.Start();
  if (!started.ok()) {
    ADD_FAILURE() << started;
    return run;
  }
  if (fault) {
    auto at = job.WaitFor(
        absl::StrCat("every worker at clock ", kFaultClock),
        [](const JobStatusResponse& s) {
          return s.state() == "running" && s.min_clock() >= kFaultClock;
        },
        absl::Minutes(3));
    if (!at.ok()) {
      ADD_FAILURE() << "the fault was never applied: " << at.status() << "\n" << job.Logs();
    } else {
      fault(job, **box);
    }
  }
  run.outcome = job.Finish(absl::Minutes(4));
  run.logs = job.Logs();
  for (int i = 0; i < 2; ++i) {
    run.server_restarts[i] = job.sup().Restarts(job.server(i));
    run.worker_restarts[i] = job.sup().Restarts(job.worker(i));
  }
  run.final_checkpoint = testing::Checkpoints(job.ckpt()).complete;
  return run;
}

// The fault-free job, once per test process.
const JobRun& Clean() {
  static const JobRun* clean = new JobRun(RunJob("clean", nullptr, 0));
  return *clean;
}

class NetFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 80000, 10000, 4).ok());
  }

  void SetUp() override {
    const absl::Status st = testing::NetBoxAvailable();
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(Clean().outcome.code, 0) << "the fault-free job failed: " << Clean().outcome.result
                                       << "\n" << Clean().logs;
    ASSERT_NE(Clean().outcome.checksum, 0u) << Clean().logs;
  }

  // The faulted run ended done, exit 0, with the fault-free run's weights.
  void ExpectAsClean(const char* fault, const JobRun& run) {
    const JobOutcome& out = run.outcome;
    const JobOutcome& clean = Clean().outcome;
    std::printf("%s: %s\n  weights %016llx (fault-free %016llx)\n", fault, out.result.c_str(),
                static_cast<unsigned long long>(out.checksum),
                static_cast<unsigned long long>(clean.checksum));
    EXPECT_EQ(out.code, 0) << out.result << "\n" << run.logs;
    EXPECT_EQ(out.fields.count("state") ? out.fields.at("state") : "", "done") << out.result;
    EXPECT_EQ(out.checksum, clean.checksum) << "weights differ from the fault-free run\n"
                                            << run.logs;
    EXPECT_EQ(out.auc, clean.auc);
  }

  // The largest clock a worker completed (from the scheduler's host).
  static uint64_t MaxClock(SupervisedJob& job) {
    auto status = job.JobStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->max_clock() : 0;
  }

  // Cuts with `cut` for kCut, then heals; the job must outlive it. With
  // `stalls`, the cut must have held the job: a BSP step needs every server
  // and every worker, so at most the steps in flight complete meanwhile
  // (normally kCut is 120 steps).
  static void CutFor(SupervisedJob& job, NetBox& box, const std::function<void()>& cut,
                     bool stalls) {
    const uint64_t before = MaxClock(job);
    cut();
    absl::SleepFor(kCut);  // The fault's length, not a wait for anything.
    const uint64_t during = MaxClock(job);
    ASSERT_TRUE(box.Heal().ok());
    if (stalls) {
      EXPECT_LE(during, before + 3) << "the job went on through the cut\n" << job.Logs();
    }
    EXPECT_FALSE(job.Ended()) << "the job ended during the cut\n" << job.Logs();
  }
  static void CutOffFor(SupervisedJob& job, NetBox& box, int host, bool stalls) {
    CutFor(job, box, [&] { ASSERT_TRUE(box.CutOff(host).ok()); }, stalls);
  }
};

TEST_F(NetFaultTest, WorkerKilledAndRestartedFiveSecondsLater) {
  const JobRun run = RunJob("a", [](SupervisedJob& job, NetBox&) {
    job.sup().SetNextRestartDelay(job.worker(1), absl::Seconds(5));
    job.sup().Signal(job.worker(1), SIGKILL);
  }, kStepDelayMs);
  ExpectAsClean("(a) worker 1 killed, back after 5 s", run);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

TEST_F(NetFaultTest, NodeLostServerAndWorkerTogether) {
  // Worker 1 lives on server 1's host: the node.
  const int node = 2;
  const JobRun run = RunJob("b", [node](SupervisedJob& job, NetBox& box) {
    ASSERT_EQ(job.server_host(1), node);
    auto killed = box.KillHost(node);
    ASSERT_TRUE(killed.ok()) << killed.status();
    EXPECT_EQ(*killed, 2) << "the node held server 1 and worker 1";
  }, kStepDelayMs, {{1, node}});
  ExpectAsClean("(b) node lost (server 1 + worker 1)", run);
  EXPECT_EQ(run.server_restarts[1], 1);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

TEST_F(NetFaultTest, BothWorkersKilledRestartedOneSecondApart) {
  const JobRun run = RunJob("c", [](SupervisedJob& job, NetBox&) {
    job.sup().SetNextRestartDelay(job.worker(0), absl::Seconds(1));
    job.sup().SetNextRestartDelay(job.worker(1), absl::Seconds(2));
    job.sup().Signal(job.worker(0), SIGKILL);
    job.sup().Signal(job.worker(1), SIGKILL);
  }, kStepDelayMs);
  ExpectAsClean("(c) both workers killed, back 1 s apart", run);
  EXPECT_EQ(run.worker_restarts[0], 1);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

TEST_F(NetFaultTest, ServerHostCutOff) {
  ExpectAsClean("(d) server 1's host cut off 12 s",
                RunJob("d", [](SupervisedJob& job, NetBox& box) {
                  CutOffFor(job, box, job.server_host(1), /*stalls=*/true);
                }, kStepDelayMs));
}

TEST_F(NetFaultTest, WorkerHostCutOff) {
  ExpectAsClean("(e) worker 1's host cut off 12 s",
                RunJob("e", [](SupervisedJob& job, NetBox& box) {
                  CutOffFor(job, box, job.worker_host(1), /*stalls=*/true);
                }, kStepDelayMs));
}

TEST_F(NetFaultTest, SchedulerHostCutOff) {
  ExpectAsClean("(f) the scheduler's host cut off 12 s",
                RunJob("f", [](SupervisedJob& job, NetBox& box) {
                  // The others give the scheduler up after 3 x dead_after_ms
                  // and are restarted; what they do until then is theirs.
                  CutOffFor(job, box, job.scheduler_host(), /*stalls=*/false);
                }, kStepDelayMs));
}

TEST_F(NetFaultTest, ServerCutFromTheWorkersOnly) {
  ExpectAsClean("(g) server 1 cut from the workers 12 s",
                RunJob("g", [](SupervisedJob& job, NetBox& box) {
                  CutFor(job, box, [&] {
                    ASSERT_TRUE(box.Cut(job.server_host(1), job.worker_host(0)).ok());
                    ASSERT_TRUE(box.Cut(job.server_host(1), job.worker_host(1)).ok());
                  }, /*stalls=*/true);
                }, kStepDelayMs));
}

TEST_F(NetFaultTest, WorkerLinkFlapping) {
  ExpectAsClean("(h) worker 1's link flapping 1 s / 1 s for 20 s",
                RunJob("h", [](SupervisedJob& job, NetBox& box) {
                  box.StartFlap(job.worker_host(1), absl::Seconds(1), absl::Seconds(1), 10);
                  const absl::Time deadline = absl::Now() + absl::Seconds(60);
                  while (box.Flapping() && absl::Now() < deadline) {
                    absl::SleepFor(absl::Milliseconds(100));  // Polls the flap's end.
                  }
                  EXPECT_FALSE(box.Flapping()) << "the flap did not end in 60 s";
                  EXPECT_FALSE(job.Ended()) << "the job ended during the flap\n" << job.Logs();
                }, kStepDelayMs));
}

TEST_F(NetFaultTest, BothWorkersKilledRestartedTwelveSecondsLater) {
  const JobRun run = RunJob("i", [](SupervisedJob& job, NetBox&) {
    job.sup().SetNextRestartDelay(job.worker(0), absl::Seconds(12));
    job.sup().SetNextRestartDelay(job.worker(1), absl::Seconds(12));
    job.sup().Signal(job.worker(0), SIGKILL);
    job.sup().Signal(job.worker(1), SIGKILL);
  }, kStepDelayMs);
  ExpectAsClean("(i) both workers killed, back after 12 s", run);
  // The final checkpoint and its evaluation, as in the fault-free run.
  EXPECT_EQ(run.final_checkpoint, Clean().final_checkpoint) << run.logs;
  EXPECT_EQ(run.final_checkpoint, kSteps);
  EXPECT_GT(run.outcome.auc, 0.5) << run.outcome.result;
  EXPECT_EQ(run.worker_restarts[0], 1);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

}  // namespace
}  // namespace shardps
