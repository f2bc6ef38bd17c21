// A cluster's first faults, on a cluster in a box (tests/testing/netbox.h):
// five hosts (network namespaces joined by a bridge), ps_scheduler on a
// fixed address on host 0, ps_server i on host 1 + i, ps_worker r on host
// 3 + r, the bare binaries each under a supervisor that restarts whatever
// exits non-zero with the same flags (as Kubernetes and a Slurm loop do).
// A job with checkpoints every 40 steps meets one fault mid-job.
//
// BSP (cluster.on_worker_loss WAIT, its default) must end `done` with
// weights bit-identical to the same job without the fault (NetFaultTest):
//
//  (a) worker 1 SIGKILLed, restarted 5 s later;
//  (b) a node lost: server 1 and worker 1 (on one host) killed together;
//  (c) both workers killed, restarted 1 s apart;
//  (d) server 1's host cut off for 12 s;
//  (e) worker 1's host cut off for 12 s;
//  (f) the scheduler's host cut off for 12 s;
//  (f') the scheduler's host cut off for 12 s while a checkpoint is being
//      written (the servers' writes slowed to 3 s; the cut comes once the
//      checkpoint's directory exists without its MANIFEST);
//  (g) server 1 cut from both workers (not from the scheduler) for 12 s;
//  (h) worker 1's link flapping, 1 s down / 1 s up, for 20 s;
//  (i) both workers killed, restarted 12 s later: the final checkpoint and
//      evaluation exist;
//  (j) a move to 3 servers (a spare on a sixth host) asked for while the
//      spare's host is cut off for 12 s: the move waits for the spare and
//      lands once it is back; the job is then moved back to 2 servers.
//
// SSP(2), one epoch of a data set of 2 x kSteps batches (NetFaultSspTest),
// with on_worker_loss REASSIGN (its default) must end `done` with every
// sample trained once (PS_JOB_RESULT samples = the data set's lines, no
// untrained_samples) and test AUC within 0.01 of the fault-free SSP(2) run:
//
//  (a), (b), (e) as above;
//  (n) worker 1 killed and never restarted: worker 0 finishes its own share
//      and takes worker 1's over;
// and with DROP chosen explicitly, (n) ends `done` with untrained_samples
// in PS_JOB_RESULT (the loss is visible, never silent).
//
// No verdict depends on the machine's speed: each fault starts once every
// worker has completed kFaultClock steps (read from the scheduler), and each
// worker step takes at least kStepDelayMs, so the (kSteps - kFaultClock)
// steps left take longer than any fault lasts (25 s against 12 s cuts and a
// 20 s flap). The fault-free runs have no delay: in BSP the delay changes no
// value, in SSP only the order of the workers' steps.
// Needs root and iproute2; without them every test fails saying so.
// Built as targets of one source (tests/BUILD.bazel: net_fault_*_test),
// each running its mode's fault-free job once and then its share of the
// cases.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/netbox.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::JobOutcome;
using testing::NetBox;
using testing::SupervisedJob;

constexpr uint64_t kSteps = 350;       // Per worker (BSP: --max_steps; SSP: one epoch).
constexpr int kStepDelayMs = 100;      // Per worker step, faulted runs.
constexpr uint64_t kFaultClock = 100;  // Between the checkpoints at 80 and 120.
constexpr absl::Duration kCut = absl::Seconds(12);
static_assert((kSteps - kFaultClock) * kStepDelayMs >= 25000,
              "the steps after the fault must outlast every fault");
constexpr uint64_t kBatch = 128;
// SSP's data set: one epoch is kSteps batches per worker (4 files, 2 each).
constexpr uint64_t kSspTrainLines = 2 * kSteps * kBatch;
// (f'): each server's background checkpoint write sleeps this long first, so
// the cut lands inside the write on any machine.
constexpr int kSlowWriteMs = 3000;

constexpr char kBspCluster[] = R"pb(
name: "net-fault"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 60000 worker_deadline_ms: 60000
}
checkpoint { dir: "@CKPT@" every_steps: 40 keep: 2 }
)pb";

