// What a peer may hold of a parameter server (issue 33 #3,
// docs/security.md "What a peer may hold"), against the real ps_server:
//
//  - A caller that starts many large pulls on one connection and never
//    reads their answers holds at most cluster.max_unsent_answer_bytes of
//    the server's memory (the pulls past it are refused with UNAVAILABLE),
//    and when it leaves the server's resident memory comes back near where
//    it was before.
//  - A caller that stays connected but never reads loses its answers after
//    cluster.answer_send_timeout_ms: they are cancelled, the memory comes
//    back, and another caller's pull is served again.
//  - A malformed request is refused with INVALID_ARGUMENT naming the
//    method, on the server's asynchronous data path and on synchronous
//    methods of the server and the scheduler.
//
// The server's memory is its VmRSS (/proc/<pid>/status). The moments are
// the attacker's progress (it prints once every answer is built: the
// initial metadata of each has come), never a fixed sleep; each wait polls
// with a deadline and names what it waited for.
#include <signal.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;

constexpr uint64_t kMiB = 1 << 20;
// Each attacking pull: 4096 keys of a dim-1024 table, 16 MiB of fp32.
constexpr int kKeys = 4096;
constexpr uint64_t kAnswer = 16 * kMiB;
constexpr uint64_t kUnsentLimit = 64 * kMiB;  // 4 answers.
constexpr int kPulls = 20;                    // 320 MiB if nothing bounds them.
constexpr int kDataThreads = 2;

// A config whose answers are 16 MiB; `cluster_extra` is appended to its
// cluster section.
std::string WriteConfig(const std::string& dir, const std::string& cluster_extra) {
  const std::string path = dir + "/server.pbtxt";
  std::ofstream(path) << R"pb(
        name: "peer-limits"
        tables {
          id: 1
          name: "wide"
          dim: 1024
          seed: 3
          init { kind: UNIFORM scale: 0.1 }
          optimizer { sgd { learning_rate: 0.01 } }
        }
        data { train_files: "unused.tsv" }
        cluster { num_servers: 1 num_workers: 1 num_partitions: 8 mode: ASP
                  max_message_bytes: 33554432
                  grpc_memory_bytes: 67108864
                  max_unsent_answer_bytes:)pb"
                      << kUnsentLimit << " " << cluster_extra << " }\n";
  return path;
}

// The resident memory of process `pid` in bytes (0 if unreadable).
uint64_t Rss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      uint64_t kb = 0;
      fields >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

// Polls the server's RSS until it is at most `bound`; its last value.
uint64_t WaitRssAtMost(pid_t pid, uint64_t bound, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  uint64_t rss = Rss(pid);
  while (rss > bound && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    rss = Rss(pid);
  }
  return rss;
}

std::string StartServer(Subprocess* server, const std::string& config) {
  EXPECT_TRUE(server
                  ->Start({RunfilePath("server/ps_server"), "--config=" + config,
                           absl::StrCat("--data_threads=", kDataThreads), "--table_helpers=0"})
                  .ok());
  return server->WaitForLine("PS_SERVER_LISTENING ", absl::Seconds(60)).value_or("");
}

// An honest caller's 16 MiB pull, read: its status.
grpc::Status HonestPull(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto stub = ParameterServer::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  PullRequest request;
  request.set_map_version(1);
  request.set_purpose(EVAL);
  TableKeys* tk = request.add_tables();
  tk->set_table_id(1);
  for (int k = 0; k < kKeys; ++k) tk->add_keys(k + 1);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  PullResponse response;
  grpc::Status st = stub->Pull(&ctx, request, &response);
  if (st.ok() && response.tables(0).values().size() != kAnswer) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "short answer");
  }
  return st;
}

absl::Status StartAttacker(Subprocess* attacker, const std::string& address) {
  if (absl::Status st =
          attacker->Start({RunfilePath("tests/unread_pulls_client"), "--server=" + address,
                           absl::StrCat("--pulls=", kPulls), absl::StrCat("--keys=", kKeys)});
      !st.ok()) {
    return st;
  }
  return attacker->WaitForLine("UNREAD_PULLS_ANSWERED ", absl::Seconds(120)).status();
}

// What the server may hold while the attacker's answers are unread: the
// unsent-answer limit, the answer each data thread may be building, and
// slack for gRPC's own buffers.
constexpr uint64_t kHoldBound = kUnsentLimit + kDataThreads * kAnswer + 32 * kMiB;
// Near the baseline: allocator slack once the answers are freed.
constexpr uint64_t kBackBound = 24 * kMiB;

