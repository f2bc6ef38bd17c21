// server_rpc_bench's gRPC ceiling (--role=null_server): a ParameterServer
// that serves Pull and Push the way ps_server's data path does (a completion
// queue and a thread per core, the pull answer built as slices, the push
// parsed into a PushRequest by gRPC) but does only what the raw TCP loop's
// server does with the bytes: a pull's rows are copied from a small hot
// buffer, a push's gradient rows are copied into it. No lookup, no new rows,
// no optimizer, no validation. The pipelined client against it is the rate no
// table behind unary gRPC can beat on this machine: what gRPC, HTTP/2 and the
// client cost over the raw loop, with the table's cost taken out.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/server_rpc_bench.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_service.h"

namespace shardps::bench {

namespace {

using NullServiceBase = ParameterServer::WithRawMethod_Pull<
    ParameterServer::WithAsyncMethod_Push<ParameterServer::Service>>;

// The rows a pull copies out and a push copies in (4096 rows, as the raw
// TCP server's buffer).
struct HotRows {
  size_t row_bytes;
  std::vector<char> bytes;
  char* row(size_t i) { return bytes.data() + (i % 4096) * row_bytes; }
};

// A call on a queue: Proceed runs when its request has arrived (then it asks
// for the next one and serves this one) and when its answer has been sent.
class Call {
 public:
  Call(NullServiceBase* service, grpc::ServerCompletionQueue* cq, HotRows* rows)
      : service_(service), cq_(cq), rows_(rows) {}
  virtual ~Call() = default;
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
  NullServiceBase* const service_;
  grpc::ServerCompletionQueue* const cq_;
  HotRows* const rows_;
  grpc::ServerContext context_;

 private:
  bool finishing_ = false;
};

class NullPull final : public Call {
 public:
  NullPull(NullServiceBase* service, grpc::ServerCompletionQueue* cq, HotRows* rows)
      : Call(service, cq, rows), responder_(&context_) {
    service_->RequestPull(&context_, &request_bytes_, &responder_, cq_, cq_, this);
  }

 private:
  void Rearm() override { new NullPull(service_, cq_, rows_); }
  void Serve() override {
    PullRequest request;
    if (!grpc::SerializationTraits<PullRequest>::Deserialize(&request_bytes_, &request).ok()) {
      responder_.FinishWithError(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed PullRequest"), this);
      return;
    }
    PullResponseSlices slices;
    const uint32_t dim = static_cast<uint32_t>(absl::GetFlag(FLAGS_dim));
    for (const TableKeys& t : request.tables()) {
      const size_t n = static_cast<size_t>(t.keys_size());
      char* out = slices.AddTable(t.table_id(), dim, n * rows_->row_bytes);
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(out + i * rows_->row_bytes, rows_->row(i), rows_->row_bytes);
      }
    }
    grpc::ByteBuffer response;
    slices.Release(&response);
    responder_.Finish(response, grpc::Status::OK, this);
  }

  grpc::ByteBuffer request_bytes_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
};

class NullPush final : public Call {
 public:
  NullPush(NullServiceBase* service, grpc::ServerCompletionQueue* cq, HotRows* rows)
      : Call(service, cq, rows), responder_(&context_) {
    service_->RequestPush(&context_, &request_, &responder_, cq_, cq_, this);
  }

 private:
  void Rearm() override { new NullPush(service_, cq_, rows_); }
  void Serve() override {
    PushResponse response;
    for (const TableGradients& t : request_.tables()) {
      const size_t n = std::min<size_t>(t.keys_size(), t.gradients().size() / rows_->row_bytes);
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(rows_->row(i), t.gradients().data() + i * rows_->row_bytes, rows_->row_bytes);
      }
      response.set_rows_applied(response.rows_applied() + n);
    }
    responder_.Finish(response, grpc::Status::OK, this);
  }

  PushRequest request_;
  grpc::ServerAsyncResponseWriter<PushResponse> responder_;
};

}  // namespace

int RunNullServer() {
  // SIGTERM (the driver's stop) is taken by sigwait below, not by the
  // failure handler InitProcess installs; the threads started here inherit
  // the blocked mask.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);
  const size_t bpv = absl::GetFlag(FLAGS_encoding) == "bf16" ? 2 : 4;
  // One buffer per data thread: the threads never share rows (no locks, as
  // the raw server, which has one connection).
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<HotRows> rows(threads);
  for (HotRows& r : rows) {
    r.row_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_dim)) * bpv;
    r.bytes.assign(4096 * r.row_bytes, 1);
  }
  NullServiceBase service;
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs;
  for (int i = 0; i < threads; ++i) cqs.push_back(builder.AddCompletionQueue());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "null server: cannot listen\n");
    return 1;
  }
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    grpc::ServerCompletionQueue* q = cqs[i].get();
    new NullPull(&service, q, &rows[i]);
    new NullPush(&service, q, &rows[i]);
    workers.emplace_back([q] {
      void* tag;
      bool ok;
      while (q->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
    });
  }
  std::printf("NULL_LISTENING 127.0.0.1:%d\n", port);
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&term, &signal_number);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  for (auto& q : cqs) q->Shutdown();
  for (std::thread& t : workers) t.join();
  return 0;
}

}  // namespace shardps::bench