constexpr char kSspCluster[] = R"pb(
name: "net-fault-ssp"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: SSP staleness: 2
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 60000 worker_deadline_ms: 60000
  @LOSS@
}
checkpoint { dir: "@CKPT@" every_steps: 40 keep: 2 }
)pb";

std::string DataDir() { return ::testing::TempDir() + "/net_fault_data"; }
std::string SspDataDir() { return ::testing::TempDir() + "/net_fault_ssp_data"; }

// How one job runs: its config and flags (the fault comes apart).
struct JobPlan {
  std::string name;
  std::string config;
  std::vector<std::string> server_flags;
  std::vector<std::string> worker_flags;
  std::vector<std::string> scheduler_flags;
  std::map<int, int> worker_host;  // Rank -> box host.
  int servers = 2;                 // Started (a spare beyond num_servers).
};

// The BSP job: kSteps per worker (--max_steps), of 3 epochs of DataDir().
JobPlan Bsp(const std::string& name, int step_delay_ms, std::map<int, int> worker_host = {}) {
  JobPlan p;
  p.name = name;
  p.config = absl::StrCat(testing::kSmallDlrmTables,
                          absl::StrReplaceAll(kBspCluster, {{"@DATA@", DataDir()}}));
  p.worker_flags = {absl::StrCat("--max_steps=", kSteps),
                    absl::StrCat("--step_delay_ms=", step_delay_ms)};
  p.worker_host = std::move(worker_host);
  return p;
}

// The SSP(2) job: one epoch of SspDataDir() (kSteps per worker), with
// `on_worker_loss` if set ("" is the default, REASSIGN).
JobPlan Ssp(const std::string& name, int step_delay_ms, const std::string& on_worker_loss = "",
            std::map<int, int> worker_host = {}) {
  JobPlan p;
  p.name = name;
  const std::string loss =
      on_worker_loss.empty() ? "" : absl::StrCat("on_worker_loss: ", on_worker_loss);
  p.config =
      absl::StrCat(testing::kSmallDlrmTables,
                   absl::StrReplaceAll(kSspCluster, {{"@DATA@", SspDataDir()}, {"@LOSS@", loss}}));
  p.worker_flags = {absl::StrCat("--step_delay_ms=", step_delay_ms)};
  p.worker_host = std::move(worker_host);
  return p;
}

// What a test does to a running job (its fault), given the box it runs on.
using Fault = std::function<void(SupervisedJob&, NetBox&)>;

struct JobRun {
  JobOutcome outcome;
  std::string logs;
  std::string scheduler_log;  // All of it.
  uint64_t final_checkpoint = 0;
  int server_restarts[2] = {0, 0};  // By the supervisor.
  int worker_restarts[2] = {0, 0};
  int worker_codes[2] = {-1, -1};  // Last exit status (-1: not down for good).
  double seconds = 0;              // Start to end.
};

// Runs the job on a fresh box of 5 hosts; once every worker has completed
// kFaultClock steps (if `fault` is set), applies it.
JobRun RunJob(const JobPlan& plan, const Fault& fault) {
  JobRun run;
  const absl::Time start = absl::Now();
  auto box = NetBox::Create({1 + plan.servers + 2});  // A host for each process.
  if (!box.ok()) {
    ADD_FAILURE() << box.status();
    return run;
  }
  SupervisedJob::Options o;
  o.name = plan.name;
  o.config = plan.config;
  o.server_flags = plan.server_flags;
  o.worker_flags = plan.worker_flags;
  o.scheduler_flags = plan.scheduler_flags;
  o.worker_host = plan.worker_host;
  o.servers = plan.servers;
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
    auto at = job.WaitForClock(kFaultClock);
    if (!at.ok()) {
      ADD_FAILURE() << "the fault was never applied: " << at.status() << "\n" << job.Logs();
    } else {
      fault(job, **box);
    }
  }
  run.outcome = job.Finish(absl::Minutes(4));
  run.logs = job.Logs();
  run.scheduler_log = job.SchedulerLog();
  for (int i = 0; i < 2; ++i) {
    run.server_restarts[i] = job.sup().Restarts(job.server(i));
    run.worker_restarts[i] = job.sup().Restarts(job.worker(i));
    run.worker_codes[i] = job.sup().WaitFinal(job.worker(i), absl::ZeroDuration()).value_or(-1);
  }
  run.final_checkpoint = testing::Checkpoints(job.ckpt()).complete;
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return run;
}

