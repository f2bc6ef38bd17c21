// Hostile peers and unlucky operators against the real ps_scheduler (the
// scheduler's side of docs/security.md), with real ps_servers and ps_workers on
// 127.0.0.1 where the job needs them:
//
//  - forged worker requests (a rank that never registered, another process
//    speaking for a registered rank, a tick beyond
//    the granted step, metrics with 2^64-1 samples) are refused, naming the
//    rank, and the job's result counts only what the workers trained;
//  - forged heartbeats (a guessed job id, no or another incarnation) do not
//    keep a SIGKILLed server ALIVE: it is declared DEAD and recovery starts;
//  - a corrupt newest checkpoint (a part file's CRC broken) fails the
//    restart naming the file, unless checkpoint.on_corrupt: FALL_BACK, which
//    sets it aside and resumes from the one before, then writes the final
//    checkpoint at the same clock again;
//  - an unusable checkpoint.dir fails the job at start with the reason, and
//    cuts that keep failing (the directory replaced by a file mid-job; root
//    ignores permissions) fail the job loudly instead of ending "done".
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "common/config.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

namespace fs = std::filesystem;
using testing::RunfilePath;
using testing::Subprocess;
using testing::SupervisedJob;

// The job's tables and model: testing::kSmallDlrmTables with its own dense
// optimizer.
std::string Tables() {
  testing::SmallDlrm t;
  t.dense_optimizer = "adagrad { learning_rate: 0.02 }";
  return testing::SmallDlrmTables(t);
}

constexpr char kConfig[] = R"pb(
name: "trust"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 256 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 }
cluster {
  num_servers: @SERVERS@ num_workers: 2 num_partitions: 64 mode: SSP staleness: 1
  heartbeat_ms: 100 dead_after_ms: 600 server_deadline_ms: 20000 worker_deadline_ms: 4000
}
@CHECKPOINT@
)pb";

std::string DataDir() { return ::testing::TempDir() + "/trust_data"; }

std::string Config(int servers, const std::string& checkpoint) {
  return Tables() + absl::StrReplaceAll(kConfig, {{"@DATA@", DataDir()},
                                                  {"@SERVERS@", std::to_string(servers)},
                                                  {"@CHECKPOINT@", checkpoint}});
}

// Config(...) written to TestDir(name)/job.pbtxt; its path.
std::string WriteConfig(const std::string& name, int servers, const std::string& checkpoint) {
  const std::string path = testing::TestDir(name) + "/job.pbtxt";
  std::ofstream(path) << Config(servers, checkpoint);
  return path;
}

void ExpectRefused(const grpc::Status& st, grpc::StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.error_code(), code) << st.error_message();
  EXPECT_NE(st.error_message().find(needle), std::string::npos) << st.error_message();
}

