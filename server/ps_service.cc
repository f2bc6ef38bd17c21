#include "server/ps_service.h"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "grpc/slice.h"
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

namespace {

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

}  // namespace

char* PullResponseSlices::AddTable(uint32_t table_id, uint32_t dim, size_t bytes) {
  // TableValues fields: 1 table_id (varint), 2 dim (varint), 3 values
  // (length-delimited); proto3 leaves zero values out. The message is field 1
  // of PullResponse (length-delimited).
  char inner[32];
  char* p = inner;
  if (table_id != 0) {
    *p++ = 0x08;
    p = PutVarint(table_id, p);
  }
  if (dim != 0) {
    *p++ = 0x10;
    p = PutVarint(dim, p);
  }
  if (bytes != 0) {
    *p++ = 0x1a;
    p = PutVarint(bytes, p);
  }
  const size_t inner_size = static_cast<size_t>(p - inner);
  char header[48];
  char* h = header;
  *h++ = 0x0a;
  h = PutVarint(inner_size + bytes, h);
  std::memcpy(h, inner, inner_size);
  h += inner_size;
  const size_t header_size = static_cast<size_t>(h - header);
  slices_.emplace_back(header, header_size);
  bytes_ += header_size + bytes;
  if (bytes == 0) return nullptr;
  // Always a heap slice: a small grpc_slice_malloc keeps its bytes inside
  // the slice struct itself, which moves.
  grpc_slice values = grpc_slice_malloc_large(bytes);
  char* room = reinterpret_cast<char*>(GRPC_SLICE_START_PTR(values));
  slices_.emplace_back(values, grpc::Slice::STEAL_REF);
  return room;
}

void PullResponseSlices::Release(grpc::ByteBuffer* out) {
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  out->Swap(&buffer);
  slices_.clear();
  bytes_ = 0;
}

grpc::ServerUnaryReactor* PsService::Pull(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request_bytes,
                                          grpc::ByteBuffer* response) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  PullRequest request;
  {
    grpc::ByteBuffer copy(*request_bytes);  // Deserialize consumes its buffer.
    if (!grpc::SerializationTraits<PullRequest>::Deserialize(&copy, &request).ok()) {
      const grpc::Status st(grpc::StatusCode::INVALID_ARGUMENT,
                            "malformed PullRequest (not a PullRequest message)");
      Metrics().pull.Record(start, st, 0);
      reactor->Finish(st);
      return reactor;
    }
  }
  auto serve = [this, context, response, reactor, start](const PullRequest& request) {
    PullResponseSlices slices;
    grpc::Status st = ToGrpcStatus(
        core_->Pull(request, absl::FromChrono(context->deadline()), &slices));
    Metrics().pull.Record(start, st, st.ok() ? slices.bytes() : 0);
    if (st.ok()) slices.Release(response);
    reactor->Finish(st);
  };
  if (core_->PullMayWait(request)) {
    // The call (context, response) lives until Finish; the core wakes the
    // wait at its deadline or on Shutdown.
    std::thread([serve = std::move(serve), request = std::move(request)] {
      serve(request);
    }).detach();
  } else {
    serve(request);
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
