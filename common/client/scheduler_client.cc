#include "common/client/scheduler_client.h"

#include <grpcpp/grpcpp.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/job_secret.h"
#include "common/tls.h"
#include "glog/logging.h"

namespace shardps {
namespace {

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

std::shared_ptr<grpc::Channel> SchedulerChannel(const std::string& address) {
  grpc::ChannelArguments args;
  ConfigureChannel(&args);  // Reconnects within a second (common/tls.h).
  return CreateJobChannel(address, ChannelCredentialsFromFlagsOrDie(), args);
}

uint64_t NewIncarnation() {
  std::random_device device;
  std::mt19937_64 rng((uint64_t{device()} << 32) ^ device() ^
                      static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
  uint64_t v = 0;
  while (v == 0) v = rng();
  return v;
}

}  // namespace

SchedulerClient::SchedulerClient(const std::string& address)
    : stub_(Scheduler::NewStub(SchedulerChannel(address))), incarnation_(NewIncarnation()) {}

void SchedulerClient::EnableRejoin(RegisterRequest base, std::function<uint64_t()> map_version,
                                   std::function<uint64_t()> generation,
                                   std::function<void(const RegisterResponse&)> on_rejoined,
                                   std::function<void(Rejoin*)> add_state) {
  MutexLock lock(&mu_);
  add_rejoin_state_ = std::move(add_state);
  rejoin_base_ = std::move(base);
  on_rejoined_ = std::move(on_rejoined);
  map_version_ = std::move(map_version);
  generation_source_ = std::move(generation);
}

void SchedulerClient::NoteStart(uint64_t generation, uint64_t clock, const std::string& position) {
  generation_ = generation;
  MutexLock lock(&mu_);
  acked_clock_ = clock;
  acked_position_ = position;
  granted_.reset();
  finished_ = false;
  last_report_.reset();
}

absl::Status SchedulerClient::Retrying(const char* what,
                                       const std::function<absl::Status()>& call) {
  const absl::Time give_up = absl::Now() + unreachable_budget_;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    const absl::Status st = call();
    if (!absl::IsUnavailable(st) || absl::Now() + backoff > give_up || stop_) return st;
    LOG_EVERY_N(WARNING, 20) << what << ": " << st << "; retrying";
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::Status SchedulerClient::RejoinNow() {
  RegisterRequest request;
  std::function<void(const RegisterResponse&)> on_rejoined;
  {
    MutexLock lock(&mu_);
    if (!rejoin_base_) return absl::OkStatus();
    request = *rejoin_base_;
    request.set_incarnation(incarnation_);
    Rejoin* r = request.mutable_rejoin();
    r->set_clock(acked_clock_);
    r->set_position(acked_position_);
    if (granted_) r->set_granted_step(*granted_);
    r->set_map_version(std::max(map_version_seen_, map_version_ ? map_version_() : 0));
    r->set_generation(generation_source_ ? generation_source_() : generation_.load());
    r->set_finished(finished_);
    if (last_report_) *r->mutable_last_report() = *last_report_;
    if (add_rejoin_state_) add_rejoin_state_(r);
    on_rejoined = on_rejoined_;
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(5));
  RegisterResponse response;
  const absl::Status st = FromGrpcStatus(stub_->Register(&ctx, request, &response));
  if (st.ok()) {
    LOG(INFO) << "rejoined the scheduler at clock " << request.rejoin().clock() << " (generation "
              << request.rejoin().generation() << ", map version " << request.rejoin().map_version()
              << ")";
    if (on_rejoined) on_rejoined(response);
  } else {
    LOG(WARNING) << "rejoining the scheduler: " << st;
  }
  return st;
}

SchedulerClient::~SchedulerClient() {
  stop_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

absl::StatusOr<RegisterResponse> SchedulerClient::Register(const RegisterRequest& original,
                                                           absl::Duration timeout) {
  RegisterRequest request = original;
  if (request.incarnation() == 0) request.set_incarnation(incarnation_);
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    RegisterResponse response;
    const absl::Status st = FromGrpcStatus(stub_->Register(&ctx, request, &response));
    if (st.ok()) {
      MutexLock lock(&mu_);
      map_version_seen_ = std::max(map_version_seen_, response.map().version());
      return response;
    }
    const bool retry =
        absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) || absl::IsAlreadyExists(st);
    if (!retry || absl::Now() + backoff > deadline) return st;
    LOG_EVERY_N(INFO, 10) << "registering with the scheduler: " << st << "; retrying";
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

void SchedulerClient::StartHeartbeats(
    Role role, uint32_t index, uint64_t job_id, absl::Duration period, absl::Duration give_up_after,
    std::function<void(bool job_ended, const std::string& reason)> on_stop) {
  heartbeat_ = std::thread([=] {
    absl::Time last_ok = absl::Now();
    while (!stop_) {
      HeartbeatRequest request;
      request.set_role(role);
      request.set_index(index);
      request.set_job_id(job_id);
      request.set_incarnation(incarnation_);
      grpc::ClientContext ctx;
      SetDeadline(&ctx, period * 2);
      HeartbeatResponse response;
      const absl::Status st = FromGrpcStatus(stub_->Heartbeat(&ctx, request, &response));
      if (st.ok() && response.stop()) {
        job_ended_ = true;
        on_stop(true,
                response.failure().empty()
                    ? "the scheduler says the job is done"
                    : absl::StrCat("the scheduler says the job failed: ", response.failure()));
        return;
      }
      if (st.ok()) {
        uint64_t seen = scheduler_generation_.load();
        while (response.generation() > seen &&
               !scheduler_generation_.compare_exchange_weak(seen, response.generation())) {
        }
      }
      // NOT_FOUND: a scheduler of an older version that does not know us.
      if ((st.ok() && response.rejoin()) || absl::IsNotFound(st)) {
        const absl::Status rejoined = RejoinNow();
        if (absl::IsFailedPrecondition(rejoined) || absl::IsAlreadyExists(rejoined) ||
            absl::IsInvalidArgument(rejoined)) {
          on_stop(false,
                  absl::StrCat("the scheduler refused this process back: ", rejoined.message()));
          return;
        }
      }
      if (absl::IsFailedPrecondition(st)) {
        on_stop(false, absl::StrCat("the scheduler no longer knows this process: ", st.message()));
        return;
      }
      if (st.ok()) {
        last_ok = absl::Now();
      } else if (absl::Now() - last_ok > give_up_after) {
        on_stop(false, absl::StrCat("the scheduler was unreachable for ",
                                    absl::FormatDuration(give_up_after), ": ", st.message()));
        return;
      }
      for (absl::Duration slept; slept < period && !stop_; slept += absl::Milliseconds(50)) {
        absl::SleepFor(absl::Milliseconds(50));
      }
    }
  });
}

absl::StatusOr<PartitionMapProto> SchedulerClient::GetPartitionMap(uint64_t min_version,
                                                                   absl::Duration timeout) {
  GetPartitionMapRequest request;
  request.set_min_version(min_version);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  PartitionMapProto map;
  const absl::Status st = Retrying("getting the partition map", [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout + absl::Seconds(5));
    return FromGrpcStatus(stub_->GetPartitionMap(&ctx, request, &map));
  });
  if (!st.ok()) return st;
  MutexLock lock(&mu_);
  map_version_seen_ = std::max(map_version_seen_, map.version());
  return map;
}

absl::StatusOr<WaitStartResponse> SchedulerClient::WaitStart(
    uint32_t rank, std::optional<uint64_t> after_generation, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Time next_log = absl::Now() + absl::Seconds(60);
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    WaitStartResponse response;
    if (job_ended_) {
      response.set_job_ended(true);
      return response;
    }
    WaitStartRequest request;
    request.set_rank(rank);
    request.set_incarnation(incarnation_);
    if (after_generation) request.set_after_generation(*after_generation);
    const absl::Duration slice = std::min(absl::Seconds(10), deadline - absl::Now());
    request.set_timeout_ms(
        static_cast<uint32_t>(std::max<int64_t>(1, absl::ToInt64Milliseconds(slice))));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, slice + absl::Seconds(5));
    const absl::Status st = FromGrpcStatus(stub_->WaitStart(&ctx, request, &response));
    if (st.ok()) {
      MutexLock lock(&mu_);
      map_version_seen_ = std::max(map_version_seen_, response.map().version());
      return response;
    }
    if (!absl::IsDeadlineExceeded(st) && !absl::IsUnavailable(st)) return st;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no start point from the scheduler within ",
                                                      absl::FormatDuration(timeout), ": ",
                                                      st.message()));
    }
    if (absl::Now() >= next_log) {
      LOG(INFO) << "still waiting for the scheduler: " << st.message();
      next_log = absl::Now() + absl::Seconds(60);
    }
    if (absl::IsUnavailable(st)) {
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(1));
    }
  }
}

