// Starts the real ps_server binary on a free port and talks to it over gRPC:
// a pull/push round trip, health checking, and every bad request, each
// checked for its status and for leaving the table unchanged.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "common/codec.h"
#include "common/partition.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/thread_state.h"

extern char** environ;

namespace shardps {
namespace {

constexpr char kConfig[] = R"pb(
  name: "ps-server-test"
  tables {
    id: 1
    name: "emb"
    kind: SPARSE
    dim: 4
    init { kind: ZEROS }
    optimizer { sgd { learning_rate: 0.5 } }
  }
  tables {
    id: 2
    name: "skip"
    kind: SPARSE
    dim: 4
    init { kind: ZEROS }
    optimizer { sgd { learning_rate: 0.5 } }
    non_finite: SKIP_AND_COUNT
  }
  cluster {
    num_servers: 1
    num_workers: 1
    num_partitions: 64
    mode: ASP
    max_message_bytes: 1048576
  }
  data { synthetic_dir: "unused" }
)pb";

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/" + path;
}

// The ps_server process, started on `listen`; SIGTERM on destruction.
class ServerProcess {
 public:
  explicit ServerProcess(const std::string& config_text = kConfig,
                         const std::string& listen = "127.0.0.1:0") {
    const std::string dir = std::getenv("TEST_TMPDIR");
    const std::string config = dir + "/job.pbtxt";
    std::ofstream(config) << config_text;
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string binary = Runfile("server/ps_server");
    const std::string config_flag = "--config=" + config;
    const std::string port_flag = "--port_file=" + dir + "/port";
    const std::string listen_flag = "--listen=" + listen;
    std::vector<char*> argv = {
        const_cast<char*>(binary.c_str()), const_cast<char*>(config_flag.c_str()),
        const_cast<char*>(listen_flag.c_str()), const_cast<char*>(port_flag.c_str()), nullptr};
    EXPECT_EQ(posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      const std::string s(line);
      if (s.rfind("PS_SERVER_LISTENING ", 0) == 0) {
        address_ = s.substr(20, s.find_last_not_of("\r\n") - 19);
        break;
      }
    }
    stdout_ = f;  // Kept open so the server never writes to a closed pipe.
  }
  ~ServerProcess() {
    if (pid_ > 0) {  // Unless a test stopped it.
      EXPECT_EQ(Stop(), 0);
    }
  }

  // SIGTERM, then the exit status (0 = clean).
  int Stop() {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
    std::fclose(stdout_);
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_status_;
  }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  FILE* stdout_ = nullptr;
  std::string address_;
  int exit_status_ = 0;
};

std::string Fp32(const std::vector<float>& v) {
  std::string out;
  if (!v.empty()) EncodeValues(v.data(), v.size(), Encoding::kFp32, &out);
  return out;
}

PushRequest MakePush(uint32_t table, const std::vector<uint64_t>& keys,
                     const std::vector<float>& grads) {
  PushRequest p;
  p.set_map_version(1);
  TableGradients* tg = p.add_tables();
  tg->set_table_id(table);
  for (uint64_t k : keys) tg->add_keys(k);
  tg->set_gradients(Fp32(grads));
  return p;
}

class PsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(server_.address().empty()) << "ps_server did not start";
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    channel_ =
        grpc::CreateCustomChannel(server_.address(), grpc::InsecureChannelCredentials(), args);
    stub_ = ParameterServer::NewStub(channel_);
  }

  // Eval pull of `keys` of `table`, decoded.
  std::vector<float> Read(uint32_t table, const std::vector<uint64_t>& keys) {
    PullRequest r;
    r.set_map_version(1);
    r.set_purpose(EVAL);
    TableKeys* tk = r.add_tables();
    tk->set_table_id(table);
    for (uint64_t k : keys) tk->add_keys(k);
    PullResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->Pull(&ctx, r, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<float> out(keys.size() * 4);
    if (s.ok()) {
      EXPECT_TRUE(
          DecodeValues(resp.tables(0).values(), Encoding::kFp32, out.size(), out.data()).ok());
    }
    return out;
  }

  grpc::Status Push(const PushRequest& request, PushResponse* response) {
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, request, response);
  }

  // Calls `method` with raw request bytes; the reply's bytes go to *reply.
  grpc::Status RawCall(const std::string& method, const std::string& request, std::string* reply) {
    grpc::Slice slice(request.data(), request.size());
    grpc::ByteBuffer request_buffer(&slice, 1), reply_buffer;
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    grpc::CompletionQueue cq;
    auto call = generic.PrepareUnaryCall(&ctx, method, request_buffer, &cq);
    call->StartCall();
    grpc::Status status;
    call->Finish(&reply_buffer, &status, reinterpret_cast<void*>(1));
    void* tag;
    bool ok;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    reply->clear();
    std::vector<grpc::Slice> slices;
    if (status.ok() && reply_buffer.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return status;
  }

  ServerProcess server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(PsServerTest, PullPushRoundTripAndHealth) {
  const std::vector<uint64_t> keys = {7, 1u << 20, 99999999999ull};
  PullRequest pull;
  pull.set_map_version(1);
  pull.set_purpose(TRAIN);
  TableKeys* tk = pull.add_tables();
  tk->set_table_id(1);
  for (uint64_t k : keys) tk->add_keys(k);
  PullResponse presp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Pull(&ctx, pull, &presp).ok());
  }
  ASSERT_EQ(presp.tables_size(), 1);
  EXPECT_EQ(presp.tables(0).dim(), 4u);
  EXPECT_EQ(presp.tables(0).values(), Fp32(std::vector<float>(12, 0.0f)));
  PushResponse resp;
  PushRequest push = MakePush(1, keys, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  ASSERT_TRUE(Push(push, &resp).ok());
  EXPECT_EQ(resp.rows_applied(), 3u);
  EXPECT_EQ(Read(1, keys),
            (std::vector<float>{-0.5, -1, -1.5, -2, -2.5, -3, -3.5, -4, -4.5, -5, -5.5, -6}));
  TableInfoResponse info;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->TableInfo(&ctx, TableInfoRequest(), &info).ok());
  }
  ASSERT_EQ(info.tables_size(), 2);
  EXPECT_EQ(info.tables(0).live_rows(), 3u);
  EXPECT_EQ(info.map_version(), 1u);

  // HealthCheckRequest{service: ""} is empty bytes; HealthCheckResponse
  // {status: SERVING (1)} is field 1 varint 1: 08 01.
  std::string reply;
  const grpc::Status hstatus = RawCall("/grpc.health.v1.Health/Check", "", &reply);
  EXPECT_TRUE(hstatus.ok()) << hstatus.error_message();
  EXPECT_EQ(reply, std::string("\x08\x01", 2));
}

TEST_F(PsServerTest, MultiTablePullsInEveryEncodingMatchTheRows) {
  const std::vector<uint64_t> keys = {5, 6, 7};
  PushResponse resp;
  ASSERT_TRUE(Push(MakePush(1, keys, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}), &resp).ok());
  ASSERT_TRUE(Push(MakePush(2, keys, {3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2}), &resp).ok());
  const std::vector<float> rows1 = Read(1, keys), rows2 = Read(2, keys);
  for (ValueEncoding encoding : {FP32, BF16, FP16}) {
    PullRequest pull;
    pull.set_map_version(1);
    pull.set_encoding(encoding);
    // Table 2 first, an empty table entry, then table 1: order is kept.
    TableKeys* a = pull.add_tables();
    a->set_table_id(2);
    for (uint64_t k : keys) a->add_keys(k);
    pull.add_tables()->set_table_id(1);
    TableKeys* b = pull.add_tables();
    b->set_table_id(1);
    for (uint64_t k : keys) b->add_keys(k);
    PullResponse presp;
    grpc::ClientContext ctx;
    const grpc::Status st = stub_->Pull(&ctx, pull, &presp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(presp.tables_size(), 3);
    EXPECT_EQ(presp.tables(0).table_id(), 2u);
    EXPECT_EQ(presp.tables(1).table_id(), 1u);
    EXPECT_EQ(presp.tables(1).values(), "");
    EXPECT_EQ(presp.tables(2).table_id(), 1u);
    const Encoding e = encoding == FP32   ? Encoding::kFp32
                       : encoding == BF16 ? Encoding::kBf16
                                          : Encoding::kFp16;
    std::string want1, want2;
    EncodeValues(rows1.data(), rows1.size(), e, &want1);
    EncodeValues(rows2.data(), rows2.size(), e, &want2);
    EXPECT_EQ(presp.tables(0).values(), want2) << encoding;
    EXPECT_EQ(presp.tables(2).values(), want1) << encoding;
    EXPECT_EQ(presp.tables(2).dim(), 4u);
  }
}

