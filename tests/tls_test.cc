// Mutual TLS with the real binaries on 127.0.0.1 (common/tls.h): a whole job
// runs with --tls_cert/--tls_key/--tls_ca on every process, and a ps_server
// refuses clients with a certificate from another CA or with none, and keeps
// serving. The certificates are made at test time with the openssl tool:
//
//   CA A ──┬── node    (every process of the job; SAN IP:127.0.0.1, localhost)
//          └── client  (a test client)
//   CA B ──── client   (a stranger)
#include "common/tls.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/slow_link.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;
using testing::Subprocess;
using testing::SupervisedJob;

// The job's tables and model (tests/testing/job_util.h).
std::string Tables() { return testing::WideSmallDlrmTables(); }

constexpr char kJobConfig[] = R"pb(
name: "tls"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 256 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 3000 server_deadline_ms: 20000
}
)pb";

// One server, no scheduler: the contiguous map, a small message limit.
constexpr char kServerConfig[] = R"pb(
name: "tls-server"
tables {
  id: 1 name: "emb" kind: SPARSE dim: 4
  init { kind: ZEROS } optimizer { sgd { learning_rate: 0.5 } }
}
cluster { num_servers: 1 num_workers: 1 num_partitions: 64 mode: ASP
          max_message_bytes: 1048576 }
data { synthetic_dir: "unused" }
)pb";

bool Sh(const std::string& command) { return std::system(command.c_str()) == 0; }

