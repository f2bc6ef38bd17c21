// Conversions between absl::Status and grpc::Status, used once at each RPC
// edge (service handlers and clients). Codes map one to one (gRPC and Abseil
// share the canonical code numbers).
#ifndef SHARDPS_COMMON_GRPC_STATUS_H_
#define SHARDPS_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace shardps {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_GRPC_STATUS_H_
