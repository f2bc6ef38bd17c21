#include "server/ps_service.h"

#include <chrono>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "common/metrics.h"

namespace shardps {
namespace {

// Prometheus series of the data RPCs, looked up once; recording is a few
// atomic adds per call (no lookup, no formatting).
struct RpcMetrics {
  struct Rpc {
    explicit Rpc(const char* rpc)
        : requests(metrics::GetCounter("shardps_server_requests_total",
                                       "RPCs served, by method.", {{"rpc", rpc}})),
          errors(metrics::GetCounter("shardps_server_request_errors_total",
                                     "RPCs answered with an error status.", {{"rpc", rpc}})),
          bytes(metrics::GetCounter("shardps_server_payload_bytes_total",
                                    "Bytes of pull responses and push requests.",
                                    {{"rpc", rpc}})),
          latency(metrics::GetHistogram("shardps_server_request_seconds",
                                        "Time to serve an RPC (a BSP pull includes its "
                                        "wait for the clock).",
                                        metrics::LatencyBuckets(), {{"rpc", rpc}})) {}
    void Record(std::chrono::steady_clock::time_point start, const grpc::Status& st,
                size_t payload) const {
      latency.Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      requests.Increment();
      bytes.Increment(static_cast<double>(payload));
      if (!st.ok()) errors.Increment();
    }
    prometheus::Counter& requests;
    prometheus::Counter& errors;
    prometheus::Counter& bytes;
    prometheus::Histogram& latency;
  };
  Rpc pull{"pull"};
  Rpc push{"push"};
  prometheus::Counter& rows_applied = metrics::GetCounter(
      "shardps_server_optimizer_rows_applied_total",
      "Rows an optimizer step was applied to (in BSP: buffered for the clock).");
};

const RpcMetrics& Metrics() {
  static const RpcMetrics* m = new RpcMetrics();
  return *m;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::ServerUnaryReactor* PsService::Pull(grpc::CallbackServerContext* context,
                                          const PullRequest* request,
                                          PullResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto serve = [this, context, request, response, reactor, start] {
    grpc::Status st = ToGrpcStatus(
        core_->Pull(*request, absl::FromChrono(context->deadline()), response));
    Metrics().pull.Record(start, st, st.ok() ? response->ByteSizeLong() : 0);
    reactor->Finish(st);
  };
  if (core_->PullMayWait(*request)) {
    // The call (context, request, response) lives until Finish; the core
    // wakes the wait at its deadline or on Shutdown.
    std::thread(std::move(serve)).detach();
  } else {
    serve();
  }
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Push(grpc::CallbackServerContext* context,
                                          const PushRequest* request,
                                          PushResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  grpc::Status st = ToGrpcStatus(core_->Push(*request, response));
  Metrics().push.Record(start, st, request->ByteSizeLong());
  if (st.ok()) Metrics().rows_applied.Increment(static_cast<double>(response->rows_applied()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(st);
  return reactor;
}

grpc::Status PsService::InitRows(grpc::ServerContext* context,
                                 const InitRowsRequest* request,
                                 InitRowsResponse* response) {
  return ToGrpcStatus(core_->InitRows(*request, response));
}

grpc::Status PsService::TableInfo(grpc::ServerContext* context,
                                  const TableInfoRequest* request,
                                  TableInfoResponse* response) {
  return ToGrpcStatus(core_->TableInfo(*request, response));
}

grpc::Status PsService::Checkpoint(grpc::ServerContext* context,
                                   const CheckpointRequest* request,
                                   CheckpointResponse* response) {
  return ToGrpcStatus(core_->Checkpoint(*request, response));
}

grpc::Status PsService::Restore(grpc::ServerContext* context,
                                const RestoreRequest* request,
                                RestoreResponse* response) {
  return ToGrpcStatus(core_->Restore(*request, response));
}

grpc::Status PsService::Control(grpc::ServerContext* context,
                                const ControlRequest* request,
                                ControlResponse* response) {
  return ToGrpcStatus(core_->Control(*request, response));
}

}  // namespace shardps
