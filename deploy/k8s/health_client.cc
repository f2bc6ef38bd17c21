#include "deploy/k8s/health_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "proto/health.grpc.pb.h"

namespace shardps {

const char* ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

absl::StatusOr<ServingStatus> CheckHealth(const std::string& address, const std::string& service,
                                          absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("health check address \"", address, "\" is not host:port"));
  }
  auto credentials = ChannelCredentialsFromFlags();
  if (!credentials.ok()) return credentials.status();
  auto channel = grpc::CreateChannel(address, *credentials);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
  context.set_wait_for_ready(true);  // Ride out a server that is still starting.
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("health check of ", address, " service \"", service,
                                     "\": ", status.error_message()));
  }
  return static_cast<ServingStatus>(response.status());
}

}  // namespace shardps
