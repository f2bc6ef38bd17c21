// HealthService served by a real in-process gRPC server on a free port.
#include "server/health_service.h"

#include <memory>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = Health::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  grpc::Status Check(const std::string& service, HealthCheckResponse* response) {
    grpc::ClientContext context;
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, response);
  }

  HealthService health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, WholeServerServingUntilSetNotServing) {
  HealthCheckResponse response;
  ASSERT_TRUE(Check("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  health_.SetNotServing();
  ASSERT_TRUE(Check("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, UnknownServiceIsNotFound) {
  HealthCheckResponse response;
  const grpc::Status st = Check("shardps.NoSuchService", &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("shardps.NoSuchService"), std::string::npos);
}

TEST_F(HealthServiceTest, WatchSeesServingThenNotServing) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  std::thread flip([this] { health_.SetNotServing(); });
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_TRUE(reader->Finish().ok());
  flip.join();
}

TEST_F(HealthServiceTest, WatchOfUnknownServiceEndsWhenNotServing) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  request.set_service("shardps.NoSuchService");
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  health_.SetNotServing();
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(HealthServiceTest, WatchEndsWhenClientCancels) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server's Watch returned: Shutdown in TearDown does not hang on it.
}

}  // namespace
}  // namespace shardps