// The BSP job of the old signature.
JobRun RunJob(const std::string& name, const Fault& fault, int step_delay_ms,
              std::map<int, int> worker_host = {}) {
  return RunJob(Bsp(name, step_delay_ms, std::move(worker_host)), fault);
}

// The fault-free jobs, once per test process each.
const JobRun& Clean() {
  static const JobRun* clean = new JobRun(RunJob("clean", nullptr, 0));
  return *clean;
}
const JobRun& CleanSsp() {
  static const JobRun* clean = new JobRun(RunJob(Ssp("clean-ssp", 0), nullptr));
  return *clean;
}

// Lines of the training files of `dir` (train*.tsv): the samples one epoch
// trains.
uint64_t TrainLines(const std::string& dir) {
  uint64_t lines = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, "train") || !absl::EndsWith(name, ".tsv")) continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) ++lines;
  }
  return lines;
}

// Worker `rank`'s completed clock in `s` (the scheduler's view).
uint64_t WorkerClock(const JobStatusResponse& s, uint32_t rank) {
  for (const auto& m : s.members()) {
    if (m.role() == WORKER && m.index() == rank) return m.clock();
  }
  return 0;
}

// The largest clock whose checkpoint directory under `root` has no
// MANIFEST (a write in progress), or 0.
uint64_t WritingCheckpoint(const std::string& root) {
  uint64_t writing = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, "ckpt-") || name.find('.') != std::string::npos) continue;
    if (std::filesystem::exists(e.path() / "MANIFEST", ec)) continue;
    writing = std::max<uint64_t>(writing, std::stoull(name.substr(5)));
  }
  return writing;
}

// Reads JobStatus; a test failure (and an empty status) if it cannot.
JobStatusResponse Status(SupervisedJob& job) {
  auto status = job.JobStatus();
  EXPECT_TRUE(status.ok()) << status.status();
  return status.value_or(JobStatusResponse());
}

class NetFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 80000, 10000, 4).ok());
  }

  void SetUp() override {
    const absl::Status st = testing::NetBoxAvailable();
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(Clean().outcome.code, 0)
        << "the fault-free job failed: " << Clean().outcome.result << "\n"
        << Clean().logs;
    ASSERT_NE(Clean().outcome.checksum, 0u) << Clean().logs;
  }

  // The faulted run ended done, exit 0, with the fault-free run's weights.
  void ExpectAsClean(const char* fault, const JobRun& run) {
    const JobOutcome& out = run.outcome;
    const JobOutcome& clean = Clean().outcome;
    std::printf("%s (%.0f s): %s\n  weights %016llx (fault-free %016llx)\n", fault, run.seconds,
                out.result.c_str(), static_cast<unsigned long long>(out.checksum),
                static_cast<unsigned long long>(clean.checksum));
    EXPECT_EQ(out.code, 0) << out.result << "\n" << run.logs;
    EXPECT_EQ(out.fields.count("state") ? out.fields.at("state") : "", "done") << out.result;
    EXPECT_EQ(out.checksum, clean.checksum) << "weights differ from the fault-free run\n"
                                            << run.logs;
    EXPECT_EQ(out.auc, clean.auc);
  }

  // The largest clock a worker completed (from the scheduler's host).
  static uint64_t MaxClock(SupervisedJob& job) { return Status(job).max_clock(); }

  // Cuts with `cut` for kCut, then heals; the job must outlive it. With
  // `stalls`, the cut must have held the job: a BSP step needs every server
  // and every worker, so at most the steps in flight complete meanwhile
  // (normally kCut is 120 steps).
  static void CutFor(SupervisedJob& job, NetBox& box, const std::function<void()>& cut, bool stalls,
                     const std::function<void()>& after_cut = nullptr) {
    const uint64_t before = MaxClock(job);
    cut();
    if (after_cut) after_cut();
    absl::SleepFor(kCut);  // The fault's length, not a wait for anything.
    const uint64_t during = MaxClock(job);
    ASSERT_TRUE(box.Heal().ok());
    if (stalls) {
      EXPECT_LE(during, before + 3) << "the job went on through the cut\n" << job.Logs();
    }
    EXPECT_FALSE(job.Ended()) << "the job ended during the cut\n" << job.Logs();
  }
  static void CutOffFor(SupervisedJob& job, NetBox& box, int host, bool stalls,
                        const std::function<void()>& after_cut = nullptr) {
    CutFor(
        job, box, [&] { ASSERT_TRUE(box.CutOff(host).ok()); }, stalls, after_cut);
  }
};