// A scheduler and `servers` real servers; workers are driven by hand (the
// legitimate ones through SchedulerClient, the forger through a raw stub).
class HandDriven {
 public:
  HandDriven(const std::string& name, int servers)
      : processes_(testing::ManualJob(name, Config(servers, ""), servers, 0)) {
    EXPECT_TRUE(processes_.Start().ok()) << processes_.Logs();
    EXPECT_TRUE(processes_.WaitListening(absl::Seconds(60)).ok()) << processes_.Logs();
    auto config = LoadJobConfig(processes_.config_path());
    EXPECT_TRUE(config.ok()) << config.status();
    job_id_ = ConfigFingerprint(*config);  // What anyone with the config computes.
    address_ = processes_.address();
    forger_ = Scheduler::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  // A worker process's client: registered as `rank`, heartbeating.
  std::unique_ptr<SchedulerClient> Worker(int rank) {
    auto client = std::make_unique<SchedulerClient>(address_);
    RegisterRequest r;
    r.set_role(WORKER);
    r.set_requested_index(rank);
    r.set_config_fingerprint(job_id_);
    auto reg = client->Register(r, absl::Seconds(30));
    EXPECT_TRUE(reg.ok()) << reg.status();
    client->StartHeartbeats(WORKER, rank, job_id_, absl::Milliseconds(100), absl::Seconds(30),
                            [](bool, const std::string&) {});
    return client;
  }

  JobStatusResponse Status() {
    SchedulerClient client(address_);
    return client.JobStatus().value_or(JobStatusResponse());
  }

  template <typename Req, typename Resp, typename Call>
  grpc::Status Forge(Call call, const Req& request, Resp* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ((*forger_).*call)(&ctx, request, response);
  }

  uint64_t job_id() const { return job_id_; }
  // The scheduler and the servers (no workers: the test drives them).
  SupervisedJob& processes() { return processes_; }

 private:
  SupervisedJob processes_;
  std::string address_;
  uint64_t job_id_ = 0;
  std::unique_ptr<Scheduler::Stub> forger_;
};

TEST(SchedulerTrustTest, ForgedWorkerRequestsAreRefusedAndTheResultStaysTrue) {
  HandDriven job("t_forged_workers", 1);
  auto w0 = job.Worker(0);
  auto start = w0->WaitStart(0, std::nullopt, absl::Seconds(30));
  ASSERT_TRUE(start.ok()) << start.status();
  const uint64_t generation = start->generation();
  w0->set_generation(generation);

  // Rank 1 never registered: its tick, clock wait, barrier and "done" report
  // are refused by name.
  TickRequest tick;
  tick.set_rank(1);
  tick.set_clock(1);
  tick.set_generation(generation);
  TickResponse tick_response;
  ExpectRefused(job.Forge(&Scheduler::Stub::Tick, tick, &tick_response),
                grpc::StatusCode::FAILED_PRECONDITION,
                "Tick: worker 1 has not registered with this scheduler");
  WaitClockRequest wait;
  wait.set_rank(1);
  wait.set_generation(generation);
  WaitClockResponse wait_response;
  ExpectRefused(job.Forge(&Scheduler::Stub::WaitClock, wait, &wait_response),
                grpc::StatusCode::FAILED_PRECONDITION, "worker 1 has not registered");
  BarrierRequest barrier;
  barrier.set_name("trained");
  barrier.set_role(WORKER);
  barrier.set_index(1);
  barrier.set_generation(generation);
  BarrierResponse barrier_response;
  ExpectRefused(job.Forge(&Scheduler::Stub::Barrier, barrier, &barrier_response),
                grpc::StatusCode::FAILED_PRECONDITION, "worker 1 has not registered");
  MetricsReport forged;
  forged.set_rank(1);
  forged.set_step(1);
  forged.set_samples(UINT64_MAX);
  forged.set_done(true);
  forged.set_final(true);
  forged.set_generation(generation);
  MetricsAck ack;
  ExpectRefused(job.Forge(&Scheduler::Stub::ReportMetrics, forged, &ack),
                grpc::StatusCode::FAILED_PRECONDITION, "worker 1 has not registered");

  // Rank 0 is registered: a request that does not come from its process
  // (another incarnation) is refused; and even with its incarnation the
  // forger's values are checked: no tick past the granted step, no 2^64-1
  // samples.
  ASSERT_TRUE(w0->WaitClock(0, 0, absl::Seconds(30)).ok());
  ASSERT_TRUE(w0->Tick(0, 1).ok());
  tick.set_rank(0);
  tick.set_clock(2);
  ExpectRefused(job.Forge(&Scheduler::Stub::Tick, tick, &tick_response),
                grpc::StatusCode::FAILED_PRECONDITION, "Tick: worker 0 is held by another process");
  WaitStartRequest start_request;  // Learning rank 0's start point and data position.
  start_request.set_rank(0);
  start_request.set_timeout_ms(100);
  WaitStartResponse start_response;
  ExpectRefused(job.Forge(&Scheduler::Stub::WaitStart, start_request, &start_response),
                grpc::StatusCode::FAILED_PRECONDITION,
                "WaitStart: worker 0 is held by another process");
  tick.set_incarnation(w0->incarnation());
  ExpectRefused(job.Forge(&Scheduler::Stub::Tick, tick, &tick_response),
                grpc::StatusCode::FAILED_PRECONDITION,
                "worker 0 ticked to clock 2 but was allowed to start steps < 1 only");
  forged.set_rank(0);
  ExpectRefused(job.Forge(&Scheduler::Stub::ReportMetrics, forged, &ack),
                grpc::StatusCode::FAILED_PRECONDITION, "metrics: worker 0 is held by another");
  forged.set_incarnation(w0->incarnation());
  ExpectRefused(job.Forge(&Scheduler::Stub::ReportMetrics, forged, &ack),
                grpc::StatusCode::INVALID_ARGUMENT,
                "samples is 18446744073709551615: more than step (1) x training.batch_size");
  forged.set_samples(256);
  forged.set_train_loss(std::nan(""));
  ExpectRefused(job.Forge(&Scheduler::Stub::ReportMetrics, forged, &ack),
                grpc::StatusCode::INVALID_ARGUMENT, "train_loss is nan");

  // The real workers finish: the result counts what they trained.
  auto w1 = job.Worker(1);
  w1->set_generation(generation);
  ASSERT_TRUE(w1->WaitClock(1, 0, absl::Seconds(30)).ok());
  ASSERT_TRUE(w1->Tick(1, 1).ok());
  for (int rank = 0; rank < 2; ++rank) {
    MetricsReport done;
    done.set_rank(rank);
    done.set_step(1);
    done.set_samples(256);
    done.set_done(true);
    done.set_final(true);
    done.set_generation(generation);
    ASSERT_TRUE((rank == 0 ? w0 : w1)->ReportMetrics(done).ok());
  }
  auto code = job.processes().WaitScheduler(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  const std::string output = job.processes().sup().Output(job.processes().scheduler());
  EXPECT_NE(output.find("PS_JOB_RESULT state=done samples=512 "), std::string::npos) << output;
}

TEST(SchedulerTrustTest, ForgedHeartbeatsDoNotKeepAKilledServerAlive) {
  HandDriven job("t_forged_heartbeats", 2);
  auto w0 = job.Worker(0);
  auto w1 = job.Worker(1);
  ASSERT_TRUE(w0->WaitStart(0, std::nullopt, absl::Seconds(30)).ok());
  ASSERT_EQ(job.Status().state(), "running");
  SupervisedJob& processes = job.processes();
  processes.sup().Signal(processes.server(1), SIGKILL);
  (void)processes.sup().WaitFinal(processes.server(1), absl::Seconds(10));
  // The forger guesses the job id (the config's fingerprint) and sends
  // heartbeats for server 1 with no incarnation, and with made-up ones.
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0}, sent{0};
  std::thread forger([&] {
    for (uint64_t n = 0; !stop; ++n) {
      HeartbeatRequest hb;
      hb.set_role(SERVER);
      hb.set_index(1);
      hb.set_job_id(job.job_id());
      hb.set_incarnation(n % 2 == 0 ? 0 : 0x5eed0000 + n);
      HeartbeatResponse response;
      accepted += job.Forge(&Scheduler::Stub::Heartbeat, hb, &response).ok();
      ++sent;
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  // Until the server is declared dead and both kinds of forgery (no
  // incarnation, a made-up one) have been sent: however fast or slow the
  // forger runs, every forged heartbeat must have been refused (a single one
  // accepted would have counted as the server's), and the server declared
  // dead although they kept coming.
  bool dead = false, recovering = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!(dead && recovering && sent >= 2) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    const JobStatusResponse status = job.Status();
    recovering = status.state() == "recovering";
    for (const auto& m : status.members()) {
      if (m.role() == SERVER && m.index() == 1) dead = m.state() == DEAD;
    }
  }
  stop = true;
  forger.join();
  EXPECT_TRUE(dead) << "the forged heartbeats kept the killed server alive";
  EXPECT_TRUE(recovering) << job.Status().state();
  EXPECT_GE(sent.load(), 2);
  EXPECT_EQ(accepted.load(), 0);
  // The refusals say why; another job's id is refused too.
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  hb.set_index(1);
  hb.set_job_id(job.job_id());
  HeartbeatResponse response;
  ExpectRefused(job.Forge(&Scheduler::Stub::Heartbeat, hb, &response),
                grpc::StatusCode::INVALID_ARGUMENT, "server 1 sent no incarnation");
  hb.set_job_id(job.job_id() + 1);
  hb.set_incarnation(7);
  ExpectRefused(job.Forge(&Scheduler::Stub::Heartbeat, hb, &response),
                grpc::StatusCode::FAILED_PRECONDITION, "heartbeat: server 1 names job");
  processes.KillAll();
}

class CheckpointFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 8000, 1000, 2).ok());
  }

  // Runs a whole job (1 server, 2 workers) on `config`; returns the
  // scheduler's exit status and fills its PS_JOB_RESULT line.
  // `config`: the path of the job's config file.
  static int RunJob(const std::string& name, const std::string& config,
                    const std::vector<std::string>& worker_flags, std::string* result,
                    std::string* log, const std::function<void()>& during = nullptr) {
    SupervisedJob job(testing::ManualJob(name, testing::ReadFile(config), 1, 2, worker_flags));
    EXPECT_TRUE(job.Start().ok());
    if (during) during();
    auto code = job.WaitScheduler(absl::Minutes(5));
    EXPECT_TRUE(code.ok()) << code.status() << job.Logs();
    *result = job.SchedulerResult();
    *log = job.SchedulerLog();
    if (code.value_or(-1) == 0) {
      (void)job.WaitWorkers(absl::Seconds(60));
      (void)job.WaitServersChecksum(absl::Seconds(60));
    }
    // A job that failed at once: workers still starting never registered,
    // and retry until start_deadline_ms; stop them.
    job.KillAll();
    return code.value_or(-1);
  }
};