absl::Status SchedulerClient::WaitClock(uint32_t rank, uint64_t step, absl::Duration timeout) {
  WaitClockRequest request;
  request.set_rank(rank);
  request.set_step(step);
  request.set_generation(generation_);
  request.set_incarnation(incarnation_);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  WaitClockResponse response;
  auto call = [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout + absl::Seconds(5));
    return FromGrpcStatus(stub_->WaitClock(&ctx, request, &response));
  };
  // A probe (timeout 0) answers now, whatever the scheduler's state.
  const absl::Status st =
      timeout == absl::ZeroDuration() ? call() : Retrying("waiting for the clock", call);
  if (st.ok()) {
    MutexLock lock(&mu_);
    granted_ = std::max(granted_.value_or(0), step);
    min_clock_ = {request.generation(), response.min_clock()};
  }
  return st;
}

absl::Status SchedulerClient::RequestRollBack(uint32_t rank, uint64_t clock,
                                              const std::string& cause) {
  RollBackRequest request;
  request.set_rank(rank);
  request.set_clock(clock);
  request.set_generation(generation_);
  request.set_incarnation(incarnation_);
  request.set_cause(cause);
  RollBackResponse response;
  return Retrying("asking for a rollback", [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    return FromGrpcStatus(stub_->RollBack(&ctx, request, &response));
  });
}

