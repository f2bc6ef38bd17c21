#include "scheduler/scheduler_service.h"

#include <grpcpp/grpcpp.h>

#include <random>

#include "absl/time/clock.h"
#include "common/client/ps_channel.h"
#include "common/grpc_status.h"
#include "common/job_secret.h"
#include "common/tls.h"
#include "glog/logging.h"

namespace shardps {

uint64_t NewControlToken() {
  std::random_device device;
  uint64_t token = 0;
  while (token == 0) token = (uint64_t{device()} << 32) | device();
  return token;
}

grpc::Status SchedulerService::Register(grpc::ServerContext* context,
                                        const RegisterRequest* request,
                                        RegisterResponse* response) {
  if (absl::Status st = CheckJobSecret("Register", *context); !st.ok()) return ToGrpcStatus(st);
  const absl::Status st = job_->Register(*request, response);
  if (st.ok() && request->role() == SERVER) response->set_control_token(control_token_);
  return ToGrpcStatus(st);
}

grpc::Status SchedulerService::Heartbeat(grpc::ServerContext* context,
                                         const HeartbeatRequest* request,
                                         HeartbeatResponse* response) {
  if (absl::Status st = CheckJobSecret("Heartbeat", *context); !st.ok()) return ToGrpcStatus(st);
  return ToGrpcStatus(job_->Heartbeat(*request, response));
}

grpc::Status SchedulerService::WaitStart(grpc::ServerContext* context,
                                         const WaitStartRequest* request,
                                         WaitStartResponse* response) {
  if (absl::Status st = CheckJobSecret("WaitStart", *context); !st.ok()) return ToGrpcStatus(st);
  absl::Status st = job_->CheckSender("WaitStart", WORKER, request->rank(), request->incarnation());
  if (st.ok()) st = job_->WaitStart(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status SchedulerService::GetPartitionMap(grpc::ServerContext* context,
                                               const GetPartitionMapRequest* request,
                                               PartitionMapProto* response) {
  if (absl::Status st = CheckJobSecret("GetPartitionMap", *context); !st.ok())
    return ToGrpcStatus(st);
  return ToGrpcStatus(job_->GetPartitionMap(*request, response));
}

grpc::Status SchedulerService::WaitClock(grpc::ServerContext* context,
                                         const WaitClockRequest* request,
                                         WaitClockResponse* response) {
  if (absl::Status st = CheckJobSecret("WaitClock", *context); !st.ok()) return ToGrpcStatus(st);
  absl::Status st = job_->CheckSender("WaitClock", WORKER, request->rank(), request->incarnation());
  if (st.ok()) st = job_->WaitClock(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status SchedulerService::Tick(grpc::ServerContext* context, const TickRequest* request,
                                    TickResponse* response) {
  if (absl::Status st = CheckJobSecret("Tick", *context); !st.ok()) return ToGrpcStatus(st);
  absl::Status st = job_->CheckSender("Tick", WORKER, request->rank(), request->incarnation());
  if (st.ok()) st = job_->Tick(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status SchedulerService::Barrier(grpc::ServerContext* context, const BarrierRequest* request,
                                       BarrierResponse* response) {
  if (absl::Status st = CheckJobSecret("Barrier", *context); !st.ok()) return ToGrpcStatus(st);
  absl::Status st =
      job_->CheckSender("Barrier", request->role(), request->index(), request->incarnation());
  if (st.ok()) st = job_->Barrier(*request, response);
  return ToGrpcStatus(st);
}

grpc::Status SchedulerService::ReportMetrics(grpc::ServerContext* context,
                                             const MetricsReport* request, MetricsAck*) {
  if (absl::Status st = CheckJobSecret("ReportMetrics", *context); !st.ok())
    return ToGrpcStatus(st);
  absl::Status st = job_->CheckSender("metrics", WORKER, request->rank(), request->incarnation());
  if (st.ok()) st = job_->ReportMetrics(*request);
  return ToGrpcStatus(st);
}

grpc::Status SchedulerService::JobStatus(grpc::ServerContext* context, const JobStatusRequest*,
                                         JobStatusResponse* response) {
  if (absl::Status st = CheckJobSecret("JobStatus", *context); !st.ok()) return ToGrpcStatus(st);
  job_->JobStatus(response);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::CheckpointNow(grpc::ServerContext* context,
                                             const CheckpointNowRequest* request,
                                             CheckpointNowResponse* response) {
  if (absl::Status st = CheckJobSecret("CheckpointNow", *context); !st.ok())
    return ToGrpcStatus(st);
  if (absl::Status st = CheckOperator("CheckpointNow", *context, operator_names_); !st.ok()) {
    LOG(WARNING) << st.message();
    return ToGrpcStatus(st);
  }
  const uint32_t ms = request->timeout_ms() == 0 ? 600000 : request->timeout_ms();
  LOG(INFO) << "checkpoint requested (ps_status --checkpoint)";
  auto clock = job_->CheckpointNow(absl::Now() + absl::Milliseconds(ms));
  if (!clock.ok()) return ToGrpcStatus(clock.status());
  response->set_clock(*clock);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Reshard(grpc::ServerContext* context, const ReshardRequest* request,
                                       ReshardResponse* response) {
  if (absl::Status st = CheckJobSecret("Reshard", *context); !st.ok()) return ToGrpcStatus(st);
  if (absl::Status st = CheckOperator("Reshard", *context, operator_names_); !st.ok()) {
    LOG(WARNING) << st.message();
    return ToGrpcStatus(st);
  }
  const uint32_t ms = request->timeout_ms() == 0 ? 600000 : request->timeout_ms();
  LOG(INFO) << "reshard to " << request->servers() << " servers requested (ps_status --servers)";
  auto moved = job_->Reshard(request->servers(), absl::Now() + absl::Milliseconds(ms));
  if (!moved.ok()) return ToGrpcStatus(moved.status());
  *response = *moved;
  return grpc::Status::OK;
}

grpc::Status SchedulerService::RollBack(grpc::ServerContext* context,
                                        const RollBackRequest* request, RollBackResponse*) {
  if (absl::Status st = CheckJobSecret("RollBack", *context); !st.ok()) return ToGrpcStatus(st);
  absl::Status st = job_->CheckSender("RollBack", WORKER, request->rank(), request->incarnation());
  if (st.ok()) st = job_->RequestRollBack(*request);
  return ToGrpcStatus(st);
}

grpc::Status SchedulerService::Evaluation(grpc::ServerContext* context,
                                          const EvaluationRequest* request,
                                          EvaluationResponse* response) {
  if (absl::Status st = CheckJobSecret("Evaluation", *context); !st.ok()) return ToGrpcStatus(st);
  absl::Status st =
      job_->CheckSender("Evaluation", WORKER, request->rank(), request->incarnation());
  if (st.ok()) st = job_->Evaluation(*request, response);
  return ToGrpcStatus(st);
}

ServerNotifierClient::ServerNotifierClient(uint64_t control_token)
    : control_token_(control_token), thread_([this] { Loop(); }) {}

ServerNotifierClient::~ServerNotifierClient() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    wake_.SignalAll();
  }
  thread_.join();
}

void ServerNotifierClient::Notify(const PartitionMapProto& map,
                                  const std::vector<uint32_t>& active) {
  ControlRequest request;
  request.set_map_version(map.version());
  request.set_control_token(control_token_);
  for (uint32_t owner : map.owner()) request.add_partition_owner(owner);
  for (uint32_t r : active) request.add_active_workers(r);
  MutexLock lock(&mu_);
  pending_ = std::move(request);
  addresses_.assign(map.server_addresses().begin(), map.server_addresses().end());
  wake_.SignalAll();
}

void ServerNotifierClient::Loop() {
  while (true) {
    ControlRequest request;
    std::vector<std::string> addresses;
    {
      MutexLock lock(&mu_);
      while (!stop_ && !pending_) wake_.Wait(&mu_);
      if (stop_) return;
      request = std::move(*pending_);
      pending_.reset();
      addresses = addresses_;
    }
    // A server that misses the notification (restarting, not serving yet)
    // gets it again, a few times, unless a newer one replaces it.
    for (int attempt = 0; attempt < 10 && !addresses.empty(); ++attempt) {
      std::vector<std::string> failed;
      for (const std::string& address : addresses) {
        auto stub = NewParameterServerStubOrDie(address);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
        ControlResponse response;
        const grpc::Status st = stub->Control(&ctx, request, &response);
        if (!st.ok()) {
          LOG(WARNING) << "Control to server " << address << " failed: " << st.error_message();
          failed.push_back(address);
        }
      }
      addresses = std::move(failed);
      MutexLock lock(&mu_);
      if (stop_ || pending_) break;
      if (!addresses.empty()) wake_.WaitUntil(&mu_, absl::Now() + absl::Milliseconds(500));
      if (stop_ || pending_) break;
    }
  }
}

}  // namespace shardps
