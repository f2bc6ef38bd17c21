// Who may call what on a parameter server, tried against the real binaries
// (docs/security.md):
//
//  - A running job: Control (a map version raised by 1000), Checkpoint and
//    Restore from a caller without the scheduler's control token are refused
//    with PERMISSION_DENIED, and so is a push from a rank the job does not
//    have or with an lr_scale of 3e38; nothing changes (generation, map
//    version, the rows the refused pushes carried gradients for) and the
//    job ends "done".
//  - Paths never come from the wire: a Checkpoint carrying the old `dir`
//    field (now unknown) writes under the server's configured checkpoint.dir
//    and nowhere else.
//  - Ports are exclusive: a second ps_server or ps_scheduler on a taken port
//    fails at start and says so.
//  - A plaintext server on a non-loopback address warns loudly.
//  - A push with clock 2^64-1 does not wipe a table with eviction by clock;
//    BSP pulls waiting for their clock are bounded.
//  - What a member may cost (issue 33): eviction by clocks follows the
//    scheduler's clock whatever clocks pushes claim; keys per request, dense
//    chunk indexes and gradient magnitudes are bounded by the job config.
#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "common/job_secret.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;
using testing::SupervisedJob;
constexpr auto Dir = testing::TestDir;

constexpr char kJob[] = R"pb(
name: "trust"
training { batch_size: 128 epochs: 1 intra_op_threads: 1 }
cluster { num_servers: 2 num_workers: 2 num_partitions: 64 mode: SSP staleness: 2 }
)pb";