TEST_F(NetFaultTest, WorkerKilledAndRestartedFiveSecondsLater) {
  const JobRun run = RunJob(
      "a",
      [](SupervisedJob& job, NetBox&) {
        job.sup().SetNextRestartDelay(job.worker(1), absl::Seconds(5));
        job.sup().Signal(job.worker(1), SIGKILL);
      },
      kStepDelayMs);
  ExpectAsClean("(a) worker 1 killed, back after 5 s", run);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

// Worker 1 exits between its pushes of a step: server 0 has its push and
// applied the step (worker 0 pushed it too), server 1 still waits for it.
// Restarted, worker 1 cannot redo the step from the same weights (server
// 0's are a step later): it has the job roll back to the last checkpoint,
// and the job ends as the fault-free one.
TEST_F(NetFaultTest, WorkerKilledBetweenItsPushes) {
  JobPlan plan = Bsp("j", kStepDelayMs);
  const std::string marker = absl::StrCat(std::getenv("TEST_TMPDIR"), "/j-exited-mid-push");
  plan.worker_flags.push_back(absl::StrCat("--testing_exit_mid_push=1:", kFaultClock, ":", marker));
  const JobRun run = RunJob(plan, nullptr);
  ExpectAsClean("(j) worker 1 exits between its pushes", run);
  EXPECT_TRUE(std::filesystem::exists(marker)) << "worker 1 never exited mid-push\n" << run.logs;
  EXPECT_EQ(run.worker_restarts[1], 1);
  EXPECT_GE(run.outcome.recoveries, 1) << "no rollback\n" << run.logs;
  EXPECT_TRUE(absl::StrContains(
      run.scheduler_log, absl::StrCat("worker 1 cannot redo step ", kFaultClock, " exactly")))
      << run.logs;
}

TEST_F(NetFaultTest, NodeLostServerAndWorkerTogether) {
  // Worker 1 lives on server 1's host: the node.
  const int node = 2;
  const JobRun run = RunJob("b",
                            [node](SupervisedJob& job, NetBox& box) {
                              ASSERT_EQ(job.server_host(1), node);
                              auto killed = box.KillHost(node);
                              ASSERT_TRUE(killed.ok()) << killed.status();
                              EXPECT_EQ(*killed, 2) << "the node held server 1 and worker 1";
                            },
                            kStepDelayMs, {{1, node}});
  ExpectAsClean("(b) node lost (server 1 + worker 1)", run);
  EXPECT_EQ(run.server_restarts[1], 1);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

TEST_F(NetFaultTest, BothWorkersKilledRestartedOneSecondApart) {
  const JobRun run = RunJob(
      "c",
      [](SupervisedJob& job, NetBox&) {
        job.sup().SetNextRestartDelay(job.worker(0), absl::Seconds(1));
        job.sup().SetNextRestartDelay(job.worker(1), absl::Seconds(2));
        job.sup().Signal(job.worker(0), SIGKILL);
        job.sup().Signal(job.worker(1), SIGKILL);
      },
      kStepDelayMs);
  ExpectAsClean("(c) both workers killed, back 1 s apart", run);
  EXPECT_EQ(run.worker_restarts[0], 1);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

TEST_F(NetFaultTest, ServerHostCutOff) {
  ExpectAsClean("(d) server 1's host cut off 12 s", RunJob(
                                                        "d",
                                                        [](SupervisedJob& job, NetBox& box) {
                                                          CutOffFor(job, box, job.server_host(1),
                                                                    /*stalls=*/true);
                                                        },
                                                        kStepDelayMs));
}

TEST_F(NetFaultTest, WorkerHostCutOff) {
  ExpectAsClean("(e) worker 1's host cut off 12 s", RunJob(
                                                        "e",
                                                        [](SupervisedJob& job, NetBox& box) {
                                                          CutOffFor(job, box, job.worker_host(1),
                                                                    /*stalls=*/true);
                                                        },
                                                        kStepDelayMs));
}

TEST_F(NetFaultTest, SchedulerHostCutOff) {
  ExpectAsClean("(f) the scheduler's host cut off 12 s",
                RunJob(
                    "f",
                    [](SupervisedJob& job, NetBox& box) {
                      // The others give the scheduler up after 3 x dead_after_ms
                      // and are restarted; what they do until then is theirs.
                      CutOffFor(job, box, job.scheduler_host(), /*stalls=*/false);
                    },
                    kStepDelayMs));
}

TEST_F(NetFaultTest, SchedulerHostCutOffDuringCheckpointWrite) {
  JobPlan plan = Bsp("f2", kStepDelayMs);
  plan.server_flags = {absl::StrCat("--testing_checkpoint_write_delay_ms=", kSlowWriteMs)};
  uint64_t cut_during = 0;  // The checkpoint whose write the cut interrupted.
  const JobRun run = RunJob(plan, [&cut_during](SupervisedJob& job, NetBox& box) {
    // The first checkpoint cut after kFaultClock: its directory exists (the
    // servers copied the cut and write behind the workers) and its MANIFEST
    // does not yet (the scheduler writes it once every server's files are
    // written, kSlowWriteMs later). Polled often: the window is kSlowWriteMs.
    const absl::Time deadline = absl::Now() + absl::Minutes(2);
    uint64_t writing = 0;
    while ((writing = WritingCheckpoint(job.ckpt())) <= kFaultClock && !job.Ended() &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));  // Polls the checkpoint directory.
    }
    ASSERT_GT(writing, kFaultClock)
        << "no checkpoint write after clock " << kFaultClock << " (waited 2 min or the job ended)\n"
        << job.Logs();
    CutOffFor(job, box, job.scheduler_host(), /*stalls=*/false, [&] {
      // Inside the write: the MANIFEST is still missing once the cut is in.
      EXPECT_FALSE(
          std::filesystem::exists(absl::StrCat(job.ckpt(), "/ckpt-", writing, "/MANIFEST")))
          << "the checkpoint at " << writing << " was complete before the cut";
    });
    cut_during = writing;
  });
  ExpectAsClean("(f') the scheduler's host cut off 12 s during a checkpoint write", run);
  std::printf("  the cut came while the checkpoint at clock %llu was written; scheduler:\n",
              static_cast<unsigned long long>(cut_during));
  for (const std::string& want :
       std::vector<std::string>{absl::StrCat("checkpoint at clock ", cut_during), "recovery"}) {
    for (size_t at = run.scheduler_log.find(want); at != std::string::npos;
         at = run.scheduler_log.find(want, at + 1)) {
      const size_t bol = run.scheduler_log.rfind('\n', at) + 1;
      std::printf("    %s\n",
                  run.scheduler_log.substr(bol, run.scheduler_log.find('\n', at) - bol).c_str());
    }
  }
  EXPECT_EQ(run.final_checkpoint, kSteps) << run.logs;
}

TEST_F(NetFaultTest, SpareHostCutOffDuringMove) {
  JobPlan plan = Bsp("j", kStepDelayMs);
  plan.config =
      absl::StrReplaceAll(plan.config, {{"num_servers: 2", "num_servers: 2 max_servers: 3"}});
  plan.servers = 3;  // Server 2 registers as a spare, on its own host.
  // Also on the scheduler host's loopback: without TLS only a caller there
  // may ask for a move (the members dial the host's address, as before).
  plan.scheduler_flags = {"--listen=0.0.0.0:7000"};
  uint32_t servers_after_move = 0;
  const JobRun run = RunJob(plan, [&](SupervisedJob& job, NetBox& box) {
    auto reshard = [&](int servers, const std::string& log) {
      auto move = std::make_unique<testing::Subprocess>();
      std::vector<std::string> argv = {testing::RunfilePath("scheduler/ps_status"),
                                       "--scheduler=127.0.0.1:7000",
                                       "--job_secret_file=" + job.dir() + "/job.secret",
                                       absl::StrCat("--servers=", servers), "--timeout_sec=180"};
      EXPECT_TRUE(move->Start(box.Wrap(job.scheduler_host(), argv), job.dir() + "/" + log).ok());
      return move;
    };
    auto wait = [&](testing::Subprocess& move, const char* what) {
      auto code = move.Wait(absl::Minutes(4));
      ASSERT_TRUE(code.ok()) << what << ": ps_status did not end: " << code.status();
      EXPECT_EQ(*code, 0) << what << ": " << move.output() << "\n" << job.Logs();
    };
    std::unique_ptr<testing::Subprocess> up;
    CutOffFor(job, box, job.server_host(2), /*stalls=*/false, [&] {
      up = reshard(3, "reshard-up.log");  // The spare is unreachable from now on.
    });
    wait(*up, "the move to 3 servers");
    servers_after_move = Status(job).map_servers();
    auto down = reshard(2, "reshard-down.log");
    wait(*down, "the move back to 2 servers");
  });
  ExpectAsClean("(j) a move to 3 servers while the spare's host is cut off 12 s", run);
  EXPECT_EQ(servers_after_move, 3u) << run.logs;
  const auto reshards = run.outcome.fields.find("reshards");
  EXPECT_EQ(reshards == run.outcome.fields.end() ? "" : reshards->second, "2")
      << "PS_JOB_RESULT does not count the two moves: " << run.outcome.result;
}

TEST_F(NetFaultTest, ServerCutFromTheWorkersOnly) {
  ExpectAsClean("(g) server 1 cut from the workers 12 s",
                RunJob(
                    "g",
                    [](SupervisedJob& job, NetBox& box) {
                      CutFor(
                          job, box,
                          [&] {
                            ASSERT_TRUE(box.Cut(job.server_host(1), job.worker_host(0)).ok());
                            ASSERT_TRUE(box.Cut(job.server_host(1), job.worker_host(1)).ok());
                          },
                          /*stalls=*/true);
                    },
                    kStepDelayMs));
}

TEST_F(NetFaultTest, WorkerLinkFlapping) {
  ExpectAsClean("(h) worker 1's link flapping 1 s / 1 s for 20 s",
                RunJob(
                    "h",
                    [](SupervisedJob& job, NetBox& box) {
                      box.StartFlap(job.worker_host(1), absl::Seconds(1), absl::Seconds(1), 10);
                      const absl::Time deadline = absl::Now() + absl::Seconds(60);
                      while (box.Flapping() && absl::Now() < deadline) {
                        absl::SleepFor(absl::Milliseconds(100));  // Polls the flap's end.
                      }
                      EXPECT_FALSE(box.Flapping()) << "the flap did not end in 60 s";
                      EXPECT_FALSE(job.Ended()) << "the job ended during the flap\n" << job.Logs();
                    },
                    kStepDelayMs));
}

TEST_F(NetFaultTest, BothWorkersKilledRestartedTwelveSecondsLater) {
  const JobRun run = RunJob(
      "i",
      [](SupervisedJob& job, NetBox&) {
        job.sup().SetNextRestartDelay(job.worker(0), absl::Seconds(12));
        job.sup().SetNextRestartDelay(job.worker(1), absl::Seconds(12));
        job.sup().Signal(job.worker(0), SIGKILL);
        job.sup().Signal(job.worker(1), SIGKILL);
      },
      kStepDelayMs);
  ExpectAsClean("(i) both workers killed, back after 12 s", run);
  // The final checkpoint and its evaluation, as in the fault-free run.
  EXPECT_EQ(run.final_checkpoint, Clean().final_checkpoint) << run.logs;
  EXPECT_EQ(run.final_checkpoint, kSteps);
  EXPECT_GT(run.outcome.auc, 0.5) << run.outcome.result;
  EXPECT_EQ(run.worker_restarts[0], 1);
  EXPECT_EQ(run.worker_restarts[1], 1);
}

// SSP(2), on_worker_loss REASSIGN unless a test chooses DROP.
class NetFaultSspTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(SspDataDir(), kSspTrainLines, 10000, 4).ok());
  }

  void SetUp() override {
    const absl::Status st = testing::NetBoxAvailable();
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(TrainLines(SspDataDir()), kSspTrainLines) << SspDataDir();
    const JobOutcome& clean = CleanSsp().outcome;
    ASSERT_EQ(clean.code, 0) << "the fault-free job failed: " << clean.result << "\n"
                             << CleanSsp().logs;
    ASSERT_EQ(Field(clean, "samples"), absl::StrCat(kSspTrainLines)) << clean.result;
    ASSERT_GT(clean.auc, 0.5) << clean.result;
  }

  static std::string Field(const JobOutcome& out, const std::string& key) {
    auto it = out.fields.find(key);
    return it == out.fields.end() ? "" : it->second;
  }

  // The faulted run ended done, exit 0, every sample trained once (the data
  // set's lines, counted from its files), nothing reported untrained, and
  // test AUC within 0.01 of the fault-free run.
  static void ExpectAllTrained(const char* fault, const JobRun& run) {
    const JobOutcome& out = run.outcome;
    const JobOutcome& clean = CleanSsp().outcome;
    std::printf("%s (%.0f s): %s\n  AUC %.6f (fault-free %.6f)\n", fault, run.seconds,
                out.result.c_str(), out.auc, clean.auc);
    EXPECT_EQ(out.code, 0) << out.result << "\n" << run.logs;
    EXPECT_EQ(Field(out, "state"), "done") << out.result;
    EXPECT_EQ(Field(out, "samples"), absl::StrCat(TrainLines(SspDataDir())))
        << "not every sample trained once: " << out.result << "\n"
        << run.logs;
    EXPECT_EQ(out.fields.count("untrained_samples"), 0u) << out.result;
    EXPECT_LE(std::fabs(out.auc - clean.auc), 0.01) << out.result;
  }

  static void ExpectLogged(const JobRun& run, const std::string& line) {
    EXPECT_TRUE(absl::StrContains(run.scheduler_log, line))
        << "the scheduler never logged \"" << line << "\"\n"
        << run.logs;
  }
};

