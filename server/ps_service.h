// The ParameterServer gRPC service: a thin, stateless shell over a
// ParameterServerCore. Each RPC hands the request to the core and converts
// the absl::Status to a grpc::Status once (ToGrpcStatus). The request's
// deadline bounds a BSP pull's wait.
//
// Checkpoint and Restore answer UNIMPLEMENTED (not built yet).
//
// Thread-safety: thread-safe (the core is). The core must outlive the
// service.
#ifndef SHARDPS_SERVER_PS_SERVICE_H_
#define SHARDPS_SERVER_PS_SERVICE_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "server/parameter_server_core.h"

namespace shardps {

// The one place an absl::Status becomes a grpc::Status (same code, message).
grpc::Status ToGrpcStatus(const absl::Status& status);

class PsService final : public ParameterServer::Service {
 public:
  explicit PsService(ParameterServerCore* core) : core_(core) {}
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  grpc::Status Pull(grpc::ServerContext* context, const PullRequest* request,
                    PullResponse* response) override;
  grpc::Status Push(grpc::ServerContext* context, const PushRequest* request,
                    PushResponse* response) override;
  grpc::Status InitRows(grpc::ServerContext* context,
                        const InitRowsRequest* request,
                        InitRowsResponse* response) override;
  grpc::Status TableInfo(grpc::ServerContext* context,
                         const TableInfoRequest* request,
                         TableInfoResponse* response) override;
  grpc::Status Checkpoint(grpc::ServerContext* context,
                          const CheckpointRequest* request,
                          CheckpointResponse* response) override;
  grpc::Status Restore(grpc::ServerContext* context,
                       const RestoreRequest* request,
                       RestoreResponse* response) override;
  grpc::Status Control(grpc::ServerContext* context,
                       const ControlRequest* request,
                       ControlResponse* response) override;

 private:
  ParameterServerCore* const core_;  // Not owned.
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PS_SERVICE_H_
