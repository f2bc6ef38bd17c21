#include "scheduler/client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "glog/logging.h"

namespace shardps {
namespace {

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

SchedulerClient::SchedulerClient(const std::string& address)
    : stub_(Scheduler::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

SchedulerClient::~SchedulerClient() {
  stop_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

absl::StatusOr<RegisterResponse> SchedulerClient::Register(
    const RegisterRequest& request, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    RegisterResponse response;
    const absl::Status st = FromGrpcStatus(stub_->Register(&ctx, request, &response));
    if (st.ok()) return response;
    const bool retry = absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) ||
                       absl::IsAlreadyExists(st);
    if (!retry || absl::Now() + backoff > deadline) return st;
    LOG_EVERY_N(INFO, 10) << "registering with the scheduler: " << st << "; retrying";
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

void SchedulerClient::StartHeartbeats(Role role, uint32_t index, uint64_t job_id,
                                      absl::Duration period,
                                      absl::Duration give_up_after,
                                      std::function<void(const std::string&)> on_stop) {
  heartbeat_ = std::thread([=] {
    absl::Time last_ok = absl::Now();
    while (!stop_) {
      HeartbeatRequest request;
      request.set_role(role);
      request.set_index(index);
      request.set_job_id(job_id);
      grpc::ClientContext ctx;
      SetDeadline(&ctx, period * 2);
      HeartbeatResponse response;
      const absl::Status st = FromGrpcStatus(stub_->Heartbeat(&ctx, request, &response));
      if (st.ok() && response.stop()) {
        on_stop("the scheduler says the job ended");
        return;
      }
      if (absl::IsFailedPrecondition(st) || absl::IsNotFound(st)) {
        on_stop(absl::StrCat("the scheduler no longer knows this process: ",
                             st.message()));
        return;
      }
      if (st.ok()) {
        last_ok = absl::Now();
      } else if (absl::Now() - last_ok > give_up_after) {
        on_stop(absl::StrCat("the scheduler was unreachable for ",
                             absl::FormatDuration(give_up_after), ": ", st.message()));
        return;
      }
      for (absl::Duration slept; slept < period && !stop_;
           slept += absl::Milliseconds(50)) {
        absl::SleepFor(absl::Milliseconds(50));
      }
    }
  });
}

absl::StatusOr<PartitionMapProto> SchedulerClient::GetPartitionMap(
    uint64_t min_version, absl::Duration timeout) {
  GetPartitionMapRequest request;
  request.set_min_version(min_version);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout + absl::Seconds(5));
  PartitionMapProto map;
  const absl::Status st = FromGrpcStatus(stub_->GetPartitionMap(&ctx, request, &map));
  if (!st.ok()) return st;
  return map;
}

absl::Status SchedulerClient::WaitClock(uint32_t rank, uint64_t step,
                                        absl::Duration timeout) {
  WaitClockRequest request;
  request.set_rank(rank);
  request.set_step(step);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout + absl::Seconds(5));
  WaitClockResponse response;
  return FromGrpcStatus(stub_->WaitClock(&ctx, request, &response));
}

absl::Status SchedulerClient::Tick(uint32_t rank, uint64_t clock,
                                   const std::string& position) {
  TickRequest request;
  request.set_rank(rank);
  request.set_clock(clock);
  request.set_position(position);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(30));
  TickResponse response;
  return FromGrpcStatus(stub_->Tick(&ctx, request, &response));
}

absl::Status SchedulerClient::Barrier(const std::string& name, uint32_t rank,
                                      absl::Duration timeout) {
  BarrierRequest request;
  request.set_name(name);
  request.set_role(WORKER);
  request.set_index(rank);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout + absl::Seconds(5));
  BarrierResponse response;
  return FromGrpcStatus(stub_->Barrier(&ctx, request, &response));
}

absl::Status SchedulerClient::ReportMetrics(const MetricsReport& report) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  MetricsAck ack;
  return FromGrpcStatus(stub_->ReportMetrics(&ctx, report, &ack));
}

absl::StatusOr<JobStatusResponse> SchedulerClient::JobStatus() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  JobStatusResponse response;
  const absl::Status st =
      FromGrpcStatus(stub_->JobStatus(&ctx, JobStatusRequest(), &response));
  if (!st.ok()) return st;
  return response;
}

}  // namespace shardps