TEST_F(NetFaultSspTest, WorkerKilledAndRestartedFiveSecondsLater) {
  const JobRun run = RunJob(Ssp("ssp-a", kStepDelayMs), [](SupervisedJob& job, NetBox&) {
    job.sup().SetNextRestartDelay(job.worker(1), absl::Seconds(5));
    job.sup().Signal(job.worker(1), SIGKILL);
  });
  ExpectAllTrained("SSP (a) worker 1 killed, back after 5 s", run);
  EXPECT_EQ(run.worker_restarts[1], 1);
  // Away for 5 s, more than dead_after_ms: REASSIGN let worker 0 go on.
  ExpectLogged(run,
               "worker 1 missed heartbeats: declared dead; it leaves the clock minimum "
               "(cluster.on_worker_loss REASSIGN)");
}

TEST_F(NetFaultSspTest, WorkerHostCutOff) {
  const JobRun run = RunJob(Ssp("ssp-e", kStepDelayMs), [](SupervisedJob& job, NetBox& box) {
    const uint64_t before = WorkerClock(Status(job), 1);
    ASSERT_TRUE(box.CutOff(job.worker_host(1)).ok());
    absl::SleepFor(kCut);  // The fault's length, not a wait for anything.
    const uint64_t during = WorkerClock(Status(job), 1);
    ASSERT_TRUE(box.Heal().ok());
    // Cut off, worker 1 completed at most the steps in flight.
    EXPECT_LE(during, before + 3) << "worker 1 trained through the cut\n" << job.Logs();
    EXPECT_FALSE(job.Ended()) << "the job ended during the cut\n" << job.Logs();
  });
  ExpectAllTrained("SSP (e) worker 1's host cut off 12 s", run);
  ExpectLogged(run,
               "worker 1 missed heartbeats: declared dead; it leaves the clock minimum "
               "(cluster.on_worker_loss REASSIGN)");
}

