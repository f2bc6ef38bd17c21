// A server registering with a scheduler takes a Control that arrives before
// the token (Register's answer) does: the call waits for the token instead
// of being refused; without a registration under way it is refused at once.
#include <future>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/config.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_server.h"

namespace shardps {
namespace {

constexpr char kConfig[] = R"pb(
  name: "control-token"
  tables {
    id: 1
    name: "emb"
    dim: 4
    seed: 3
    init { kind: UNIFORM scale: 0.1 }
    optimizer { sgd { learning_rate: 0.01 } }
  }
  data { train_files: "unused.tsv" }
  cluster { num_servers: 1 num_workers: 1 num_partitions: 8 mode: ASP }
)pb";

std::unique_ptr<PsServer> StartServer() {
  auto config = ParseJobConfig(kConfig, "control-token.pbtxt");
  EXPECT_TRUE(config.ok()) << config.status();
  PsServerOptions options;
  options.config = *config;
  auto server = PsServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

grpc::Status SendControl(const std::string& address, uint64_t token) {
  auto stub =
      ParameterServer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  ControlRequest request;
  request.set_control_token(token);
  request.set_map_version(2);
  for (int p = 0; p < 8; ++p) request.add_partition_owner(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  ControlResponse response;
  return stub->Control(&ctx, request, &response);
}

TEST(ControlTokenTest, AControlThatOvertakesTheTokenWaitsForIt) {
  std::unique_ptr<PsServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  server->await_control_token(absl::Seconds(60));  // Registering.
  auto control =
      std::async(std::launch::async, [&] { return SendControl(server->address(), 4242); });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (server->service()->control_calls_awaiting_token() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // Polls the server's state.
  }
  ASSERT_EQ(server->service()->control_calls_awaiting_token(), 1)
      << "the Control did not wait for the token within 30 s";
  server->set_control_token(4242);  // Register's answer is read.
  const grpc::Status st = control.get();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(server->core()->map_version(), 2u);
  server->Shutdown();
  server->Wait();
}

TEST(ControlTokenTest, WithoutARegistrationUnderWayAControlIsRefusedAtOnce) {
  std::unique_ptr<PsServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  const grpc::Status st = SendControl(server->address(), 4242);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_EQ(server->core()->map_version(), 1u);
  server->Shutdown();
  server->Wait();
}

}  // namespace
}  // namespace shardps
