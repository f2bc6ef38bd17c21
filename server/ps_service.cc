#include "server/ps_service.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/job_secret.h"
#include "common/metrics.h"
#include "glog/logging.h"
#include "grpc/slice.h"
#include "grpcpp/alarm.h"

namespace shardps {
namespace {

// Prometheus series of the data RPCs, looked up once; recording is a few
// atomic adds per call (no lookup, no formatting).
struct RpcMetrics {
  struct Rpc {
    explicit Rpc(const char* rpc)
        : requests(metrics::GetCounter("shardps_server_requests_total", "RPCs served, by method.",
                                       {{"rpc", rpc}})),
          errors(metrics::GetCounter("shardps_server_request_errors_total",
                                     "RPCs answered with an error status.", {{"rpc", rpc}})),
          bytes(metrics::GetCounter("shardps_server_payload_bytes_total",
                                    "Bytes of pull responses and push requests.", {{"rpc", rpc}})),
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
  if (bytes >= (size_t{1} << 20)) large_.push_back({room, bytes});
  return room;
}

void PullResponseSlices::DropPages(const std::vector<Range>& ranges) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (const Range& r : ranges) {
    // Whole pages inside the buffer only: the allocator's bookkeeping
    // around it stays as it is.
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(r.data) + page - 1) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(r.data) + r.bytes) & ~(page - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

void PullResponseSlices::Release(grpc::ByteBuffer* out) {
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  out->Swap(&buffer);
  slices_.clear();
  large_.clear();
  bytes_ = 0;
}

namespace {

// What a data-path completion queue delivers: its Run is called on the
// queue's thread with the event's `ok`.
class CqTag {
 public:
  virtual void Run(bool ok) = 0;

 protected:
  ~CqTag() = default;
};

// One data-path call on a completion queue; its address is the queue's tag.
// Run runs on the queue's thread: first when a request has arrived (ok =
// false: the server is shutting down), then when its Finish has completed
// (ok: sent). On arrival the call asks for the next request (Rearm) before
// it serves this one (Serve), which ends with a Finish on the responder.
class DataCall : public CqTag {
 public:
  DataCall(PsService* service, grpc::ServerCompletionQueue* cq) : service_(service), cq_(cq) {}
  virtual ~DataCall() = default;

  void Run(bool ok) override {
    if (!finishing_) {
      if (!ok) {
        delete this;
        return;
      }
      finishing_ = true;
      Rearm();
      Serve();
      return;
    }
    if (Finished(ok)) delete this;
  }

 protected:
  virtual void Rearm() = 0;
  virtual void Serve() = 0;
  // The Finish has completed; true: the call may be deleted.
  virtual bool Finished(bool /*sent*/) { return true; }

  PsService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;

 private:
  bool finishing_ = false;
};

// A raw request parsed as `Request`; false if its bytes are not one.
template <typename Request>
bool ParseRequest(grpc::ByteBuffer* bytes, Request* request) {
  return grpc::SerializationTraits<Request>::Deserialize(bytes, request).ok();
}

grpc::Status Malformed(const char* rpc, const char* message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat(rpc, " refused: malformed ", message, " (not a well-formed ",
                                   message, " message)"));
}

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
    if (!ParseRequest(&request_bytes_, &request_)) {
      Finish(Malformed("Pull", "PullRequest"), nullptr);
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
    const grpc::Status st = ToGrpcStatus(
        service_->core()->Pull(request_, absl::FromChrono(context_.deadline()), &slices));
    Finish(st, &slices);
  }

  // May run on a waiting pull's own thread: everything the queue's thread
  // reads later (reserved_, pending_) is set before the Finish is started.
  void Finish(grpc::Status st, PullResponseSlices* slices) {
    if (st.ok() && !service_->TryReserveAnswer(slices->bytes())) {
      st = grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("Pull refused for now: pull answers this server's callers have not "
                       "yet taken hold ",
                       service_->unsent_answer_bytes(), " bytes; this answer of ", slices->bytes(),
                       " would pass cluster.max_unsent_answer_bytes (",
                       service_->max_unsent_answer_bytes(), "); retry"));
    }
    Metrics().pull.Record(start_, st, st.ok() ? slices->bytes() : 0);
    if (!st.ok()) {
      if (slices != nullptr) PullResponseSlices::DropPages(slices->large());
      responder_.FinishWithError(st, this);
      return;
    }
    reserved_ = slices->bytes();
    large_ = slices->large();
    pending_ = 2;  // The Finish and the alarm.
    grpc::ByteBuffer response;
    slices->Release(&response);
    alarm_.Set(cq_, absl::ToChronoTime(absl::Now() + service_->answer_send_timeout()), &alarm_tag_);
    responder_.Finish(response, st, this);
  }