std::string CheckpointBlock(const std::string& dir, const std::string& extra = "") {
  return absl::StrCat("checkpoint { dir: \"", dir, "\" every_steps: 4 keep: 5 ", extra, " }");
}

// Complete checkpoints under `root`, by clock.
std::vector<uint64_t> Complete(const std::string& root) {
  std::vector<uint64_t> clocks;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && name.find('.') == std::string::npos &&
        fs::exists(e.path() / "MANIFEST")) {
      clocks.push_back(std::stoull(name.substr(5)));
    }
  }
  std::sort(clocks.begin(), clocks.end());
  return clocks;
}

// Flips one byte in the middle of the first part file of `dir` (same size:
// only a server's CRC check at restore finds it); returns its path.
std::string BreakAPartFile(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("part-", 0) != 0) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(e.path());
    f.seekg(size / 2);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(size / 2);
    f.write(&c, 1);
    return e.path().string();
  }
  return "";
}

TEST_F(CheckpointFaultTest, ACorruptNewestCheckpointIsRefusedUnlessTheOperatorFallsBack) {
  const std::string root = testing::TestDir("t_corrupt") + "/ckpt";
  fs::remove_all(root);
  std::string result, log;
  const std::string config = WriteConfig("t_corrupt", 1, CheckpointBlock(root));
  ASSERT_EQ(RunJob("t_corrupt/first", config, {"--max_steps=10"}, &result, &log), 0) << result;
  const std::vector<uint64_t> clocks = Complete(root);
  ASSERT_GE(clocks.size(), 2u) << log;
  const uint64_t newest = clocks.back();
  const std::string broken =
      BreakAPartFile(absl::StrCat(root, "/ckpt-", absl::Dec(newest, absl::kZeroPad12)));
  ASSERT_FALSE(broken.empty());

  // Started again as it is: refused, naming the checkpoint and the file.
  EXPECT_EQ(RunJob("t_corrupt/refused", config, {"--max_steps=10"}, &result, &log), 1) << result;
  EXPECT_NE(result.find("state=failed: checkpoint " + root + "/ckpt-"), std::string::npos)
      << result;
  EXPECT_NE(log.find(fs::path(broken).filename().string()), std::string::npos)
      << "the failure does not name the file\n"
      << log;
  EXPECT_EQ(Complete(root).back(), newest) << "nothing may change on a refusal";

  // The operator asks to fall back: the corrupt one is set aside, the job
  // resumes from the one before and writes its final checkpoint at the same
  // clock again (no false "already complete").
  const std::string fall_back =
      WriteConfig("t_corrupt_fb", 1, CheckpointBlock(root, "on_corrupt: FALL_BACK"));
  EXPECT_EQ(RunJob("t_corrupt/fall_back", fall_back, {"--max_steps=10"}, &result, &log), 0)
      << result << "\n"
      << log;
  EXPECT_NE(result.find("state=done"), std::string::npos) << result;
  EXPECT_NE(log.find("is corrupt"), std::string::npos) << log;
  EXPECT_NE(log.find(absl::StrCat("set aside as ", root, "/ckpt-")), std::string::npos) << log;
  EXPECT_EQ(Complete(root).back(), newest) << "the final checkpoint was not written again";
  bool aside = false;
  for (const auto& e : fs::directory_iterator(root)) {
    aside |= e.path().filename().string().find(".corrupt-") != std::string::npos;
  }
  EXPECT_TRUE(aside);
}

