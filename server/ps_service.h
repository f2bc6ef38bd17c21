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
// Pull and Push are raw methods: the service parses the request itself (a
// malformed one is answered INVALID_ARGUMENT naming the message, where gRPC's
// own parsing answers INTERNAL) and builds the pull response's wire bytes as
// gRPC slices (PullResponseSlices), so the table writes each value once, into
// the buffer gRPC sends from. Clients see an ordinary PullResponse.
//
// What a caller may leave unread (docs/security.md): the bytes of pull
// answers handed to gRPC and not yet sent (a caller that does not read its
// answers holds them) are bounded by cluster.max_unsent_answer_bytes over
// every caller; a pull past it is refused with UNAVAILABLE (clients retry)
// and its answer freed at once. An answer not sent within
// cluster.answer_send_timeout_ms is cancelled (ServerContext::TryCancel), so
// its buffers are freed even while its caller stays connected. After an
// answer that was never sent (cancelled, or its caller left) the service
// gives the answer's pages back to the system (PullResponseSlices::DropPages).
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
#include "absl/time/time.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
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

  // The value buffers of at least 1 MiB, for DropPages.
  struct Range {
    char* data;
    size_t bytes;
  };
  const std::vector<Range>& large() const { return large_; }
  // Gives the pages of `ranges` back to the system (MADV_DONTNEED), for an
  // answer that will never be sent (cancelled, its caller gone, or refused):
  // the process keeps large freed buffers for reuse otherwise
  // (TuneMallocForLargeMessages), and one thread's allocator arena keeps
  // freed memory at its top even through malloc_trim. The buffers stay
  // valid (their pages read as zeros) until gRPC frees them.
  static void DropPages(const std::vector<Range>& ranges);

 private:
  std::vector<grpc::Slice> slices_;
  std::vector<Range> large_;
  size_t bytes_ = 0;
};

using PsServiceBase = ParameterServer::WithRawMethod_Pull<
    ParameterServer::WithRawMethod_Push<ParameterServer::Service>>;

class PsService final : public PsServiceBase {
 public:
  // The limits come from core->config().cluster() (0: their defaults).
  explicit PsService(ParameterServerCore* core);
  ~PsService();  // Calls StopDataPath.
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  // Serves Pull and Push on `cqs` (from ServerBuilder::AddCompletionQueue,
  // the server built and started), one thread per queue. Call once.
  void ServeDataPath(std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs);
  // After grpc::Server::Shutdown has returned: waits for waiting BSP pulls
  // to answer, shuts the queues down and joins their threads. Idempotent.
  void StopDataPath();

  grpc::Status InitRows(grpc::ServerContext* context, const InitRowsRequest* request,
                        InitRowsResponse* response) override;
  grpc::Status TableInfo(grpc::ServerContext* context, const TableInfoRequest* request,
                         TableInfoResponse* response) override;
  grpc::Status Checkpoint(grpc::ServerContext* context, const CheckpointRequest* request,
                          CheckpointResponse* response) override;
  grpc::Status Restore(grpc::ServerContext* context, const RestoreRequest* request,
                       RestoreResponse* response) override;
  grpc::Status Control(grpc::ServerContext* context, const ControlRequest* request,
                       ControlResponse* response) override;
  // A serving replica's follow (proto/ps.proto): the job secret only (a
  // member's read, as a pull), then every part the core's VersionLog has
  // after the request's version and each new one, until the caller cancels
  // or the server shuts down (UNAVAILABLE); an `idle` message after
  // kFollowIdle without a part. A thread per follower.
  grpc::Status FollowVersions(grpc::ServerContext* context, const FollowVersionsRequest* request,
                              grpc::ServerWriter<VersionPart>* writer) override;
  static constexpr absl::Duration kFollowIdle = absl::Seconds(2);

  // The token control RPCs must carry; 0 refuses every control RPC. Wakes
  // the control RPCs that wait for it (await_control_token).
  void set_control_token(uint64_t token);
  // The server is registering with a scheduler: until set_control_token
  // (at most `timeout`), a control RPC without a token to check against
  // waits for it instead of being refused. The scheduler may send its first
  // Control before the server has read the token from Register's answer.
  void await_control_token(absl::Duration timeout);
  // Control RPCs waiting for the token now (tests poll it).
  int control_calls_awaiting_token() const;

  // For the data path's calls (ps_service.cc).
  ParameterServerCore* core() const { return core_; }
  // A pull waits for its clock on a thread of its own (false: max_waiting()
  // pulls wait already; the pull is refused with RESOURCE_EXHAUSTED) ...
  bool TryBeginWait();
  void EndWait();  // ... and has called Finish.
  // At most 4 per worker (prefetch keeps at most two in flight) + 16.
  int max_waiting() const { return max_waiting_; }
  // A pull answer of `bytes` is handed to gRPC (false: the answers not yet
  // sent would exceed max_unsent_answer_bytes; the pull is refused) ...
  bool TryReserveAnswer(size_t bytes);
  // ... and its Finish has completed.
  void ReleaseAnswer(size_t bytes);
  uint64_t max_unsent_answer_bytes() const { return max_unsent_answer_bytes_; }
  uint64_t unsent_answer_bytes() const {
    return unsent_answer_bytes_.load(std::memory_order_relaxed);
  }
  absl::Duration answer_send_timeout() const { return answer_send_timeout_; }

 private:
  // OK if `token` is this server's control token; else PERMISSION_DENIED
  // naming the RPC and the caller.
  absl::Status CheckControl(const char* rpc, uint64_t token,
                            const grpc::ServerContext* context) const;

  ParameterServerCore* const core_;  // Not owned.
  const int max_waiting_;
  const uint64_t max_unsent_answer_bytes_;
  const absl::Duration answer_send_timeout_;
  std::atomic<uint64_t> control_token_{0};
  std::atomic<uint64_t> unsent_answer_bytes_{0};
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::thread> threads_;
  mutable Mutex mu_;
  CondVar waits_done_;
  mutable CondVar token_set_;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time await_token_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  mutable int awaiting_token_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PS_SERVICE_H_