  bool Finished(bool sent) override {
    if (pending_ == 0) return true;  // An error: no answer, no alarm.
    service_->ReleaseAnswer(reserved_);
    // Nothing reads an answer that was not sent: its pages go back now,
    // whenever gRPC lets its buffers go.
    if (!sent) PullResponseSlices::DropPages(large_);
    finish_done_ = true;
    alarm_.Cancel();  // Its tag comes back (ok = false) unless it fired.
    return --pending_ == 0;
  }

  // The answer was not sent within answer_send_timeout (fired), or its
  // Finish completed first (the alarm was cancelled).
  void OnAlarm(bool fired) {
    if (fired && !finish_done_) {
      LOG_EVERY_N(WARNING, 10) << "cancelled a pull answer of " << reserved_ << " bytes that "
                               << context_.peer() << " did not take within "
                               << service_->answer_send_timeout()
                               << " (cluster.answer_send_timeout_ms)";
      context_.TryCancel();
    }
    if (--pending_ == 0) delete this;
  }

  class AlarmTag final : public CqTag {
   public:
    explicit AlarmTag(PullCall* call) : call_(call) {}
    void Run(bool ok) override { call_->OnAlarm(ok); }

   private:
    PullCall* const call_;
  };

  grpc::ByteBuffer request_bytes_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  PullRequest request_;
  std::chrono::steady_clock::time_point start_;
  // An answer handed to gRPC: its bytes, and the events still to come.
  size_t reserved_ = 0;
  std::vector<PullResponseSlices::Range> large_;
  int pending_ = 0;
  bool finish_done_ = false;
  grpc::Alarm alarm_;
  AlarmTag alarm_tag_{this};
};

class PushCall final : public DataCall {
 public:
  PushCall(PsService* service, grpc::ServerCompletionQueue* cq)
      : DataCall(service, cq), responder_(&context_) {
    service_->RequestPush(&context_, &request_bytes_, &responder_, cq_, cq_, this);
  }

 private:
  void Rearm() override { new PushCall(service_, cq_); }

  void Serve() override {
    const auto start = std::chrono::steady_clock::now();
    PushResponse response;
    grpc::Status st = ToGrpcStatus(CheckJobSecret("Push", context_));
    if (st.ok() && !ParseRequest(&request_bytes_, &request_)) {
      st = Malformed("Push", "PushRequest");
    }
    if (st.ok()) st = ToGrpcStatus(service_->core()->Push(request_, &response));
    Metrics().push.Record(start, st, request_.ByteSizeLong());
    if (!st.ok()) {
      responder_.FinishWithError(st, this);
      return;
    }
    Metrics().rows_applied.Increment(static_cast<double>(response.rows_applied()));
    grpc::ByteBuffer bytes;
    bool own_buffer = false;
    st = grpc::SerializationTraits<PushResponse>::Serialize(response, &bytes, &own_buffer);
    if (st.ok()) {
      responder_.Finish(bytes, st, this);
    } else {
      responder_.FinishWithError(st, this);
    }
  }

  grpc::ByteBuffer request_bytes_;
  PushRequest request_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
};

}  // namespace

PsService::PsService(ParameterServerCore* core)
    : core_(core),
      max_waiting_(4 * static_cast<int>(core->config().cluster().num_workers()) + 16),
      max_unsent_answer_bytes_(core->config().cluster().max_unsent_answer_bytes() > 0
                                   ? core->config().cluster().max_unsent_answer_bytes()
                                   : uint64_t{1} << 30),
      answer_send_timeout_(
          absl::Milliseconds(core->config().cluster().answer_send_timeout_ms() > 0
                                 ? core->config().cluster().answer_send_timeout_ms()
                                 : 60000)) {}

PsService::~PsService() { StopDataPath(); }