TEST(PeerLimitsTest, UnreadAnswersAreBoundedAndFreedWhenTheirCallerLeaves) {
  const std::string dir = testing::TestDir("peer_limits_leave");
  const std::string config = WriteConfig(dir, "answer_send_timeout_ms: 600000");
  Subprocess server;
  const std::string address = StartServer(&server, config);
  ASSERT_FALSE(address.empty()) << server.output();
  ASSERT_TRUE(HonestPull(address).ok())
      << HonestPull(address).error_message();  // Warm: the allocator has seen one answer.
  const uint64_t baseline = Rss(server.pid());
  ASSERT_GT(baseline, 0u);

  Subprocess attacker;
  ASSERT_TRUE(StartAttacker(&attacker, address).ok()) << attacker.output();
  const uint64_t held = Rss(server.pid());
  EXPECT_LE(held, baseline + kHoldBound)
      << "baseline " << baseline / kMiB << " MiB, with " << kPulls << " unread 16 MiB answers "
      << held / kMiB << " MiB";
  // The budget is taken: an honest pull is refused for now (and retried).
  const grpc::Status refused = HonestPull(address);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_NE(refused.error_message().find("max_unsent_answer_bytes"), std::string::npos)
      << refused.error_message();

  attacker.Signal(SIGKILL);
  ASSERT_TRUE(attacker.Wait(absl::Seconds(30)).ok());
  const uint64_t after = WaitRssAtMost(server.pid(), baseline + kBackBound, absl::Seconds(30));
  EXPECT_LE(after, baseline + kBackBound)
      << "30 s after the caller left: baseline " << baseline / kMiB << " MiB, now " << after / kMiB
      << " MiB";
  EXPECT_TRUE(HonestPull(address).ok()) << "the budget was not given back";
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(absl::Seconds(30)).value_or(-1), 0);
}

TEST(PeerLimitsTest, AnswersLeftUnreadAreCancelledAfterTheTimeout) {
  const std::string dir = testing::TestDir("peer_limits_timeout");
  const std::string config = WriteConfig(dir, "answer_send_timeout_ms: 2000");
  Subprocess server;
  const std::string address = StartServer(&server, config);
  ASSERT_FALSE(address.empty()) << server.output();
  ASSERT_TRUE(HonestPull(address).ok());
  const uint64_t baseline = Rss(server.pid());

  Subprocess attacker;  // Stays connected, reading nothing.
  ASSERT_TRUE(StartAttacker(&attacker, address).ok()) << attacker.output();
  EXPECT_LE(Rss(server.pid()), baseline + kHoldBound);
  const uint64_t after = WaitRssAtMost(server.pid(), baseline + kBackBound, absl::Seconds(60));
  EXPECT_LE(after, baseline + kBackBound)
      << "the unread answers were not freed: baseline " << baseline / kMiB << " MiB, now "
      << after / kMiB << " MiB";
  EXPECT_TRUE(HonestPull(address).ok()) << "the cancelled answers still hold the budget";
  EXPECT_FALSE(attacker.Poll().has_value()) << "the attacker was to stay connected";
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(absl::Seconds(30)).value_or(-1), 0);
}

// A request of `method` whose bytes are no protobuf message, to the server
// at `address`: its status.
grpc::Status SendGarbage(const std::string& address, const std::string& method) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const std::string garbage = "\xff\xff\xff\xff";  // A tag with no valid field number.
  grpc::Slice slice(garbage);
  const grpc::ByteBuffer bytes(&slice, 1);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, method, bytes, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status st;
  call->Finish(&response, &st, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  if (!cq.Next(&tag, &ok)) return grpc::Status(grpc::StatusCode::INTERNAL, "no answer");
  return st;
}

// gRPC answers a request it cannot parse with INTERNAL and no message; the
// server and the scheduler say INVALID_ARGUMENT and name the method, on the
// server's raw data path (Pull, Push) and on synchronous methods (TableInfo,
// the scheduler's Register).
TEST(PeerLimitsTest, MalformedRequestsAreInvalidArgumentNamingTheMethod) {
  const std::string dir = testing::TestDir("peer_limits_malformed");
  const std::string config = WriteConfig(dir, "");
  Subprocess server;
  const std::string address = StartServer(&server, config);
  ASSERT_FALSE(address.empty()) << server.output();
  Subprocess scheduler;
  ASSERT_TRUE(scheduler.Start({RunfilePath("scheduler/ps_scheduler"), "--config=" + config}).ok());
  auto scheduler_address = scheduler.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
  ASSERT_TRUE(scheduler_address.ok()) << scheduler_address.status();
  const std::vector<std::pair<std::string, std::string>> calls = {
      {address, "/shardps.ParameterServer/Pull"},
      {address, "/shardps.ParameterServer/Push"},
      {address, "/shardps.ParameterServer/TableInfo"},
      {*scheduler_address, "/shardps.Scheduler/Register"}};
  for (const auto& [to, method] : calls) {
    const grpc::Status st = SendGarbage(to, method);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << st.error_message();
    const std::string name = method.substr(method.rfind('/') + 1);
    EXPECT_NE(st.error_message().find(name), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("not a well-formed"), std::string::npos)
        << st.error_message();
  }
  scheduler.Signal(SIGKILL);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(absl::Seconds(30)).value_or(-1), 0);
}

}  // namespace
}  // namespace shardps