TEST_F(CheckpointFaultTest, AnUnusableCheckpointDirFailsTheJobAtStart) {
  const std::string file = testing::TestDir("t_unusable") + "/not-a-dir";
  std::ofstream(file) << "a file";
  for (const std::string& dir : {file, file + "/ckpt"}) {
    const std::string config = WriteConfig("t_unusable", 1, CheckpointBlock(dir));
    Subprocess scheduler;
    ASSERT_TRUE(scheduler
                    .Start({RunfilePath("scheduler/ps_scheduler"), "--config=" + config},
                           testing::TestDir("t_unusable") + "/scheduler.log")
                    .ok());
    auto code = scheduler.Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status() << "; the scheduler did not stop";
    EXPECT_EQ(*code, 1);
    EXPECT_NE(scheduler.output().find("PS_JOB_RESULT state=failed: checkpoint.dir " + dir +
                                      " is unusable: "),
              std::string::npos)
        << scheduler.output();
    EXPECT_NE(
        scheduler.output().find(dir == file ? "exists and is not a directory" : "Not a directory"),
        std::string::npos)
        << scheduler.output();
  }
}

TEST_F(CheckpointFaultTest, CutsThatKeepFailingFailTheJobLoudly) {
  const std::string root = testing::TestDir("t_cut_fails") + "/ckpt";
  fs::remove_all(root);
  fs::remove_all(root + ".old");
  std::string result, log;
  const std::string config = WriteConfig("t_cut_fails", 1, CheckpointBlock(root));
  // Once the first checkpoint is complete, the checkpoint root becomes a
  // regular file (as a full or broken disk would refuse every write).
  const auto replace_root = [&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (Complete(root).empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_FALSE(Complete(root).empty()) << "no first checkpoint";
    fs::rename(root, root + ".old");
    std::ofstream(root) << "not a directory";
  };
  EXPECT_EQ(RunJob("t_cut_fails/run", config, {"--step_delay_ms=100"}, &result, &log, replace_root),
            1)
      << result << "\n"
      << log;
  EXPECT_NE(result.find("state=failed: checkpoint at clock "), std::string::npos) << result;
  EXPECT_NE(result.find("failed 3 times in a row (checkpoint.dir " + root + ")"), std::string::npos)
      << result;
  EXPECT_NE(result.find("exists and is not a directory"), std::string::npos) << result;
  EXPECT_NE(log.find("attempt 2 of 3 failed; trying again"), std::string::npos) << log;
}

}  // namespace
}  // namespace shardps
