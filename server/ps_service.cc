#include "server/ps_service.h"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "grpc/slice.h"
#include "common/grpc_status.h"
#include "common/job_secret.h"
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
  // Refcounted (large) slices keep their bytes on the heap.
  char* room = reinterpret_cast<char*>(values.data.refcounted.bytes);
  slices_.emplace_back(values, grpc::Slice::STEAL_REF);
  return room;
}

void PullResponseSlices::Release(grpc::ByteBuffer* out) {
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  out->Swap(&buffer);
  slices_.clear();
  bytes_ = 0;
}

namespace {

// One data-path call on a completion queue; its address is the queue's tag.
// Proceed runs on the queue's thread: first when a request has arrived (ok =
// false: the server is shutting down), then when its Finish has been sent.
// On arrival the call asks for the next request (Rearm) before it serves
// this one (Serve), which ends with a Finish on the responder.
class DataCall {
 public:
  DataCall(PsService* service, grpc::ServerCompletionQueue* cq)
      : service_(service), cq_(cq) {}
  virtual ~DataCall() = default;

  void Proceed(bool ok) {
    if (!ok || finishing_) {
      delete this;
      return;
    }
    finishing_ = true;
    Rearm();
    Serve();
  }

 protected:
  virtual void Rearm() = 0;
  virtual void Serve() = 0;

  PsService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;

 private:
  bool finishing_ = false;
};

class PullCall final : public DataCall {
 public:
  PullCall(PsService* service, grpc::ServerCompletionQueue* cq)
      : DataCall(service, cq), responder_(&context_) {
    service_->RequestPull(&context_, &request_bytes_, &responder_, cq_, cq_, this);
  }

 private:
  void Rearm() override { new PullCall(service_, cq_); }

  void Serve() override {
    start_ = std::chrono::steady_clock::now();
    if (absl::Status st = CheckJobSecret("Pull", context_); !st.ok()) {
      Finish(ToGrpcStatus(st), nullptr);
      return;
    }
    if (!grpc::SerializationTraits<PullRequest>::Deserialize(&request_bytes_, &request_)
             .ok()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "malformed PullRequest (not a PullRequest message)"),
             nullptr);
      return;
    }
    if (service_->core()->PullMayWait(request_)) {
      // The call lives until its Finish is sent; the core wakes the wait at
      // its deadline or on Shutdown, and StopDataPath waits for EndWait.
      if (!service_->TryBeginWait()) {
        Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("too many BSP pulls waiting for their clock (",
                                         service_->max_waiting(),
                                         "); retry after the current clock closes")),
               nullptr);
        return;
      }
      std::thread([this] {
        PsService* service = service_;  // `this` may be gone after Pull.
        Pull();
        service->EndWait();
      }).detach();
    } else {
      Pull();
    }
  }

  void Pull() {
    PullResponseSlices slices;
    const grpc::Status st = ToGrpcStatus(service_->core()->Pull(
        request_, absl::FromChrono(context_.deadline()), &slices));
    Finish(st, &slices);
  }

  void Finish(const grpc::Status& st, PullResponseSlices* slices) {
    Metrics().pull.Record(start_, st, st.ok() ? slices->bytes() : 0);
    if (st.ok()) {
      grpc::ByteBuffer response;
      slices->Release(&response);
      responder_.Finish(response, st, this);
    } else {
      responder_.FinishWithError(st, this);
    }
  }

  grpc::ByteBuffer request_bytes_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  PullRequest request_;
  std::chrono::steady_clock::time_point start_;
};

class PushCall final : public DataCall {
 public:
  PushCall(PsService* service, grpc::ServerCompletionQueue* cq)
      : DataCall(service, cq), responder_(&context_) {
    service_->RequestPush(&context_, &request_, &responder_, cq_, cq_, this);
  }

 private:
  void Rearm() override { new PushCall(service_, cq_); }