absl::Status SchedulerClient::Tick(uint32_t rank, uint64_t clock, const std::string& position,
                                   uint64_t samples) {
  TickRequest request;
  request.set_rank(rank);
  request.set_clock(clock);
  request.set_position(position);
  request.set_samples(samples);
  request.set_generation(generation_);
  request.set_incarnation(incarnation_);
  TickResponse response;
  const absl::Status st = Retrying("ticking the clock", [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    return FromGrpcStatus(stub_->Tick(&ctx, request, &response));
  });
  if (st.ok()) {
    MutexLock lock(&mu_);
    acked_clock_ = clock;
    acked_position_ = position;
    min_clock_ = {request.generation(), response.min_clock()};
  }
  return st;
}

std::optional<uint64_t> SchedulerClient::min_clock() const {
  MutexLock lock(&mu_);
  if (!min_clock_ || min_clock_->first != generation_) return std::nullopt;
  return min_clock_->second;
}

absl::Status SchedulerClient::Barrier(const std::string& name, uint32_t rank,
                                      absl::Duration timeout, std::optional<uint32_t>* adopt) {
  BarrierRequest request;
  request.set_name(name);
  request.set_role(WORKER);
  request.set_index(rank);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  request.set_generation(generation_);
  request.set_incarnation(incarnation_);
  return Retrying("waiting at a barrier", [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout + absl::Seconds(5));
    BarrierResponse response;
    const absl::Status st = FromGrpcStatus(stub_->Barrier(&ctx, request, &response));
    if (adopt != nullptr && st.ok() && response.has_adopt_rank()) {
      *adopt = response.adopt_rank();
    }
    return st;
  });
}

absl::Status SchedulerClient::ReportMetrics(const MetricsReport& original) {
  MetricsReport report = original;
  if (report.generation() == 0) report.set_generation(generation_);
  report.set_incarnation(incarnation_);
  const absl::Status st = Retrying("reporting metrics", [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    MetricsAck ack;
    return FromGrpcStatus(stub_->ReportMetrics(&ctx, report, &ack));
  });
  if (st.ok()) {
    MutexLock lock(&mu_);
    if (report.done()) finished_ = true;
    last_report_ = report;
  }
  return st;
}

absl::StatusOr<JobStatusResponse> SchedulerClient::JobStatus() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  JobStatusResponse response;
  const absl::Status st = FromGrpcStatus(stub_->JobStatus(&ctx, JobStatusRequest(), &response));
  if (!st.ok()) return st;
  return response;
}

absl::StatusOr<EvaluationResponse> SchedulerClient::Evaluation(EvaluationRequest request,
                                                               absl::Duration timeout) {
  request.set_incarnation(incarnation_);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  EvaluationResponse response;
  const absl::Status st = Retrying("asking for an evaluation", [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout + absl::Seconds(10));
    response.Clear();
    return FromGrpcStatus(stub_->Evaluation(&ctx, request, &response));
  });
  if (!st.ok()) return st;
  return response;
}

absl::StatusOr<uint64_t> SchedulerClient::CheckpointNow(absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout + absl::Seconds(10));
  CheckpointNowRequest request;
  request.set_timeout_ms(
      static_cast<uint32_t>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout))));
  CheckpointNowResponse response;
  const absl::Status st = FromGrpcStatus(stub_->CheckpointNow(&ctx, request, &response));
  if (!st.ok()) return st;
  return response.clock();
}

absl::StatusOr<ReshardResponse> SchedulerClient::Reshard(uint32_t servers, absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout + absl::Seconds(10));
  ReshardRequest request;
  request.set_servers(servers);
  request.set_timeout_ms(
      static_cast<uint32_t>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout))));
  ReshardResponse response;
  const absl::Status st = FromGrpcStatus(stub_->Reshard(&ctx, request, &response));
  if (!st.ok()) return st;
  return response;
}

}  // namespace shardps
