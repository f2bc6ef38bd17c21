#include "server/health_service.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardps {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

grpc::Status UnknownService(const std::string& service) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      "unknown service \"" + service + "\" (only \"\", the whole server)");
}

}  // namespace

grpc::Status HealthService::Check(grpc::ServerContext* context, const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  if (!request->service().empty()) return UnknownService(request->service());
  MutexLock lock(&mu_);
  response->set_status(serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* context, const HealthCheckRequest* request,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  // As gRPC's service does, an unknown name gets SERVICE_UNKNOWN (and never
  // changes); the whole server gets its status and then the change. Writes
  // happen outside the lock: a slow reader must not hold up Check.
  const bool known = request->service().empty();
  bool serving;
  {
    MutexLock lock(&mu_);
    serving = serving_;
  }
  HealthCheckResponse response;
  response.set_status(!known    ? HealthCheckResponse::SERVICE_UNKNOWN
                      : serving ? HealthCheckResponse::SERVING
                                : HealthCheckResponse::NOT_SERVING);
  if (!writer->Write(response)) return grpc::Status::CANCELLED;
  {
    // Cancellation has no wake-up of its own here: look every 200 ms. The
    // watch ends when the server stops serving, so shutdown never waits on
    // it.
    MutexLock lock(&mu_);
    while (serving_ && !context->IsCancelled()) {
      changed_.WaitUntil(&mu_, absl::Now() + absl::Milliseconds(200));
    }
  }
  if (context->IsCancelled()) return grpc::Status::CANCELLED;
  if (known && serving) {
    response.set_status(HealthCheckResponse::NOT_SERVING);
    writer->Write(response);
  }
  return grpc::Status::OK;
}

void HealthService::SetNotServing() {
  MutexLock lock(&mu_);
  serving_ = false;
  changed_.SignalAll();
}

}  // namespace shardps
