// Starts the real ps_scheduler and two real ps_servers and drives the
// workers' side by hand over gRPC: registration, maps, start points, clocks
// and the job's end.
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;

constexpr char kConfig[] = R"pb(
name: "sched-test"
tables { id: 1 name: "emb" dim: 4 optimizer { sgd { learning_rate: 0.1 } } }
data { train_files: "unused.tsv" }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 64
  mode: SSP staleness: 1
  heartbeat_ms: 100 dead_after_ms: 600 server_deadline_ms: 3000
  on_worker_loss: DROP
}
)pb";

class SchedulerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/sched.pbtxt";
    std::ofstream(path_) << kConfig;
    auto config = LoadJobConfig(path_);
    ASSERT_TRUE(config.ok()) << config.status();
    fingerprint_ = ConfigFingerprint(*config);
    ASSERT_TRUE(proc_.Start({RunfilePath("scheduler/ps_scheduler"), "--config=" + path_}).ok());
    auto address = proc_.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(30));
    ASSERT_TRUE(address.ok()) << address.status();
    address_ = *address;
    client_ = std::make_unique<SchedulerClient>(address_);
  }

  RegisterRequest Req(Role role, const std::string& address, int index = -1) {
    RegisterRequest r;
    r.set_role(role);
    r.set_address(address);
    if (index >= 0) r.set_requested_index(index);
    r.set_config_fingerprint(fingerprint_);
    return r;
  }

  // Starts ps_server `index` against the scheduler; returns its address.
  std::string StartServer(int index) {
    Subprocess& s = servers_[index];
    EXPECT_TRUE(s.Start({RunfilePath("server/ps_server"), "--config=" + path_,
                         "--scheduler=" + address_, "--index=" + std::to_string(index)},
                        ::testing::TempDir() + "/sched-server-" + std::to_string(index) + ".log")
                    .ok());
    auto address = s.WaitForLine("PS_SERVER_LISTENING ", absl::Seconds(30));
    EXPECT_TRUE(address.ok()) << address.status();
    return address.value_or("");
  }

  std::string path_;
  uint64_t fingerprint_ = 0;
  Subprocess proc_;
  Subprocess servers_[2];
  std::string address_;
  std::unique_ptr<SchedulerClient> client_;
};

TEST_F(SchedulerProcessTest, RegistrationEdgeCasesAndTheJobsEnd) {
  // A process with another job config is refused, with a clear status.
  RegisterRequest wrong = Req(WORKER, "");
  wrong.set_config_fingerprint(fingerprint_ ^ 1);
  auto refused = client_->Register(wrong, absl::Seconds(5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("different job config"), std::string::npos);

  // One client per simulated process, each with its own heartbeats.
  auto member = [&](Role role, const std::string& address, int index, RegisterResponse* out) {
    auto client = std::make_unique<SchedulerClient>(address_);
    auto r = client->Register(Req(role, address, index), absl::Seconds(5));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return client;
    if (out) *out = *r;
    client->StartHeartbeats(role, r->index(), r->job_id(), absl::Milliseconds(100),
                            absl::Seconds(5), [](bool, const std::string&) {});
    return client;
  };

  // One server: the map is not ready; a late second server completes it.
  StartServer(0);
  EXPECT_EQ(client_->GetPartitionMap(1, absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::string late_address;
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(300));
    late_address = StartServer(1);
  });
  auto map = client_->GetPartitionMap(1, absl::Seconds(20));
  late.join();
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->version(), 1u);
  ASSERT_EQ(map->server_addresses_size(), 2);
  EXPECT_EQ(map->server_addresses(1), late_address);

  // Workers; a duplicate index is refused while the holder is alive.
  RegisterResponse r0, r1;
  auto w0 = member(WORKER, "", 0, &r0);
  auto w1 = member(WORKER, "", 1, &r1);
  EXPECT_EQ(r1.shard().worker_rank(), 1u);
  EXPECT_EQ(r1.shard().num_workers(), 2u);
  EXPECT_EQ(client_->Register(Req(WORKER, "", 1), absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kAlreadyExists);

  // Where the workers start: clock 0 of the job's generation, with the map.
  auto start = w1->WaitStart(1, std::nullopt, absl::Seconds(20));
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_FALSE(start->job_ended());
  EXPECT_EQ(start->clock(), 0u);
  EXPECT_GT(start->generation(), 0u);
  EXPECT_EQ(start->map().version(), map->version());
  // A clock call of another generation is refused as stale; one from another
  // process than worker 1's is refused too.
  w1->set_generation(start->generation() - 1);
  const absl::Status stale = w1->WaitClock(1, 0, absl::Milliseconds(100));
  EXPECT_NE(stale.message().find("stale generation"), std::string::npos) << stale;
  w1->set_generation(start->generation());
  client_->set_generation(start->generation());
  const absl::Status impostor = client_->WaitClock(1, 0, absl::Milliseconds(100));
  EXPECT_NE(impostor.message().find("worker 1 is held by another process"), std::string::npos)
      << impostor;

  // SSP(1): worker 1 may start step 1 but not step 2 while worker 0 is at 0.
  EXPECT_TRUE(w1->WaitClock(1, 1, absl::Milliseconds(100)).ok());
  ASSERT_TRUE(w1->Tick(1, 1).ok());
  ASSERT_TRUE(w1->Tick(1, 2).ok());
  EXPECT_EQ(w1->WaitClock(1, 2, absl::Milliseconds(200)).code(),
            absl::StatusCode::kDeadlineExceeded);
  // Worker 0 stops heartbeating (as if killed): it is declared dead, leaves
  // the minimum, and worker 1 goes on.
  w0.reset();
  EXPECT_TRUE(w1->WaitClock(1, 2, absl::Seconds(10)).ok());

  auto status = client_->JobStatus();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->max_spread(), 2u);
  EXPECT_EQ(status->state(), "running");
  bool worker0_dead = false;
  for (const auto& m : status->members()) {
    if (m.role() == WORKER && m.index() == 0) worker0_dead = m.state() == DEAD;
  }
  EXPECT_TRUE(worker0_dead);

  // Worker 1 finishes: with on_worker_loss DROP the job is done without the
  // dead worker, whose unfinished data the summary and the result report;
  // the scheduler exits 0.
  MetricsReport done;
  done.set_rank(1);
  done.set_step(2);
  done.set_done(true);
  done.set_final(true);
  ASSERT_TRUE(w1->ReportMetrics(done).ok());
  auto code = proc_.Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  EXPECT_NE(proc_.output().find("PS_JOB_RESULT state=done"), std::string::npos) << proc_.output();
  // Worker 0 stopped at clock 0, worker 1 trained 2 steps of batch_size 256.
  EXPECT_NE(proc_.output().find(" untrained_samples=512"), std::string::npos) << proc_.output();
  // The servers saw the end in a heartbeat and exited 0.
  for (Subprocess& s : servers_) {
    auto server_code = s.Wait(absl::Seconds(30));
    ASSERT_TRUE(server_code.ok()) << server_code.status();
    EXPECT_EQ(*server_code, 0);
  }
}

}  // namespace
}  // namespace shardps