TEST_F(PsServerTest, AMalformedPullRequestIsInvalidArgument) {
  std::string reply;
  const grpc::Status status = RawCall("/shardps.ParameterServer/Pull", "\xff\xff\xff\xff", &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("malformed PullRequest"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(Read(1, {5}), std::vector<float>(4, 0.0f));  // The server still serves.
}

TEST_F(PsServerTest, EveryBadRequestGetsItsStatusAndChangesNothing) {
  const std::vector<uint64_t> keys = {11, 12};
  PushResponse resp;
  ASSERT_TRUE(Push(MakePush(1, keys, std::vector<float>(8, 2)), &resp).ok());
  const std::vector<float> before = Read(1, keys);
  ASSERT_EQ(before[0], -1.0f);

  struct Case {
    const char* name;
    PushRequest request;
    grpc::StatusCode code;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({"unknown table", MakePush(5, keys, std::vector<float>(8, 1)),
                   grpc::StatusCode::INVALID_ARGUMENT, "unknown table id 5"});
  cases.push_back({"count mismatch", MakePush(1, keys, std::vector<float>(12, 1)),
                   grpc::StatusCode::INVALID_ARGUMENT, "key count mismatch"});
  cases.push_back({"wrong dim", MakePush(1, keys, std::vector<float>(10, 1)),
                   grpc::StatusCode::INVALID_ARGUMENT, "wrong dim"});
  cases.push_back({"duplicate keys", MakePush(1, {11, 11}, std::vector<float>(8, 1)),
                   grpc::StatusCode::INVALID_ARGUMENT, "duplicate key 11"});
  std::vector<float> nan(8, 1);
  nan[2] = std::numeric_limits<float>::quiet_NaN();
  cases.push_back(
      {"non-finite", MakePush(1, keys, nan), grpc::StatusCode::INVALID_ARGUMENT, "non-finite"});
  PushRequest stale = MakePush(1, keys, std::vector<float>(8, 1));
  stale.set_map_version(3);
  cases.push_back({"stale map", stale, grpc::StatusCode::ABORTED, "map version 1"});
  // 300k keys * 4 floats is far over the 1 MiB max_message_bytes.
  std::vector<uint64_t> many(300000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = 1000000 + i;
  cases.push_back({"oversized", MakePush(1, many, std::vector<float>(many.size() * 4, 1)),
                   grpc::StatusCode::RESOURCE_EXHAUSTED, ""});
  for (const Case& c : cases) {
    const grpc::Status s = Push(c.request, &resp);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.message), std::string::npos)
        << c.name << ": " << s.error_message();
    EXPECT_EQ(Read(1, keys), before) << c.name;
  }
  TableInfoResponse info;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->TableInfo(&ctx, TableInfoRequest(), &info).ok());
  EXPECT_EQ(info.tables(0).live_rows(), 2u);  // Nothing was created.

  // SKIP_AND_COUNT: the finite row applies, the other is counted.
  std::vector<float> inf(8, 2);
  inf[5] = INFINITY;
  ASSERT_TRUE(Push(MakePush(2, keys, inf), &resp).ok());
  EXPECT_EQ(resp.rows_applied(), 1u);
  EXPECT_EQ(resp.rows_skipped_nonfinite(), 1u);
  EXPECT_EQ(Read(2, keys), (std::vector<float>{-1, -1, -1, -1, 0, 0, 0, 0}));
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub_->TableInfo(&ctx2, TableInfoRequest(), &info).ok());
  EXPECT_EQ(info.tables(1).rows_skipped_nonfinite(), 1u);

  // An unknown table in a pull; a Checkpoint from a caller without the
  // scheduler's control token (this server has none: refused).
  PullRequest pull;
  pull.set_map_version(1);
  pull.add_tables()->set_table_id(9);
  PullResponse presp;
  grpc::ClientContext ctx3;
  EXPECT_EQ(stub_->Pull(&ctx3, pull, &presp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  CheckpointResponse cresp;
  grpc::ClientContext ctx4;
  EXPECT_EQ(stub_->Checkpoint(&ctx4, CheckpointRequest(), &cresp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

// A serving replica's follow of a server that cuts nothing: the server says
// it is alive with an idle message (proto/ps.proto VersionPart.idle), so a
// follower can tell a silent server from a job between cuts.
TEST_F(PsServerTest, AFollowerOfAServerWithoutCutsHearsIdleMessages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub_->FollowVersions(&ctx, FollowVersionsRequest());
  for (int i = 0; i < 2; ++i) {
    VersionPart part;
    ASSERT_TRUE(reader->Read(&part)) << reader->Finish().error_message();
    EXPECT_TRUE(part.idle());
    EXPECT_EQ(part.clock(), 0u);
    EXPECT_EQ(part.tables_size(), 0);
  }
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(PsServerTest, ExitsCleanlyOnSigterm) { EXPECT_EQ(server_.Stop(), 0); }

TEST(PsServerStartTest, ATakenPortIsAnErrorExitNotACrash) {
  // Hold a port the way an unrelated process would (no SO_REUSEPORT).
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ServerProcess server(kConfig, "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  EXPECT_EQ(server.address(), "");  // It never listened.
  // Exit status 1 from main (cannot listen); a crash would be 128 + signal.
  EXPECT_EQ(server.Stop(), 1);
  close(fd);
}

// BSP through the real server: a pull for clock 1 waits (on a thread of its
// own, not gRPC's) until both ranks pushed clock 0, then sees the rank-ordered
// mean; a pull whose clock never closes ends at its deadline; a waiting pull
// is answered when the server is stopped, and the server exits cleanly.
TEST(PsServerBspTest, WaitingPullsAreAnsweredOnCloseDeadlineAndShutdown) {
  ServerProcess server(absl::StrReplaceAll(
      kConfig, {{"num_workers: 1", "num_workers: 2"}, {"mode: ASP", "mode: BSP"}}));
  ASSERT_FALSE(server.address().empty()) << "ps_server did not start";
  auto stub = ParameterServer::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  auto pull_async = [&stub](uint64_t clock, int deadline_ms) {
    return std::async(std::launch::async, [&stub, clock, deadline_ms] {
      PullRequest r;
      r.set_map_version(1);
      r.set_purpose(TRAIN);
      r.set_clock(clock);
      TableKeys* tk = r.add_tables();
      tk->set_table_id(1);
      tk->add_keys(7);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
      PullResponse resp;
      const grpc::Status st = stub->Pull(&ctx, r, &resp);
      return std::make_pair(st, resp);
    });
  };
  auto push = [&stub](uint32_t rank, float g) {
    PushRequest p = MakePush(1, {7}, {g, g, g, g});
    p.set_worker_rank(rank);
    p.set_clock(0);
    PushResponse resp;
    grpc::ClientContext ctx;
    return stub->Push(&ctx, p, &resp);
  };

  // The connection is up before the server's threads are noted: a BSP pull
  // that has to wait does so on a thread the server starts for it, the one
  // new thread that blocks.
  {
    grpc::ClientContext ctx;
    TableInfoResponse info;
    ASSERT_TRUE(stub->TableInfo(&ctx, TableInfoRequest(), &info).ok());
  }
  std::set<pid_t> threads = testing::ThreadIds(server.pid());
  auto waiting = pull_async(1, 20000);
  const absl::Status blocked =
      testing::WaitForNewBlockedThread(server.pid(), threads, absl::Seconds(20));
  ASSERT_TRUE(blocked.ok()) << "the BSP pull for clock 1 did not wait: " << blocked;
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "a BSP pull for clock 1 was answered before clock 0 closed";
  ASSERT_TRUE(push(0, 1.0f).ok());
  // Clock 0 is still open with one of two ranks pushed: another pull for
  // clock 1 ends at its deadline (were it closed, it would be answered).
  auto [open, unused_open] = pull_async(1, 300).get();
  EXPECT_EQ(open.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << "clock 0 closed with one of two ranks: " << open.error_message();
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "clock 0 closed with one of two ranks";
  ASSERT_TRUE(push(1, 3.0f).ok());
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto [st, resp] = waiting.get();
  ASSERT_TRUE(st.ok()) << st.error_message();
  // SGD lr 0.5 on the mean gradient 2: 0 - 0.5 * 2 = -1.
  EXPECT_EQ(resp.tables(0).values(), Fp32({-1, -1, -1, -1}));

  // Clock 1 never closes: the pull ends at its deadline.
  auto [late, unused] = pull_async(2, 500).get();
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << late.error_message();

  // A pull waiting when the server is stopped is answered, and the server
  // exits cleanly.
  threads = testing::ThreadIds(server.pid());
  auto at_stop = pull_async(2, 60000);
  const absl::Status waits =
      testing::WaitForNewBlockedThread(server.pid(), threads, absl::Seconds(20));
  EXPECT_TRUE(waits.ok()) << "the pull for clock 2 did not wait: " << waits;
  EXPECT_EQ(at_stop.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(server.Stop(), 0);
  ASSERT_EQ(at_stop.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a waiting pull was not answered at shutdown";
  EXPECT_FALSE(at_stop.get().first.ok());
}

}  // namespace
}  // namespace shardps