std::unique_ptr<ParameterServer::Stub> ServerStub(const std::string& address) {
  return ParameterServer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

PartitionMapProto Map(const std::string& scheduler) {
  auto stub =
      Scheduler::NewStub(grpc::CreateChannel(scheduler, grpc::InsecureChannelCredentials()));
  PartitionMapProto map;
  for (int attempt = 0; attempt < 100 && map.server_addresses_size() < 2; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    GetPartitionMapRequest request;
    request.set_min_version(1);
    request.set_timeout_ms(2000);
    (void)stub->GetPartitionMap(&ctx, request, &map);
  }
  return map;
}

TableInfoResponse Info(ParameterServer::Stub& stub) {
  grpc::ClientContext ctx;
  TableInfoResponse info;
  const grpc::Status st = stub.TableInfo(&ctx, TableInfoRequest(), &info);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return info;
}

TEST(ServerTrustTest, ControlRpcsWithoutTheSchedulersTokenChangeNothing) {
  const std::string dir = Dir("trust_job");
  ASSERT_TRUE(testing::MakeSyntheticData(dir + "/data", 40000, 4000).ok());
  const std::string config =
      absl::StrCat(kJob, testing::kSmallDlrmTables, "data { format: CRITEO synthetic_dir: \"", dir,
                   "/data\" }\n", "checkpoint { dir: \"", dir, "/ckpt\" every_steps: 50 }\n");
  SupervisedJob job(testing::ManualJob("trust_job", config, 2, 2, {"--step_delay_ms=20"}));
  ASSERT_TRUE(job.Start().ok()) << job.Logs();
  ASSERT_TRUE(job.WaitListening(absl::Seconds(60)).ok()) << job.Logs();
  const PartitionMapProto map = Map(job.address());
  ASSERT_EQ(map.server_addresses_size(), 2) << job.Logs();
  auto stub = ServerStub(map.server_addresses(1));
  const TableInfoResponse before = Info(*stub);

  // The attack of issue 18 #1: a map version far ahead of the scheduler's.
  ControlRequest control;
  control.set_map_version(map.version() + 1000);
  for (uint32_t owner : map.owner()) control.add_partition_owner(owner);
  for (uint64_t token : {uint64_t{0}, uint64_t{0x1234}}) {
    control.set_control_token(token);
    grpc::ClientContext ctx;
    ControlResponse response;
    const grpc::Status st = stub->Control(&ctx, control, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
    EXPECT_NE(st.error_message().find("only the job's scheduler"), std::string::npos)
        << st.error_message();
  }
  // Checkpoint and Restore (issue 18 #2).
  {
    CheckpointRequest request;
    request.set_clock(5);
    grpc::ClientContext ctx;
    CheckpointResponse response;
    EXPECT_EQ(stub->Checkpoint(&ctx, request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    RestoreRequest request;
    request.set_initial(true);
    request.set_generation(before.generation() + 1);
    grpc::ClientContext ctx;
    RestoreResponse response;
    EXPECT_EQ(stub->Restore(&ctx, request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // Data-path fields checked against what the server knows (#6, #10). The
  // refused pushes carry real gradients for rows server 1 owns and holds
  // (rows no data line has: keys 1..n of the sparse table, created by a
  // pull), so a push let through would move them.
  constexpr uint32_t kTable = 1;  // kSmallDlrmTables' "categorical", dim 8.
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; keys.size() < 4; ++key) {
    if (map.owner(PartitionOf(kTable, key, map.owner_size())) == 1) keys.push_back(key);
  }
  auto pull = [&] {
    PullRequest request;
    request.set_map_version(map.version());
    request.set_generation(before.generation());
    request.set_purpose(TRAIN);
    TableKeys* tk = request.add_tables();
    tk->set_table_id(kTable);
    for (uint64_t k : keys) tk->add_keys(k);
    grpc::ClientContext ctx;
    PullResponse response;
    const grpc::Status st = stub->Pull(&ctx, request, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return response.tables_size() == 1 ? response.tables(0).values() : std::string();
  };
  const std::string rows_before = pull();
  ASSERT_EQ(rows_before.size(), keys.size() * 8 * sizeof(float));
  auto push = [&](uint32_t rank, float lr_scale) {
    PushRequest request;
    request.set_map_version(map.version());
    request.set_generation(before.generation());
    request.set_worker_rank(rank);
    request.set_lr_scale(lr_scale);
    TableGradients* tg = request.add_tables();
    tg->set_table_id(kTable);
    for (uint64_t k : keys) tg->add_keys(k);
    const std::vector<float> grads(keys.size() * 8, 1.0f);
    tg->set_gradients(grads.data(), grads.size() * sizeof(float));
    grpc::ClientContext ctx;
    PushResponse response;
    return stub->Push(&ctx, request, &response);
  };
  grpc::Status st = push(99, 1.0f);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("the job has 2 workers"), std::string::npos)
      << st.error_message();
  st = push(0, 3e38f);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("lr_scale"), std::string::npos) << st.error_message();
  EXPECT_EQ(pull(), rows_before) << "a refused push changed the rows it carried";

  const TableInfoResponse after = Info(*stub);
  EXPECT_EQ(after.generation(), before.generation());
  EXPECT_EQ(after.map_version(), map.version());
  // An operator on this host (loopback, no TLS) may still take a checkpoint:
  // the scheduler's own control RPCs work.
  SchedulerClient operator_client(job.address());
  auto clock = operator_client.CheckpointNow(absl::Seconds(60));
  EXPECT_TRUE(clock.ok()) << clock.status() << job.Logs();

  auto code = job.WaitScheduler(absl::Minutes(5));
  ASSERT_TRUE(code.ok()) << code.status() << job.Logs();
  EXPECT_EQ(*code, 0) << job.SchedulerResult() << job.Logs();
  EXPECT_NE(job.SchedulerResult().find("state=done"), std::string::npos) << job.SchedulerResult();
  // The refusals are in the server's log, with the caller.
  EXPECT_NE(job.LogTail("server-1", 400).find("refused Control from"), std::string::npos)
      << job.LogTail("server-1", 400);
}

constexpr char kServerConfig[] = R"pb(
name: "trust-standalone"
tables { id: 1 name: "emb" dim: 4 seed: 3 init { kind: UNIFORM scale: 0.1 }
         optimizer { sgd { learning_rate: 0.01 } } }
data { train_files: "unused.tsv" }
cluster { num_servers: 1 num_workers: 1 num_partitions: 8 mode: ASP }
)pb";

// Starts a standalone ps_server with `flags`; its address or "".
std::string StartServer(Subprocess* server, const std::string& config,
                        const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {RunfilePath("server/ps_server"), "--config=" + config};
  argv.insert(argv.end(), flags.begin(), flags.end());
  EXPECT_TRUE(server->Start(argv).ok());
  return server->WaitForLine("PS_SERVER_LISTENING ", absl::Seconds(60)).value_or("");
}

// Issue 18 #5: with eviction by clock on, one push with clock 2^64-1 used to
// age every row past its TTL at the next sweep. Now it moves the eviction
// clock 64 clocks at most: after a sweep (every 10 s) every row is there. A
// "canary" row with a 1 s TTL, pushed after, shows that a sweep has run.
TEST(ServerTrustTest, APushWithAnAbsurdClockDoesNotWipeATable) {
  const std::string dir = Dir("trust_clock");
  const std::string config = dir + "/server.pbtxt";
  std::ofstream(config) << R"pb(
name: "trust-clock"
tables { id: 1 name: "emb" dim: 4 seed: 3 init { kind: UNIFORM scale: 0.1 }
         optimizer { sgd { learning_rate: 0.01 } } eviction { ttl_clocks: 100 } }
tables { id: 2 name: "canary" dim: 4 seed: 4 init { kind: UNIFORM scale: 0.1 }
         optimizer { sgd { learning_rate: 0.01 } } eviction { ttl_seconds: 1 } }
data { train_files: "unused.tsv" }
cluster { num_servers: 1 num_workers: 1 num_partitions: 8 mode: ASP }
)pb";
  Subprocess server;
  const std::string address = StartServer(&server, config, {});
  ASSERT_FALSE(address.empty()) << server.output();
  auto stub = ServerStub(address);
  auto push = [&](uint64_t clock, uint64_t first, uint64_t n, uint32_t table = 1) {
    PushRequest request;
    request.set_map_version(1);
    request.set_clock(clock);
    TableGradients* g = request.add_tables();
    g->set_table_id(table);
    std::vector<float> grads(4 * n, 0.01f);
    for (uint64_t k = first; k < first + n; ++k) g->add_keys(k);
    g->set_gradients(
        std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)));
    grpc::ClientContext ctx;
    PushResponse response;
    return stub->Push(&ctx, request, &response);
  };
  for (uint64_t c = 0; c < 5; ++c) ASSERT_TRUE(push(c, 1, 50).ok());
  ASSERT_TRUE(push(UINT64_MAX, 1, 1).ok());
  ASSERT_TRUE(push(5, 1, 1, /*table=*/2).ok());
  TableInfoResponse info;
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  do {
    absl::SleepFor(absl::Milliseconds(200));
    info = Info(*stub);
  } while (info.tables_size() == 2 && info.tables(1).evicted_rows() == 0 && absl::Now() < deadline);
  ASSERT_EQ(info.tables_size(), 2);
  ASSERT_EQ(info.tables(1).evicted_rows(), 1u)
      << "no eviction sweep evicted the canary row within 40 s";
  EXPECT_EQ(info.tables(0).evicted_rows(), 0u);
  EXPECT_EQ(info.tables(0).live_rows(), 50u);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(absl::Seconds(30)).value_or(-1), 0);
}

