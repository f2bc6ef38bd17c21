// grpc.health.v1.Health for ps_server, as a synchronous service of our own.
//
// gRPC's default health service (EnableDefaultHealthCheckService) is built on
// the callback API, and any callback method makes gRPC 1.51 start its
// callback threads ("nexting" threads). Those poll the same connections as
// the data path's completion-queue threads, read requests and hand them over,
// which costs the data path rows/s (workload W, bench/server_rpc_bench). This
// service answers like the default one: the whole server (service "") is
// SERVING until SetNotServing, any other service name is NOT_FOUND. Watch
// sends the current status (SERVICE_UNKNOWN for another name), then for ""
// the change to NOT_SERVING; it ends when the client cancels or at
// SetNotServing, so a watch never holds up the server's shutdown.
//
// Thread-safety: thread-safe.
#ifndef SHARDPS_SERVER_HEALTH_SERVICE_H_
#define SHARDPS_SERVER_HEALTH_SERVICE_H_

#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"

namespace shardps {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

  // From now on the server reports NOT_SERVING; open Watch calls get the
  // change and end. Call before grpc::Server::Shutdown.
  void SetNotServing();

 private:
  Mutex mu_;
  CondVar changed_;
  bool serving_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_HEALTH_SERVICE_H_