  void Serve() override {
    const auto start = std::chrono::steady_clock::now();
    PushResponse response;
    absl::Status checked = CheckJobSecret("Push", context_);
    if (checked.ok()) checked = service_->core()->Push(request_, &response);
    const grpc::Status st = ToGrpcStatus(checked);
    Metrics().push.Record(start, st, request_.ByteSizeLong());
    if (st.ok()) {
      Metrics().rows_applied.Increment(static_cast<double>(response.rows_applied()));
      responder_.Finish(response, st, this);
    } else {
      responder_.FinishWithError(st, this);
    }
  }

  PushRequest request_;
  grpc::ServerAsyncResponseWriter<PushResponse> responder_;
};

}  // namespace

PsService::~PsService() { StopDataPath(); }

void PsService::ServeDataPath(
    std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs) {
  cqs_ = std::move(cqs);
  for (auto& cq : cqs_) {
    grpc::ServerCompletionQueue* q = cq.get();
    new PullCall(this, q);
    new PushCall(this, q);
    threads_.emplace_back([q] {
      void* tag;
      bool ok;
      while (q->Next(&tag, &ok)) static_cast<DataCall*>(tag)->Proceed(ok);
    });
  }
}

void PsService::StopDataPath() {
  {
    MutexLock lock(&mu_);
    while (waiting_ > 0) waits_done_.Wait(&mu_);
  }
  for (auto& cq : cqs_) cq->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  cqs_.clear();
}

bool PsService::TryBeginWait() {
  MutexLock lock(&mu_);
  if (waiting_ >= max_waiting_) return false;
  ++waiting_;
  return true;
}

void PsService::EndWait() {
  MutexLock lock(&mu_);
  if (--waiting_ == 0) waits_done_.SignalAll();
}

grpc::Status PsService::InitRows(grpc::ServerContext* context,
                                 const InitRowsRequest* request,
                                 InitRowsResponse* response) {
  if (absl::Status st = CheckJobSecret("InitRows", *context); !st.ok()) return ToGrpcStatus(st);
  return ToGrpcStatus(core_->InitRows(*request, response));
}

grpc::Status PsService::TableInfo(grpc::ServerContext* context,
                                  const TableInfoRequest* request,
                                  TableInfoResponse* response) {
  if (absl::Status st = CheckJobSecret("TableInfo", *context); !st.ok()) return ToGrpcStatus(st);
  return ToGrpcStatus(core_->TableInfo(*request, response));
}

absl::Status PsService::CheckControl(const char* rpc, uint64_t token,
                                     const grpc::ServerContext* context) const {
  const uint64_t mine = control_token_.load(std::memory_order_acquire);
  if (mine != 0 && token == mine) return absl::OkStatus();
  const std::string why =
      mine == 0 ? "this server has no control token yet (it has not registered with a "
                  "scheduler and was started without --control_token)"
                : "the request does not carry the control token of this job's scheduler";
  LOG_EVERY_N(WARNING, 10) << "refused " << rpc << " from " << context->peer() << ": " << why;
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, " refused: only the job's scheduler may call it; ", why));
}

grpc::Status PsService::Checkpoint(grpc::ServerContext* context,
                                   const CheckpointRequest* request,
                                   CheckpointResponse* response) {
  absl::Status st = CheckJobSecret("Checkpoint", *context);
  if (st.ok()) st = CheckControl("Checkpoint", request->control_token(), context);
  if (st.ok()) st = core_->Checkpoint(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status PsService::Restore(grpc::ServerContext* context,
                                const RestoreRequest* request,
                                RestoreResponse* response) {
  absl::Status st = CheckJobSecret("Restore", *context);
  if (st.ok()) st = CheckControl("Restore", request->control_token(), context);
  if (st.ok()) st = core_->Restore(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status PsService::Control(grpc::ServerContext* context,
                                const ControlRequest* request,
                                ControlResponse* response) {
  absl::Status st = CheckJobSecret("Control", *context);
  if (st.ok()) st = CheckControl("Control", request->control_token(), context);
  if (st.ok()) st = core_->Control(*request, response);
  return ToGrpcStatus(st);
}

}  // namespace shardps