// A flood of BSP pulls for a clock far ahead: at most 4 x workers + 16 wait
// (a thread each); the others are refused at once with RESOURCE_EXHAUSTED.
TEST(ServerTrustTest, WaitingBspPullsAreBounded) {
  const std::string dir = Dir("trust_pulls");
  const std::string config = dir + "/server.pbtxt";
  std::ofstream(config) << R"pb(
name: "trust-pulls"
tables { id: 1 name: "emb" dim: 4 seed: 3 init { kind: UNIFORM scale: 0.1 }
         optimizer { sgd { learning_rate: 0.01 } } }
data { train_files: "unused.tsv" }
cluster { num_servers: 1 num_workers: 2 num_partitions: 8 mode: BSP }
)pb";
  Subprocess server;
  const std::string address = StartServer(&server, config, {});
  ASSERT_FALSE(address.empty()) << server.output();
  auto stub = ServerStub(address);
  constexpr int kPulls = 40;  // The bound is 4 x 2 + 16 = 24.
  std::vector<std::future<grpc::StatusCode>> pulls;
  for (int i = 0; i < kPulls; ++i) {
    pulls.push_back(std::async(std::launch::async, [&stub] {
      PullRequest request;
      request.set_map_version(1);
      request.set_clock(1000);
      request.add_tables()->set_table_id(1);
      grpc::ClientContext ctx;
      // Long enough that every pull has arrived before the first times out.
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      PullResponse response;
      return stub->Pull(&ctx, request, &response).error_code();
    }));
  }
  int exhausted = 0, timed_out = 0;
  for (auto& f : pulls) {
    const grpc::StatusCode code = f.get();
    exhausted += code == grpc::StatusCode::RESOURCE_EXHAUSTED;
    timed_out += code == grpc::StatusCode::DEADLINE_EXCEEDED;
  }
  EXPECT_EQ(exhausted, kPulls - 24);
  EXPECT_EQ(timed_out, 24);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(absl::Seconds(30)).value_or(-1), 0);
}