TEST_F(NetFaultSspTest, NodeLostServerAndWorkerTogether) {
  // Worker 1 lives on server 1's host: the node.
  const int node = 2;
  const JobRun run =
      RunJob(Ssp("ssp-b", kStepDelayMs, "", {{1, node}}), [node](SupervisedJob& job, NetBox& box) {
        ASSERT_EQ(job.server_host(1), node);
        auto killed = box.KillHost(node);
        ASSERT_TRUE(killed.ok()) << killed.status();
        EXPECT_EQ(*killed, 2) << "the node held server 1 and worker 1";
      });
  ExpectAllTrained("SSP (b) node lost (server 1 + worker 1)", run);
  EXPECT_EQ(run.server_restarts[1], 1);
  EXPECT_EQ(run.worker_restarts[1], 1);
  EXPECT_GE(run.outcome.recoveries, 1) << "no rollback after server 1 was lost\n" << run.logs;
}

// Worker 1 is SIGKILLed and its supervisor does not start it again.
void KillForGood(SupervisedJob& job, NetBox&) {
  job.sup().KeepDown(job.worker(1));
  job.sup().Signal(job.worker(1), SIGKILL);
}

TEST_F(NetFaultSspTest, WorkerLostForGoodShareTakenOver) {
  const JobRun run = RunJob(Ssp("ssp-n", kStepDelayMs), KillForGood);
  ExpectAllTrained("SSP (n) worker 1 killed, never back", run);
  EXPECT_EQ(run.worker_codes[1], 128 + SIGKILL) << "worker 1 was not SIGKILLed for good";
  EXPECT_EQ(run.worker_restarts[1], 0);
  ExpectLogged(run, "worker 0 finished its share and takes over worker 1's");
}

TEST_F(NetFaultSspTest, WorkerLostForGoodDropped) {
  const JobRun run = RunJob(Ssp("ssp-drop", kStepDelayMs, "DROP"), KillForGood);
  const JobOutcome& out = run.outcome;
  std::printf("SSP DROP worker 1 killed, never back (%.0f s): %s\n", run.seconds,
              out.result.c_str());
  EXPECT_EQ(run.worker_codes[1], 128 + SIGKILL) << "worker 1 was not SIGKILLed for good";
  EXPECT_EQ(out.code, 0) << out.result << "\n" << run.logs;
  EXPECT_EQ(Field(out, "state"), "done") << out.result;
  // The loss is in the result, never silent.
  const std::string untrained = Field(out, "untrained_samples");
  ASSERT_FALSE(untrained.empty()) << "no untrained_samples in " << out.result << "\n" << run.logs;
  EXPECT_GT(std::stoull(untrained), 0u) << out.result;
  ASSERT_FALSE(Field(out, "samples").empty()) << out.result;
  EXPECT_LT(std::stoull(Field(out, "samples")), kSspTrainLines) << out.result;
  ExpectLogged(run, "the job ends without the shares of the workers it lost");
}

}  // namespace
}  // namespace shardps
