// The resharding actions through the ParameterServer RPCs (proto/ps.proto:
// RestoreRequest.partitions, ControlRequest.drop_partitions): a bad
// partition list is INVALID_ARGUMENT, a partition the server owns
// FAILED_PRECONDITION, neither changes anything; a map switch with the
// drop of the partitions it gives away frees their rows.
#include <memory>
#include <string>
#include <vector>

#include "common/codec.h"
#include "common/config.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_server.h"

namespace shardps {
namespace {

constexpr uint64_t kToken = 4242;
constexpr uint32_t kParts = 8;

constexpr char kConfig[] = R"pb(
  name: "partition-move-rpc"
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

class PartitionMoveRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = ParseJobConfig(kConfig, "partition-move-rpc.pbtxt");
    ASSERT_TRUE(config.ok()) << config.status();
    PsServerOptions options;
    options.config = *config;
    auto server = PsServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    server_->set_control_token(kToken);
    stub_ = ParameterServer::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    // 64 rows, over every partition.
    PushRequest push;
    push.set_map_version(1);
    TableGradients* t = push.add_tables();
    t->set_table_id(1);
    std::vector<float> grads(4, 0.5f);
    for (uint64_t k = 0; k < 64; ++k) {
      keys_.push_back(k * 7919 + 1);
      t->add_keys(keys_.back());
      std::string bytes;
      EncodeValues(grads.data(), grads.size(), Encoding::kFp32, &bytes);
      t->mutable_gradients()->append(bytes);
    }
    PushResponse response;
    ASSERT_TRUE(server_->core()->Push(push, &response).ok());
  }
  void TearDown() override {
    if (server_ == nullptr) return;
    server_->Shutdown();
    server_->Wait();
  }

  uint64_t LiveRows() { return server_->core()->store()->FindTable(1)->Counters().live_rows; }

  grpc::Status Control(const ControlRequest& request, ControlResponse* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->Control(&ctx, request, response);
  }
  grpc::Status Restore(const RestoreRequest& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    RestoreResponse response;
    return stub_->Restore(&ctx, request, &response);
  }

  std::unique_ptr<PsServer> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  std::vector<uint64_t> keys_;
};

TEST_F(PartitionMoveRpcTest, BadPartitionListsAreRefusedAndChangeNothing) {
  struct Case {
    const char* name;
    std::vector<uint32_t> partitions;
    grpc::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"out of range", {kParts}, grpc::StatusCode::INVALID_ARGUMENT},
      {"named twice", {2, 2}, grpc::StatusCode::INVALID_ARGUMENT},
      {"owned", {1}, grpc::StatusCode::FAILED_PRECONDITION},
  };
  for (const Case& c : cases) {
    ControlRequest drop;
    drop.set_control_token(kToken);
    for (uint32_t p : c.partitions) drop.add_drop_partitions(p);
    ControlResponse response;
    EXPECT_EQ(Control(drop, &response).error_code(), c.code) << "drop, " << c.name;
    RestoreRequest restore;
    restore.set_control_token(kToken);
    restore.set_clock(0);
    for (uint32_t p : c.partitions) restore.add_partitions(p);
    EXPECT_EQ(Restore(restore).error_code(), c.code) << "restore, " << c.name;
  }
  RestoreRequest initial;
  initial.set_control_token(kToken);
  initial.set_initial(true);
  initial.add_partitions(3);
  EXPECT_EQ(Restore(initial).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(LiveRows(), 64u);
  EXPECT_EQ(server_->core()->map_version(), 1u);
}

TEST_F(PartitionMoveRpcTest, WithoutTheControlTokenADropIsRefused) {
  ControlRequest drop;
  drop.add_drop_partitions(3);
  ControlResponse response;
  EXPECT_EQ(Control(drop, &response).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(PartitionMoveRpcTest, AMapSwitchDropsThePartitionsItGivesAway) {
  // Partitions [0, 4) go to server 1; this server drops them in the same call.
  ControlRequest request;
  request.set_control_token(kToken);
  request.set_map_version(2);
  for (uint32_t p = 0; p < kParts; ++p) request.add_partition_owner(p < 4 ? 1 : 0);
  for (uint32_t p = 0; p < 4; ++p) request.add_drop_partitions(p);
  uint64_t moving = 0;
  for (uint64_t k : keys_) moving += PartitionOf(1, k, kParts) < 4;
  ASSERT_GT(moving, 0u);
  ControlResponse response;
  const grpc::Status st = Control(request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.rows_dropped(), moving);
  EXPECT_EQ(LiveRows(), 64u - moving);
  EXPECT_EQ(server_->core()->map_version(), 2u);
}

}  // namespace
}  // namespace shardps
