// The ParameterServer gRPC service: a thin, stateless shell over a
// ParameterServerCore. Each RPC hands the request to the core and converts
// the absl::Status to a grpc::Status once (common/grpc_status.h). The request's
// deadline bounds a BSP pull's wait.
//
// Pull and Push, the data path, are asynchronous (completion-queue) methods
// served by threads of our own (ServeDataPath): the thread whose poll read a
// request runs it and writes the response, with no hand-off to another
// thread. A BSP pull that has to wait for its clock would block that thread,
// so it waits on a thread of its own instead; at most max_waiting() such
// pulls wait at once and more are refused with RESOURCE_EXHAUSTED (a worker
// never has more than two waiting), so a flood of pulls for a far clock
// cannot take a thread each. The control RPCs stay synchronous.
//
// Control RPCs (Checkpoint, Restore, Control) are the scheduler's: each must
// carry the control token the scheduler handed this server at registration
// (set_control_token); one without it, or before any token is known, is
// refused with PERMISSION_DENIED and changes nothing (docs/security.md).
// Pull, Push, InitRows and TableInfo are the data path, open to workers.
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

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "common/mutex.h"
#include "server/parameter_server_core.h"

namespace shardps {

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

using PsServiceBase = ParameterServer::WithRawMethod_Pull<
    ParameterServer::WithAsyncMethod_Push<ParameterServer::Service>>;

class PsService final : public PsServiceBase {
 public:
  explicit PsService(ParameterServerCore* core)
      : core_(core), max_waiting_(4 * static_cast<int>(core->config().cluster().num_workers()) + 16) {}
  ~PsService();  // Calls StopDataPath.
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  // Serves Pull and Push on `cqs` (from ServerBuilder::AddCompletionQueue,
  // the server built and started), one thread per queue. Call once.
  void ServeDataPath(std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs);
  // After grpc::Server::Shutdown has returned: waits for waiting BSP pulls
  // to answer, shuts the queues down and joins their threads. Idempotent.
  void StopDataPath();

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

  // The token control RPCs must carry; 0 refuses every control RPC.
  void set_control_token(uint64_t token) {
    control_token_.store(token, std::memory_order_release);
  }

  // For the data path's calls (ps_service.cc).
  ParameterServerCore* core() const { return core_; }
  // A pull waits for its clock on a thread of its own (false: max_waiting()
  // pulls wait already; the pull is refused with RESOURCE_EXHAUSTED) ...
  bool TryBeginWait();
  void EndWait();    // ... and has called Finish.
  // At most 4 per worker (prefetch keeps at most two in flight) + 16.
  int max_waiting() const { return max_waiting_; }

 private:
  // OK if `token` is this server's control token; else PERMISSION_DENIED
  // naming the RPC and the caller.
  absl::Status CheckControl(const char* rpc, uint64_t token,
                            const grpc::ServerContext* context) const;

  ParameterServerCore* const core_;  // Not owned.
  const int max_waiting_;
  std::atomic<uint64_t> control_token_{0};
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::thread> threads_;
  Mutex mu_;
  CondVar waits_done_;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PS_SERVICE_H_