TEST(ServerTrustTest, CheckpointsGoOnlyUnderTheConfiguredDirectory) {
  const std::string dir = Dir("trust_paths");
  const std::string elsewhere = dir + "/elsewhere";
  std::filesystem::remove_all(dir + "/ckpt");
  std::filesystem::remove_all(elsewhere);
  const std::string config = dir + "/server.pbtxt";
  std::ofstream(config) << kServerConfig << "checkpoint { dir: \"" << dir << "/ckpt\" }\n";
  // The token from a file (a flag's value shows in `ps`): refused while
  // others may read it, taken once it is 0600.
  const std::string token_file = dir + "/control.token";
  std::ofstream(token_file) << "77\n";
  std::filesystem::permissions(token_file, std::filesystem::perms(0644));
  {
    Subprocess open_to_others;
    ASSERT_TRUE(open_to_others
                    .Start({RunfilePath("server/ps_server"), "--config=" + config,
                            "--control_token_file=" + token_file},
                           dir + "/open-token-server.log")
                    .ok());
    EXPECT_EQ(open_to_others.Wait(absl::Seconds(30)).value_or(-1), 2);
    EXPECT_NE(testing::ReadFile(dir + "/open-token-server.log").find("is open to others"),
              std::string::npos)
        << testing::ReadFile(dir + "/open-token-server.log");
  }
  std::filesystem::permissions(token_file, std::filesystem::perms(0600));
  Subprocess server;
  const std::string address = StartServer(&server, config, {"--control_token_file=" + token_file});
  ASSERT_FALSE(address.empty()) << server.output();
  auto stub = ServerStub(address);
  // A request as an old client would send it: field 1 was the directory.
  CheckpointRequest named;
  named.set_clock(3);
  named.set_control_token(77);
  std::string bytes = named.SerializeAsString();
  const std::string path = elsewhere;
  bytes += '\x0a';                          // Field 1, length-delimited.
  for (size_t n = path.size();; n >>= 7) {  // The length as a varint.
    bytes += static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
    if (n < 0x80) break;
  }
  bytes += path;
  CheckpointRequest request;
  ASSERT_TRUE(request.ParseFromString(bytes));
  grpc::ClientContext ctx;
  CheckpointResponse response;
  const grpc::Status st = stub->Checkpoint(&ctx, request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.checkpoint_dir(), dir + "/ckpt/ckpt-000000000003");
  EXPECT_TRUE(std::filesystem::is_directory(response.checkpoint_dir()));
  EXPECT_FALSE(std::filesystem::exists(elsewhere)) << "a path from the wire was used";
  // Without the token: refused.
  CheckpointRequest anonymous;
  anonymous.set_clock(4);
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub->Checkpoint(&ctx2, anonymous, &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt/ckpt-000000000004"));
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(absl::Seconds(30)).value_or(-1), 0);
}

TEST(ServerTrustTest, ASecondProcessOnATakenPortFailsAtStart) {
  const std::string dir = Dir("trust_ports");
  const std::string config = dir + "/server.pbtxt";
  std::ofstream(config) << kServerConfig;
  Subprocess first;
  const std::string address = StartServer(&first, config, {});
  ASSERT_FALSE(address.empty()) << first.output();

  Subprocess second;
  ASSERT_TRUE(
      second
          .Start({RunfilePath("server/ps_server"), "--config=" + config, "--listen=" + address},
                 dir + "/second-server.log")
          .ok());
  EXPECT_EQ(second.Wait(absl::Seconds(30)).value_or(-1), 1);
  EXPECT_NE(testing::ReadFile(dir + "/second-server.log").find("cannot listen on " + address),
            std::string::npos)
      << testing::ReadFile(dir + "/second-server.log");

  // The same for a scheduler: the second one on the first's port exits 2.
  Subprocess scheduler;
  ASSERT_TRUE(scheduler
                  .Start({RunfilePath("scheduler/ps_scheduler"), "--config=" + config,
                          "--listen=127.0.0.1:0"})
                  .ok());
  auto sched_address = scheduler.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
  ASSERT_TRUE(sched_address.ok()) << sched_address.status();
  Subprocess other;
  ASSERT_TRUE(other
                  .Start({RunfilePath("scheduler/ps_scheduler"), "--config=" + config,
                          "--listen=" + *sched_address},
                         dir + "/second-scheduler.log")
                  .ok());
  EXPECT_EQ(other.Wait(absl::Seconds(30)).value_or(-1), 2);
  EXPECT_NE(testing::ReadFile(dir + "/second-scheduler.log").find("cannot listen"),
            std::string::npos);
  scheduler.Signal(SIGKILL);
  (void)scheduler.Wait(absl::Seconds(30));
  first.Signal(SIGTERM);
  EXPECT_EQ(first.Wait(absl::Seconds(30)).value_or(-1), 0);
}

