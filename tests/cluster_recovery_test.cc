// Recovery the way a cluster runs a job: the bare binaries, each kept up by
// a supervisor of the test's own (tests/testing/supervisor.h) that starts
// whatever dies again with exactly the same flags, as a StatefulSet, a
// Deployment, an Indexed Job or a Slurm step loop does. No launcher, and no
// flag an operator would have to remember: the scheduler owns recovery.
//
//  - BSP: a server SIGKILLed three times at random clocks (faults are
//    placed by the job's clock, which the test reads from the scheduler,
//    and every worker step takes >= 20 ms, so no machine is fast enough to
//    end the job first), once during a checkpoint's background write: the job ends with weights bit-identical
//    to the job that never failed, and a push of the generation before the
//    first rollback is refused by a live server.
//  - SSP(2): the same kills; the AUC ends within 0.01 of the uninterrupted
//    run.
//  - The scheduler and a server SIGKILLed together: bit-identical (BSP).
//  - A server stalled (SIGSTOP) past dead_after_ms rejoins with its state;
//    a server stopped by SIGTERM mid-job exits non-zero and is restarted.
//  - Every worker dead (a data file that does not exist): the job fails and
//    says which workers died and why.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "common/client/scheduler_client.h"
#include "tests/testing/cluster.h"
#include "tests/testing/supervisor.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Supervisor;
constexpr auto Dir = testing::TestDir;

// Each worker trains kSteps steps, each at least kStepDelayMs long (>= 10 s
// of training whatever the machine's speed); faults are planned by clock
// well before kSteps.
constexpr uint64_t kSteps = 500;
constexpr int kStepDelayMs = 20;

constexpr char kConfig[] = R"pb(
name: "cluster-chaos"
tables {
  id: 1 name: "categorical" kind: SPARSE dim: 8 seed: 17
  init { kind: UNIFORM scale: 0.05 }
  optimizer { adagrad { learning_rate: 0.05 } }
}
tables {
  id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
  optimizer { adam { learning_rate: 0.002 } }
}
model { kind: DLRM bottom_mlp: [16, 8] top_mlp: [16] dense_table: "mlp" }
data { format: CRITEO @DATA@ }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 @MODE@
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000 worker_deadline_ms: 4000
}
checkpoint { dir: "@CKPT@" every_steps: 40 keep: 2 }
)pb";

// A free port below the ephemeral range, so that no other test's outgoing
// connection takes it while a supervised process is down.
int FreePort() {
  static std::mt19937 rng(static_cast<uint32_t>(getpid()));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = 20000 + static_cast<int>(rng() % 12000);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (ok) return port;
  }
  return 0;
}

// The clock of the newest checkpoint with a MANIFEST (0 if none), and
// whether a newer one is being written (its directory without MANIFEST).
struct CheckpointState {
  uint64_t complete = 0;
  bool writing = false;
};
CheckpointState Checkpoints(const std::string& root) {
  CheckpointState s;
  std::vector<uint64_t> incomplete;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0) continue;
    const uint64_t clock = std::stoull(name.substr(5));
    if (std::filesystem::exists(e.path() / "MANIFEST", ec)) {
      s.complete = std::max(s.complete, clock);
    } else {
      incomplete.push_back(clock);
    }
  }
  for (uint64_t c : incomplete) s.writing |= c > s.complete;
  return s;
}

struct Outcome {
  int code = -1;
  uint64_t checksum = 0;
  double auc = 0;
  int recoveries = 0;
  std::string result;
};

// One job: scheduler, 2 servers and 2 workers, each under the supervisor,
// on fixed ports (a restarted server comes back at its address, as a
// StatefulSet pod does).
class Job {
 public:
  Job(const std::string& name, const std::string& mode, const std::string& data,
      const std::vector<std::string>& server_flags = {}, int max_restarts = 5)
      : dir_(Dir(name)), ckpt_(Dir(name + "/ckpt")), sup_({max_restarts, absl::Seconds(1)}) {
    const std::string config = dir_ + "/job.pbtxt";
    std::ofstream(config) << absl::StrReplaceAll(
        kConfig, {{"@DATA@", data}, {"@MODE@", mode}, {"@CKPT@", ckpt_}});
    address_ = absl::StrCat("127.0.0.1:", FreePort());
    auto add = [&](Supervisor::Spec spec) {
      auto id = sup_.Add(std::move(spec));
      EXPECT_TRUE(id.ok()) << id.status();
      return id.value_or(-1);
    };
    scheduler_ = add({"scheduler",
                      {RunfilePath("scheduler/ps_scheduler"), "--config=" + config,
                       "--listen=" + address_},
                      dir_ + "/scheduler.log",
                      {0, 1, 2}});
    for (int i = 0; i < 2; ++i) {
      server_addresses_[i] = absl::StrCat("127.0.0.1:", FreePort());
      std::vector<std::string> argv = {RunfilePath("server/ps_server"), "--config=" + config,
                                       "--scheduler=" + address_, absl::StrCat("--index=", i),
                                       "--listen=" + server_addresses_[i]};
      argv.insert(argv.end(), server_flags.begin(), server_flags.end());
      servers_[i] = add({absl::StrCat("server-", i), argv,
                         absl::StrCat(dir_, "/server-", i, ".log")});
    }
    for (int r = 0; r < 2; ++r) {
      workers_[r] = add({absl::StrCat("worker-", r),
                         {RunfilePath("worker/ps_worker"), "--config=" + config,
                          "--scheduler=" + address_, absl::StrCat("--rank=", r),
                          absl::StrCat("--max_steps=", kSteps),
                          absl::StrCat("--step_delay_ms=", kStepDelayMs)},
                         absl::StrCat(dir_, "/worker-", r, ".log")});
    }
  }

