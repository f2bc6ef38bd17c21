// The scheduler's gRPC service: a thin shell over JobCoordinator. Each method
// validates nothing beyond what the core does, calls it, and converts the
// absl::Status to a grpc::Status once (common/grpc_status.h).
//
// Servers get the scheduler's control token in their RegisterResponse; the
// scheduler's control RPCs to them (Control here, Checkpoint and Restore in
// checkpoint_client.h) carry it, and the servers refuse such RPCs without it
// (docs/security.md).
//
// ServerNotifierClient pushes the active-worker set and partition map to the
// servers (ParameterServer.Control) from its own thread, coalescing bursts,
// so no RPC handler waits on a server.
#ifndef SHARDPS_SCHEDULER_SCHEDULER_SERVICE_H_
#define SHARDPS_SCHEDULER_SCHEDULER_SERVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/job.h"

namespace shardps {

class SchedulerService final : public Scheduler::Service {
 public:
  // `operator_names`: the certificate common names CheckpointNow accepts
  // with TLS (empty: any member); without TLS it accepts loopback callers
  // only (common/tls.h CheckOperator).
  SchedulerService(JobCoordinator* job, uint64_t control_token,
                   std::vector<std::string> operator_names = {})
      : job_(job), control_token_(control_token), operator_names_(std::move(operator_names)) {}

  grpc::Status Register(grpc::ServerContext*, const RegisterRequest* request,
                        RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override;
  grpc::Status WaitStart(grpc::ServerContext*, const WaitStartRequest* request,
                         WaitStartResponse* response) override;
  grpc::Status GetPartitionMap(grpc::ServerContext*, const GetPartitionMapRequest* request,
                               PartitionMapProto* response) override;
  grpc::Status WaitClock(grpc::ServerContext*, const WaitClockRequest* request,
                         WaitClockResponse* response) override;
  grpc::Status Tick(grpc::ServerContext*, const TickRequest* request,
                    TickResponse* response) override;
  grpc::Status Barrier(grpc::ServerContext*, const BarrierRequest* request,
                       BarrierResponse* response) override;
  grpc::Status ReportMetrics(grpc::ServerContext*, const MetricsReport* request,
                             MetricsAck* response) override;
  grpc::Status JobStatus(grpc::ServerContext*, const JobStatusRequest* request,
                         JobStatusResponse* response) override;
  grpc::Status CheckpointNow(grpc::ServerContext*, const CheckpointNowRequest* request,
                             CheckpointNowResponse* response) override;
  // Authorised as CheckpointNow.
  grpc::Status Reshard(grpc::ServerContext*, const ReshardRequest* request,
                       ReshardResponse* response) override;
  grpc::Status Evaluation(grpc::ServerContext*, const EvaluationRequest* request,
                          EvaluationResponse* response) override;
  grpc::Status RollBack(grpc::ServerContext*, const RollBackRequest* request,
                        RollBackResponse* response) override;

 private:
  JobCoordinator* const job_;  // Not owned.
  const uint64_t control_token_;
  const std::vector<std::string> operator_names_;
};

// A random, non-zero control token (from the OS's random source).
uint64_t NewControlToken();

// Sends ControlRequests to every server of the latest map. Thread-safe.
class ServerNotifierClient {
 public:
  explicit ServerNotifierClient(uint64_t control_token);
  ~ServerNotifierClient();
  ServerNotifierClient(const ServerNotifierClient&) = delete;
  ServerNotifierClient& operator=(const ServerNotifierClient&) = delete;

  // Queues a notification; a newer one replaces a pending older one.
  void Notify(const PartitionMapProto& map, const std::vector<uint32_t>& active);

 private:
  void Loop();

  const uint64_t control_token_;
  Mutex mu_;
  CondVar wake_;
  std::optional<ControlRequest> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_SCHEDULER_SERVICE_H_