// A non-loopback listener with neither TLS nor a job secret warns loudly;
// with a secret it says only that the secret crosses in the clear.
TEST(ServerTrustTest, PlaintextOnANonLoopbackAddressWarnsLoudly) {
  const std::string dir = Dir("trust_warn");
  const std::string config = dir + "/server.pbtxt";
  std::ofstream(config) << kServerConfig;
  const std::string secret = dir + "/job.secret";
  ASSERT_TRUE(WriteJobSecretFile(secret).ok());
  for (const bool with_secret : {false, true}) {
    SCOPED_TRACE(with_secret ? "with a job secret" : "without");
    const std::string log = absl::StrCat(dir, "/server-", with_secret, ".log");
    std::vector<std::string> argv = {RunfilePath("server/ps_server"), "--config=" + config,
                                     "--listen=0.0.0.0:0"};
    if (with_secret) argv.push_back("--job_secret_file=" + secret);
    Subprocess server;
    ASSERT_TRUE(server.Start(argv, log).ok());
    ASSERT_TRUE(server.WaitForLine("PS_SERVER_LISTENING ", absl::Seconds(60)).ok());
    server.Signal(SIGTERM);
    EXPECT_EQ(server.Wait(absl::Seconds(30)).value_or(-1), 0);
    const std::string text = testing::ReadFile(log);
    EXPECT_EQ(absl::StrContains(text, "with neither TLS nor a job secret on a non-loopback"),
              !with_secret)
        << text;
    EXPECT_EQ(absl::StrContains(text, "calls must carry the job secret"), with_secret) << text;
  }
}