// A P-256 key and a certificate for `name` in `dir`: self-signed (a CA) when
// `ca` is empty, else signed by <dir>/<ca>.{crt,key}.
bool MakeCert(const std::string& dir, const std::string& name, const std::string& ca, int serial) {
  const std::string base = dir + "/" + name;
  const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string quiet = " 2>>" + dir + "/openssl.log";
  if (ca.empty()) {
    return Sh(absl::StrCat("openssl req -x509", key, " -days 2 -subj /CN=", name, " -keyout ", base,
                           ".key -out ", base, ".crt", quiet));
  }
  std::ofstream(dir + "/ext.cnf") << "basicConstraints=CA:FALSE\n"
                                     "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                     "extendedKeyUsage=serverAuth,clientAuth\n"
                                     "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  return Sh(absl::StrCat("openssl req -new", key, " -subj /CN=", name, " -keyout ", base,
                         ".key -out ", base, ".csr", quiet)) &&
         Sh(absl::StrCat("openssl x509 -req -in ", base, ".csr -CA ", dir, "/", ca, ".crt -CAkey ",
                         dir, "/", ca, ".key -set_serial ", serial, " -days 2 -extfile ", dir,
                         "/ext.cnf -out ", base, ".crt", quiet));
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::TestDir("certs");
    ASSERT_TRUE(MakeCert(dir_, "ca_a", "", 0))
        << "openssl is required; see " << dir_ << "/openssl.log";
    ASSERT_TRUE(MakeCert(dir_, "ca_b", "", 0));
    ASSERT_TRUE(MakeCert(dir_, "node_a", "ca_a", 1));
    ASSERT_TRUE(MakeCert(dir_, "client_a", "ca_a", 2));
    ASSERT_TRUE(MakeCert(dir_, "client_b", "ca_b", 3));
    ASSERT_TRUE(MakeCert(dir_, "operator_a", "ca_a", 4));
  }

  static TlsFiles Files(const std::string& name, const std::string& ca) {
    return {P(name + ".crt"), P(name + ".key"), P(ca + ".crt")};
  }
  static std::vector<std::string> Flags(const TlsFiles& f) {
    return {"--tls_cert=" + f.cert, "--tls_key=" + f.key, "--tls_ca=" + f.ca};
  }
  static std::string P(const std::string& file) { return dir_ + "/" + file; }

  // Starts a ps_server alone with `flags`; returns its address.
  absl::StatusOr<std::string> StartServer(Subprocess* server, const std::vector<std::string>& flags,
                                          const std::string& log) {
    const std::string config = P("server.pbtxt");
    std::ofstream(config) << kServerConfig;
    std::vector<std::string> argv = {testing::RunfilePath("server/ps_server"), "--config=" + config,
                                     "--listen=127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    if (absl::Status s = server->Start(argv, P(log)); !s.ok()) return s;
    return server->WaitForLine("PS_SERVER_LISTENING ", absl::Seconds(60));
  }

  // A TableInfo call with `creds`; its status.
  static grpc::Status CallTableInfo(const std::string& address,
                                    std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = ParameterServer::NewStub(grpc::CreateChannel(address, creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    TableInfoRequest request;
    TableInfoResponse response;
    return stub->TableInfo(&ctx, request, &response);
  }

  static std::shared_ptr<grpc::ChannelCredentials> Creds(const TlsFiles& files) {
    auto creds = TlsChannelCredentials(files);
    EXPECT_TRUE(creds.ok()) << creds.status();
    return creds.ok() ? *creds : nullptr;
  }

  static bool Alive(Subprocess& p) {
    return absl::IsDeadlineExceeded(p.Wait(absl::Milliseconds(1)).status());
  }

  static std::string dir_;
};

std::string TlsTest::dir_;

TEST_F(TlsTest, WholeJobRunsWithMutualTls) {
  const std::string data = ::testing::TempDir() + "/tls_data";
  ASSERT_TRUE(testing::MakeSyntheticData(data, 20000, 5000).ok());
  SupervisedJob::Options o = testing::ManualJob(
      "tls_job", Tables() + absl::StrReplaceAll(kJobConfig, {{"@DATA@", data}}), 2, 2);
  o.scheduler_flags = o.server_flags = o.worker_flags = Flags(Files("node_a", "ca_a"));
  SupervisedJob job(std::move(o));
  ASSERT_TRUE(job.Start().ok()) << job.Logs();
  ASSERT_TRUE(job.WaitListening(absl::Seconds(60)).ok()) << job.Logs();

  // While the job runs, the scheduler too refuses a plaintext client.
  auto stub =
      Scheduler::NewStub(grpc::CreateChannel(job.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  JobStatusRequest request;
  JobStatusResponse response;
  EXPECT_EQ(stub->JobStatus(&ctx, request, &response).error_code(), grpc::StatusCode::UNAVAILABLE);

  auto code = job.WaitScheduler(absl::Minutes(15));
  ASSERT_TRUE(code.ok() && *code == 0) << job.Logs();
  (void)job.WaitWorkers(absl::Seconds(60));
  std::printf("%s\n", job.SchedulerResult().c_str());
  auto result = testing::ParseResult(job.SchedulerResult());
  EXPECT_EQ(result["state"], "done") << job.Logs();
  ASSERT_FALSE(result["samples"].empty()) << job.SchedulerResult();
  // It trained: about one epoch of samples, and better than chance.
  EXPECT_GE(std::stoull(result["samples"]), 19000u) << job.SchedulerResult();
  EXPECT_GT(std::stod(result["eval_auc"]), 0.6) << job.SchedulerResult();
}

// With --operator_names, only a certificate with one of those common names
// may ask the scheduler for a checkpoint; a member's (a worker's) is refused.
TEST_F(TlsTest, CheckpointNowNeedsAnOperatorsCertificate) {
  const std::string config = P("operator.pbtxt");
  std::ofstream(config) << kServerConfig << "checkpoint { dir: \"" << P("operator_ckpt")
                        << "\" }\n";
  Subprocess scheduler;
  std::vector<std::string> argv = {testing::RunfilePath("scheduler/ps_scheduler"),
                                   "--config=" + config, "--listen=127.0.0.1:0",
                                   "--operator_names=operator_a,someone"};
  for (const std::string& f : Flags(Files("node_a", "ca_a"))) argv.push_back(f);
  ASSERT_TRUE(scheduler.Start(argv, P("operator-scheduler.log")).ok());
  auto address = scheduler.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
  ASSERT_TRUE(address.ok()) << address.status();
  auto call = [&](const std::string& cert) {
    auto stub = Scheduler::NewStub(grpc::CreateChannel(*address, Creds(Files(cert, "ca_a"))));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    CheckpointNowRequest request;
    request.set_timeout_ms(300);  // No job has formed: it cannot cut one.
    CheckpointNowResponse response;
    return stub->CheckpointNow(&ctx, request, &response);
  };
  const grpc::Status member = call("client_a");
  EXPECT_EQ(member.error_code(), grpc::StatusCode::PERMISSION_DENIED) << member.error_message();
  EXPECT_THAT(member.error_message(), HasSubstr("CN client_a"));
  // The operator is let through to the coordinator, which cannot cut a
  // checkpoint of a job that has not formed: DEADLINE_EXCEEDED after the
  // request's 300 ms (a refusal, an unreachable or crashed scheduler would
  // answer otherwise).
  const grpc::Status op = call("operator_a");
  EXPECT_EQ(op.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << op.error_message();
  EXPECT_THAT(op.error_message(), HasSubstr("no checkpoint completed before the deadline"));
  EXPECT_FALSE(scheduler.Poll().has_value()) << "the scheduler exited";
  scheduler.Signal(SIGKILL);
  (void)scheduler.Wait(absl::Seconds(30));
}

TEST_F(TlsTest, ClientFromAnotherCaIsRefusedAndServerKeepsServing) {
  Subprocess server;
  auto address = StartServer(&server, Flags(Files("node_a", "ca_a")), "server_b.log");
  ASSERT_TRUE(address.ok()) << address.status();

  // The stranger trusts CA A, so only the server can refuse it.
  const grpc::Status refused = CallTableInfo(*address, Creds(Files("client_b", "ca_a")));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  // A client that trusts only CA B refuses the server's certificate itself.
  const grpc::Status distrust = CallTableInfo(*address, Creds(Files("client_a", "ca_b")));
  EXPECT_EQ(distrust.error_code(), grpc::StatusCode::UNAVAILABLE) << distrust.error_message();

  EXPECT_TRUE(Alive(server));
  const grpc::Status ok = CallTableInfo(*address, Creds(Files("client_a", "ca_a")));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

TEST_F(TlsTest, PlaintextClientIsRefusedAndServerKeepsServing) {
  Subprocess server;
  auto address = StartServer(&server, Flags(Files("node_a", "ca_a")), "server_plain.log");
  ASSERT_TRUE(address.ok()) << address.status();
  const grpc::Status refused = CallTableInfo(*address, grpc::InsecureChannelCredentials());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_TRUE(Alive(server));
  EXPECT_TRUE(CallTableInfo(*address, Creds(Files("client_a", "ca_a"))).ok());
}

// A link on which a connection's setup (TCP, the TLS handshake, HTTP/2's
// settings) takes longer than the 1 s reconnect backoff cap: a channel built
// as every client of the job builds it (ConfigureChannel) still connects.
// With gRPC's minimum connect time at 100 ms, as it was, every attempt was
// cut short and the client retried for ever; that is what left a worker
// unable to register with a busy scheduler.
TEST_F(TlsTest, ChannelsConnectOverALinkSlowerThanTheReconnectBackoff) {
  Subprocess server;
  auto address = StartServer(&server, Flags(Files("node_a", "ca_a")), "server_slow.log");
  ASSERT_TRUE(address.ok()) << address.status();
  const int port = std::atoi(address->substr(address->rfind(':') + 1).c_str());
  testing::SlowLink link(port, absl::Milliseconds(400));
  ASSERT_FALSE(link.address().empty());

  auto connect_within = [&](const grpc::ChannelArguments& args, absl::Duration limit) {
    auto channel =
        grpc::CreateCustomChannel(link.address(), Creds(Files("client_a", "ca_a")), args);
    return channel->WaitForConnected(absl::ToChronoTime(absl::Now() + limit));
  };
  grpc::ChannelArguments args;
  ConfigureChannel(&args);
  // The local pool: this channel does not share a subchannel with another.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  EXPECT_TRUE(connect_within(args, absl::Seconds(20)));

  // The old arguments, for contrast: the same link is never reached.
  grpc::ChannelArguments old;
  old.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  old.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  old.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  old.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  EXPECT_FALSE(connect_within(old, absl::Seconds(8)));

  // A call through the link, on the job's channel.
  auto stub = ParameterServer::NewStub(
      grpc::CreateCustomChannel(link.address(), Creds(Files("client_a", "ca_a")), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  TableInfoRequest request;
  TableInfoResponse response;
  const grpc::Status st = stub->TableInfo(&ctx, request, &response);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(Alive(server));
}

TEST_F(TlsTest, TlsClientAgainstPlaintextServerFails) {
  Subprocess server;
  auto address = StartServer(&server, {}, "server_insecure.log");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(CallTableInfo(*address, Creds(Files("client_a", "ca_a"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(CallTableInfo(*address, grpc::InsecureChannelCredentials()).ok());
}

TEST_F(TlsTest, BadTlsFlagsAreAStartupError) {
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  } cases[] = {
      {{"--tls_cert=" + P("node_a.crt")}, "needs all of --tls_cert, --tls_key and --tls_ca"},
      {Flags({P("node_a.crt"), P("missing.key"), P("ca_a.crt")}),
       "--tls_key=" + P("missing.key") + ": cannot read"},
      {Flags({P("node_a.crt"), P("node_a.key"), P("ext.cnf")}),
       "--tls_ca=" + P("ext.cnf") + ": not a PEM certificate"},
      {Flags({P("node_a.crt"), P("client_a.key"), P("ca_a.crt")}),
       "does not belong to the certificate"},
  };
  int i = 0;
  for (const Case& c : cases) {
    Subprocess server;
    const std::string log = absl::StrCat("bad_flags_", i++, ".log");
    auto address = StartServer(&server, c.flags, log);
    EXPECT_FALSE(address.ok()) << "started with bad TLS flags";
    auto code = server.Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, 2);
    EXPECT_THAT(testing::ReadFile(P(log)), HasSubstr(c.message));
  }
}

TEST_F(TlsTest, OversizeMessageIsResourceExhaustedNotACrash) {
  Subprocess server;
  auto address = StartServer(&server, Flags(Files("node_a", "ca_a")), "server_big.log");
  ASSERT_TRUE(address.ok()) << address.status();
  auto stub =
      ParameterServer::NewStub(grpc::CreateChannel(*address, Creds(Files("client_a", "ca_a"))));
  grpc::ClientContext ctx;
  InitRowsRequest request;  // 2 MiB of values, over the 1 MiB limit.
  request.set_table_id(1);
  request.set_values(std::string(2 << 20, '\0'));
  InitRowsResponse response;
  EXPECT_EQ(stub->InitRows(&ctx, request, &response).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Alive(server));
  EXPECT_TRUE(CallTableInfo(*address, Creds(Files("client_a", "ca_a"))).ok());
}

}  // namespace
}  // namespace shardps
