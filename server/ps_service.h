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
// Pull is a raw method: the service parses the PullRequest itself and builds
// the response's wire bytes as gRPC slices (PullResponseSlices), so the
// table writes each value once, into the buffer gRPC sends from. Clients see
// an ordinary PullResponse.
//
// Thread-safety: thread-safe (the core is). The core must outlive the
// service.
#ifndef SHARDPS_SERVER_PS_SERVICE_H_
#define SHARDPS_SERVER_PS_SERVICE_H_

#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "server/parameter_server_core.h"

namespace shardps {

// The one place an absl::Status becomes a grpc::Status (same code, message).
grpc::Status ToGrpcStatus(const absl::Status& status);

// A PullResponse in protobuf wire format, built as slices: per table, a small
// header (the TableValues field's tag and length, table_id, dim, the values'
// tag and length) and an uninitialized slice the core writes the values into.
class PullResponseSlices final : public PullSink {
 public:
  char* AddTable(uint32_t table_id, uint32_t dim, size_t bytes) override;
  size_t bytes() const { return bytes_; }  // Wire bytes so far.
  // Moves the slices into `out` (this is then empty).
  void Release(grpc::ByteBuffer* out);

 private:
  std::vector<grpc::Slice> slices_;
  size_t bytes_ = 0;
};

using PsServiceBase = ParameterServer::WithRawCallbackMethod_Pull<
    ParameterServer::WithCallbackMethod_Push<ParameterServer::Service>>;

class PsService final : public PsServiceBase {
 public:
  explicit PsService(ParameterServerCore* core) : core_(core) {}
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
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
