// The ParameterServer gRPC service: a thin, stateless shell over a
// ParameterServerCore. Each RPC hands the request to the core and converts
// the absl::Status to a grpc::Status once (ToGrpcStatus). The request's
// deadline bounds a BSP pull's wait.
//
// Pull and Push, the data path, use gRPC's callback API: they run on the
// thread that read the request, with no hand-off to a synchronous-server
// thread. A BSP pull that has to wait for its clock would block that thread,
// so it waits on a thread of its own instead. The control RPCs stay
// synchronous.
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

using PsServiceBase = ParameterServer::WithCallbackMethod_Pull<
    ParameterServer::WithCallbackMethod_Push<ParameterServer::Service>>;

class PsService final : public PsServiceBase {
 public:
  explicit PsService(ParameterServerCore* core) : core_(core) {}
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const PullRequest* request,
                                 PullResponse* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const PushRequest* request,
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