void PsService::ServeDataPath(std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs) {
  cqs_ = std::move(cqs);
  for (auto& cq : cqs_) {
    grpc::ServerCompletionQueue* q = cq.get();
    new PullCall(this, q);
    new PushCall(this, q);
    threads_.emplace_back([q] {
      void* tag;
      bool ok;
      while (q->Next(&tag, &ok)) static_cast<CqTag*>(tag)->Run(ok);
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

bool PsService::TryReserveAnswer(size_t bytes) {
  uint64_t held = unsent_answer_bytes_.load(std::memory_order_relaxed);
  do {
    // One answer alone always goes (it is at most max_message_bytes).
    if (held > 0 && held + bytes > max_unsent_answer_bytes_) return false;
  } while (
      !unsent_answer_bytes_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  return true;
}

void PsService::ReleaseAnswer(size_t bytes) {
  unsent_answer_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
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

grpc::Status PsService::InitRows(grpc::ServerContext* context, const InitRowsRequest* request,
                                 InitRowsResponse* response) {
  if (absl::Status st = CheckJobSecret("InitRows", *context); !st.ok()) return ToGrpcStatus(st);
  return ToGrpcStatus(core_->InitRows(*request, response));
}

grpc::Status PsService::TableInfo(grpc::ServerContext* context, const TableInfoRequest* request,
                                  TableInfoResponse* response) {
  if (absl::Status st = CheckJobSecret("TableInfo", *context); !st.ok()) return ToGrpcStatus(st);
  return ToGrpcStatus(core_->TableInfo(*request, response));
}

void PsService::set_control_token(uint64_t token) {
  control_token_.store(token, std::memory_order_release);
  MutexLock lock(&mu_);
  token_set_.SignalAll();
}

int PsService::control_calls_awaiting_token() const {
  MutexLock lock(&mu_);
  return awaiting_token_;
}

void PsService::await_control_token(absl::Duration timeout) {
  MutexLock lock(&mu_);
  await_token_until_ = absl::Now() + timeout;
}

absl::Status PsService::CheckControl(const char* rpc, uint64_t token,
                                     const grpc::ServerContext* context) const {
  uint64_t mine = control_token_.load(std::memory_order_acquire);
  if (mine == 0) {
    // Registering: the scheduler's first Control may come before its
    // Register answer has been read here. Wait for the token (in slices, to
    // see a cancelled call) until the registration's or the call's deadline.
    MutexLock lock(&mu_);
    const absl::Time until = std::min(absl::FromChrono(context->deadline()), await_token_until_);
    ++awaiting_token_;
    while ((mine = control_token_.load(std::memory_order_acquire)) == 0 && absl::Now() < until &&
           !context->IsCancelled()) {
      token_set_.WaitUntil(&mu_, std::min(until, absl::Now() + absl::Milliseconds(100)));
    }
    --awaiting_token_;
  }
  if (mine != 0 && token == mine) return absl::OkStatus();
  const std::string why =
      mine == 0 ? "this server has no control token yet (it has not registered with a "
                  "scheduler and was started without --control_token)"
                : "the request does not carry the control token of this job's scheduler";
  LOG_EVERY_N(WARNING, 10) << "refused " << rpc << " from " << context->peer() << ": " << why;
  return absl::PermissionDeniedError(
      absl::StrCat(rpc, " refused: only the job's scheduler may call it; ", why));
}

grpc::Status PsService::Checkpoint(grpc::ServerContext* context, const CheckpointRequest* request,
                                   CheckpointResponse* response) {
  absl::Status st = CheckJobSecret("Checkpoint", *context);
  if (st.ok()) st = CheckControl("Checkpoint", request->control_token(), context);
  if (st.ok()) st = core_->Checkpoint(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status PsService::Restore(grpc::ServerContext* context, const RestoreRequest* request,
                                RestoreResponse* response) {
  absl::Status st = CheckJobSecret("Restore", *context);
  if (st.ok()) st = CheckControl("Restore", request->control_token(), context);
  if (st.ok()) st = core_->Restore(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status PsService::Control(grpc::ServerContext* context, const ControlRequest* request,
                                ControlResponse* response) {
  absl::Status st = CheckJobSecret("Control", *context);
  if (st.ok()) st = CheckControl("Control", request->control_token(), context);
  if (st.ok()) st = core_->Control(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status PsService::FollowVersions(grpc::ServerContext* context,
                                       const FollowVersionsRequest* request,
                                       grpc::ServerWriter<VersionPart>* writer) {
  if (absl::Status st = CheckJobSecret("FollowVersions", *context); !st.ok()) {
    return ToGrpcStatus(st);
  }
  uint64_t generation = request->after_generation();
  uint64_t clock = request->after_clock();
  VersionLog* log = core_->versions();
  if (request->verify()) log->WantHashes();
  VersionPart idle;
  idle.set_idle(true);
  idle.set_server_index(core_->server_index());
  absl::Time last_write = absl::Now();
  while (!context->IsCancelled()) {
    // Wakes every 200 ms to see a cancelled call.
    const std::shared_ptr<const VersionChunks> part =
        log->Next(generation, clock, absl::Now() + absl::Milliseconds(200));
    if (part == nullptr) {
      if (log->stopped()) break;
      if (absl::Now() - last_write >= kFollowIdle) {
        if (!writer->Write(idle)) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "FollowVersions: the follower is gone");
        }
        last_write = absl::Now();
      }
      continue;
    }
    for (const auto& chunk : *part) {
      if (!writer->Write(*chunk)) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "FollowVersions: the follower is gone");
      }
    }
    generation = part->front()->generation();
    clock = part->front()->clock();
    last_write = absl::Now();
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("FollowVersions: server ", core_->server_index(),
                                   " is shutting down or the call was cancelled"));
}

}  // namespace shardps