  Supervisor& sup() { return sup_; }
  int scheduler() const { return scheduler_; }
  int server(int i) const { return servers_[i]; }
  const std::string& server_address(int i) const { return server_addresses_[i]; }
  const std::string& ckpt() const { return ckpt_; }
  const std::string& address() const { return address_; }
  bool Ended() { return sup_.WaitFinal(scheduler_, absl::ZeroDuration()).ok(); }

  std::string Logs() const {
    std::string out;
    for (const char* name : {"scheduler", "server-0", "server-1", "worker-0", "worker-1"}) {
      std::ifstream in(dir_ + "/" + name + ".log");
      std::vector<std::string> lines;
      for (std::string line; std::getline(in, line);) lines.push_back(line);
      out += absl::StrCat("--- ", name, " ---\n");
      for (size_t i = lines.size() > 25 ? lines.size() - 25 : 0; i < lines.size(); ++i) {
        out += lines[i] + "\n";
      }
    }
    return out;
  }
  std::string SchedulerLog() const { return testing::ReadFile(dir_ + "/scheduler.log"); }

  // Waits for the job's end and reads its results. `trained`: the job
  // must have ended with its results (PS_JOB_RESULT's eval_auc and
  // recoveries, each server's weights checksum); a missing one fails the
  // test rather than reading as 0.
  Outcome Finish(bool trained = true) {
    Outcome out;
    auto code = sup_.WaitFinal(scheduler_, absl::Minutes(10));
    EXPECT_TRUE(code.ok()) << code.status() << Logs();
    out.code = code.value_or(-1);
    const std::string sched = sup_.Output(scheduler_);
    const size_t at = sched.find("PS_JOB_RESULT ");
    if (at != std::string::npos) out.result = sched.substr(at, sched.find('\n', at) - at);
    auto fields = testing::ParseResult(out.result);
    if (fields.count("eval_auc")) {
      out.auc = std::stod(fields["eval_auc"]);
    } else if (trained) {
      ADD_FAILURE() << "no eval_auc in the job's result: \"" << out.result << "\"\n" << Logs();
    }
    if (fields.count("recoveries")) {
      out.recoveries = std::stoi(fields["recoveries"]);
    } else if (trained) {
      ADD_FAILURE() << "no recoveries in the job's result: \"" << out.result << "\"";
    }
    for (int i = 0; i < 2; ++i) {
      auto server_code = sup_.WaitFinal(servers_[i], absl::Seconds(60));
      EXPECT_TRUE(server_code.ok() && *server_code == 0)
          << "server " << i << ": " << server_code.status() << " " << server_code.value_or(-1);
      const std::string output = sup_.Output(servers_[i]);
      // The last incarnation's checksum (each incarnation that ends cleanly
      // prints one at exit; a SIGKILLed one prints none).
      const size_t c = output.rfind("weights_checksum=");
      if (c != std::string::npos && c + 17 + 16 <= output.size()) {
        out.checksum ^= std::stoull(output.substr(c + 17, 16), nullptr, 16);
      } else if (trained) {
        ADD_FAILURE() << "server " << i << " printed no weights checksum:\n" << output;
      }
    }
    for (int r = 0; r < 2; ++r) (void)sup_.WaitFinal(workers_[r], absl::Seconds(60));
    return out;
  }

 private:
  const std::string dir_, ckpt_;
  Supervisor sup_;
  std::string address_;
  std::string server_addresses_[2];
  int scheduler_ = -1;
  int servers_[2] = {-1, -1};
  int workers_[2] = {-1, -1};
};