// Issue 33 #2, #5, #6 against a server of a job (a scheduler, one server, no
// worker: the job's clock stays 0). Pushes claiming clock 2^64-1 do not age
// rows out (the eviction clock follows the scheduler's JobStatus.max_clock);
// a push, a training pull and a compressed push of more keys than the batch
// allows, chunk indexes past the model's size and a gradient of 3e38 are
// refused and change nothing (no row created, the row the refused gradient
// was for reads as before). A canary row with a 1 s TTL shows a sweep ran.
TEST(ServerTrustTest, AMemberMayCostOnlyWhatAMemberShould) {
  const std::string dir = Dir("trust_limits");
  ASSERT_TRUE(testing::MakeSyntheticData(dir + "/data", 2000, 200).ok());
  const std::string config = R"pb(
name: "trust-limits"
tables { id: 1 name: "categorical" kind: SPARSE dim: 8 seed: 17
         init { kind: UNIFORM scale: 0.05 } optimizer { adagrad { learning_rate: 0.05 } }
         eviction { ttl_clocks: 100 } }
tables { id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
         optimizer { adam { learning_rate: 0.002 } } }
tables { id: 3 name: "canary" dim: 4 seed: 4 init { kind: UNIFORM scale: 0.1 }
         optimizer { sgd { learning_rate: 0.01 } } eviction { ttl_seconds: 1 } }
model { kind: DLRM bottom_mlp: [16, 8] top_mlp: [16] dense_table: "mlp" }
training { batch_size: 16 epochs: 1 intra_op_threads: 1 }
cluster { num_servers: 1 num_workers: 1 num_partitions: 8 mode: ASP }
)pb"
                             "data { format: CRITEO synthetic_dir: \"" +
                             dir + "/data\" }\n";
  SupervisedJob job(testing::ManualJob("trust_limits", config, 1, 0));
  ASSERT_TRUE(job.Start().ok()) << job.Logs();
  ASSERT_TRUE(job.WaitListening(absl::Seconds(60)).ok()) << job.Logs();
  auto scheduler =
      Scheduler::NewStub(grpc::CreateChannel(job.address(), grpc::InsecureChannelCredentials()));
  PartitionMapProto map;
  for (int attempt = 0; attempt < 100 && map.server_addresses_size() < 1; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    GetPartitionMapRequest request;
    request.set_min_version(1);
    request.set_timeout_ms(2000);
    (void)scheduler->GetPartitionMap(&ctx, request, &map);
  }
  ASSERT_EQ(map.server_addresses_size(), 1) << job.Logs();
  auto stub = ServerStub(map.server_addresses(0));
  // The job's start restores the server (generation 0 -> 1) once it has
  // registered: wait for that, or it would empty the tables mid-test.
  uint64_t generation = 0;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60);
       generation == 0 && absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(50))) {
    generation = Info(*stub).generation();
  }
  ASSERT_GT(generation, 0u) << "the server was not restored into the job's generation"
                            << job.Logs();
  auto push = [&](uint64_t clock, uint32_t table, const std::vector<uint64_t>& keys, uint32_t dim,
                  float grad, bool sparse = false) {
    PushRequest request;
    request.set_map_version(map.version());
    request.set_generation(generation);
    request.set_clock(clock);
    TableGradients* g = request.add_tables();
    g->set_table_id(table);
    for (uint64_t k : keys) g->add_keys(k);
    if (sparse) {
      g->mutable_sparse()->add_index_gaps(0);
      g->mutable_sparse()->set_values(std::string(4, '\0'));
    } else {
      const std::vector<float> grads(dim * keys.size(), grad);
      g->set_gradients(grads.data(), grads.size() * sizeof(float));
    }
    grpc::ClientContext ctx;
    PushResponse response;
    return stub->Push(&ctx, request, &response);
  };
  auto pull = [&](PullPurpose purpose, uint32_t table, const std::vector<uint64_t>& keys,
                  std::string* values) {
    PullRequest request;
    request.set_map_version(map.version());
    request.set_generation(generation);
    request.set_purpose(purpose);
    TableKeys* tk = request.add_tables();
    tk->set_table_id(table);
    for (uint64_t k : keys) tk->add_keys(k);
    grpc::ClientContext ctx;
    PullResponse response;
    const grpc::Status st = stub->Pull(&ctx, request, &response);
    if (values != nullptr && response.tables_size() == 1) *values = response.tables(0).values();
    return st;
  };
  std::vector<uint64_t> rows;
  for (uint64_t k = 1; k <= 50; ++k) rows.push_back(k);
  ASSERT_TRUE(push(0, 1, rows, 8, 0.01f).ok());
  // #2: three pushes claiming clock 2^64-1 (ceil(100 / 64) + 1 used to suffice).
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(push(UINT64_MAX, 1, {1000}, 8, 0.01f).ok());

  auto expect_refused = [](const grpc::Status& st, const std::string& what) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find(what), std::string::npos) << st.error_message();
  };
  // #5: 16 x 26 = 416 keys a request.
  std::vector<uint64_t> many;
  for (uint64_t k = 1u << 20; many.size() < 417; ++k) many.push_back(k);
  expect_refused(push(1, 1, many, 8, 0.01f), "max_keys_per_request 416");
  many.clear();
  for (uint64_t k = 1u << 20; many.size() < (1u << 20); ++k) many.push_back(k);
  expect_refused(pull(TRAIN, 1, many, nullptr), "max_keys_per_request 416");
  expect_refused(push(1, 1, many, 8, 0, /*sparse=*/true), "max_keys_per_request 416");
  // #6: chunk indexes past the model's 6137 parameters (2 chunks of 4096).
  expect_refused(push(1, 2, {UINT64_MAX}, 4096, 0.01f), "out of range");
  expect_refused(pull(EVAL, 2, {1000000}, nullptr), "out of range");
  std::string before, after;
  ASSERT_TRUE(pull(EVAL, 1, {1, 2}, &before).ok());
  expect_refused(push(1, 1, {1, 2}, 8, 3e38f), "max_gradient_abs");
  ASSERT_TRUE(pull(EVAL, 1, {1, 2}, &after).ok());
  EXPECT_EQ(after, before) << "a refused gradient moved the rows";

  ASSERT_TRUE(push(1, 3, {1}, 4, 0.01f).ok());  // The canary.
  TableInfoResponse info;
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  do {
    absl::SleepFor(absl::Milliseconds(200));
    info = Info(*stub);
  } while (info.tables_size() == 3 && info.tables(2).evicted_rows() == 0 && absl::Now() < deadline);
  ASSERT_EQ(info.tables_size(), 3);
  ASSERT_EQ(info.tables(2).evicted_rows(), 1u)
      << "no eviction sweep evicted the canary row within 40 s";
  EXPECT_EQ(info.tables(0).evicted_rows(), 0u);
  EXPECT_EQ(info.tables(0).live_rows(), 51u) << "rows created or lost by refused requests";
  EXPECT_EQ(info.tables(1).live_rows(), 0u);
  job.KillAll();
}

}  // namespace
}  // namespace shardps