// Waits until every live worker has completed `clock` steps of the current
// generation; fails the test, naming what it saw, if the job ended first.
// Faults are placed by clock, not by time: each worker step takes at least
// kStepDelayMs, so the job cannot outrun the test on a fast machine.
bool WaitForClock(Job& job, uint64_t clock) {
  auto status = testing::WaitForJob(
      job.address(), absl::StrCat("every worker at clock ", clock),
      [clock](const JobStatusResponse& s) { return s.state() == "running" && s.min_clock() >= clock; },
      absl::Minutes(3));
  EXPECT_TRUE(status.ok()) << status.status() << "\n" << job.Logs();
  return status.ok();
}

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
  auto stub = ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
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
Outcome RunChaos(const std::string& name, const std::string& mode, int kills,
                 int during_write) {
  Job job(name, mode, SyntheticData(),
          during_write >= 0 ? std::vector<std::string>{"--testing_checkpoint_write_delay_ms=600"}
                            : std::vector<std::string>{});
  std::mt19937 rng(std::hash<std::string>()(name));
  int done = 0;
  for (int k = 0; k < kills; ++k) {
    const uint64_t at = 80 + 130 * k + rng() % 40;
    static_assert(80 + 130 * 2 + 40 + 120 <= kSteps, "the last kill must come well before the end");
    if (!WaitForClock(job, at)) break;
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
  Outcome out = job.Finish();
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
    ASSERT_TRUE(testing::MakeSyntheticData(::testing::TempDir() + "/cluster_chaos_data", 80000,
                                           10000, 4)
                    .ok());
  }
};

TEST_F(ClusterRecoveryTest, BspServerKilledThreeTimesEndsBitIdentical) {
  const Outcome clean = RunChaos("c_bsp_clean", "mode: BSP", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  const Outcome chaos = RunChaos("c_bsp_chaos", "mode: BSP", 3, 1);
  EXPECT_EQ(chaos.code, 0) << chaos.result;
  EXPECT_NE(clean.checksum, 0u);
  EXPECT_EQ(chaos.checksum, clean.checksum) << "weights differ after the recoveries";
  EXPECT_EQ(chaos.auc, clean.auc);
  EXPECT_GE(chaos.recoveries, 3) << chaos.result;
  std::printf("BSP: weights %016llx without kills, %016llx with 3 kills (%d recoveries); "
              "AUC %.6f\n  %s\n",
              static_cast<unsigned long long>(clean.checksum),
              static_cast<unsigned long long>(chaos.checksum), chaos.recoveries, chaos.auc,
              chaos.result.c_str());
}

TEST_F(ClusterRecoveryTest, Ssp2ServerKilledThreeTimesReachesTheSameAuc) {
  const Outcome clean = RunChaos("c_ssp_clean", "mode: SSP staleness: 2", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  const Outcome chaos = RunChaos("c_ssp_chaos", "mode: SSP staleness: 2", 3, -1);
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
  const Outcome clean = RunChaos("c_bsp_clean2", "mode: BSP", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  Job job("c_bsp_both", "mode: BSP", SyntheticData());
  ASSERT_TRUE(WaitForCheckpointAfter(job, 0)) << job.Logs();
  // Mid-way to the next checkpoint.
  ASSERT_TRUE(WaitForClock(job, Checkpoints(job.ckpt()).complete + 20));
  job.sup().Signal(job.scheduler(), SIGKILL);
  job.sup().Signal(job.server(1), SIGKILL);
  const Outcome out = job.Finish();
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
  const Outcome clean = RunChaos("c_bsp_clean3", "mode: BSP", 0, -1);
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
  const Outcome out = job.Finish();
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
  const Outcome clean = RunChaos("c_bsp_clean4", "mode: BSP", 0, -1);
  ASSERT_EQ(clean.code, 0) << clean.result;
  Job job("c_bsp_term", "mode: BSP", SyntheticData());
  ASSERT_TRUE(WaitForCheckpointAfter(job, 0)) << job.Logs();
  const pid_t pid = job.sup().Pid(job.server(0));
  ASSERT_GT(pid, 0);
  kill(pid, SIGTERM);
  const Outcome out = job.Finish();
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
  const Outcome out = job.Finish(/*trained=*/false);
  EXPECT_EQ(out.code, 1) << out.result;
  EXPECT_NE(out.result.find("state=failed"), std::string::npos) << out.result;
  const std::string log = job.SchedulerLog();
  EXPECT_NE(log.find("every worker died and none came back"), std::string::npos) << job.Logs();
  EXPECT_NE(log.find("worker 1"), std::string::npos);
  EXPECT_NE(log.find("shardps-train-0.tsv"), std::string::npos)
      << "the failure does not say why\n" << job.Logs();
  std::printf("every worker dead: %s\n", out.result.c_str());
}

}  // namespace
}  // namespace shardps
