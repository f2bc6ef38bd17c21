// JobCoordinator: construction, failure detection, checkpoint requests, the
// job's status, registration and heartbeats (job.h). The workers' requests
// are in job_workers.cc.
#include "scheduler/job.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/checkpoint_guard.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

}  // namespace

JobCoordinator::JobCoordinator(JobConfig config, ServerNotifier notifier, ServerOps* ops)
    : config_(std::move(config)),
      fingerprint_(ConfigFingerprint(config_)),
      start_time_(absl::Now()),
      checkpoints_on_(!config_.checkpoint().dir().empty()),
      members_(config_, fingerprint_),
      clock_(config_.cluster().num_workers(), EffectiveStaleness(config_.cluster()) == UINT32_MAX
                                                  ? ClockService::kUnbounded
                                                  : EffectiveStaleness(config_.cluster())),
      state_(config_, &members_, &clock_, std::move(notifier), start_time_),
      control_(config_, &state_, &members_, &clock_, ops, start_time_) {
  // No step starts before the job has formed (the control thread unpauses).
  clock_.SetPaused(true);
}

JobCoordinator::~JobCoordinator() {
  stop_ = true;
  state_.WakeWaiters();
  clock_.Abort("the scheduler is shutting down");
  if (sweeper_.joinable()) sweeper_.join();
  control_.Stop();
}

void JobCoordinator::Start() {
  control_.Start();
  sweeper_ = std::thread([this] {
    const absl::Duration period = Ms(std::max(1u, config_.cluster().heartbeat_ms() / 2));
    while (!stop_) {
      absl::SleepFor(period);
      Sweep(absl::Now());
    }
  });
}

uint64_t JobCoordinator::generation() const { return state_.generation(); }

void JobCoordinator::RequestCheckpoint() { state_.RequestCut(); }

absl::StatusOr<uint64_t> JobCoordinator::CheckpointNow(absl::Time deadline) {
  if (!checkpoints_on_) {
    return absl::FailedPreconditionError(
        "checkpoints are off for this job (set checkpoint.dir in the job config)");
  }
  return state_.WaitCut(state_.RequestCut(), deadline);
}

absl::StatusOr<ReshardResponse> JobCoordinator::Reshard(uint32_t servers, absl::Time deadline) {
  const ClusterConfig& k = config_.cluster();
  if (servers == 0 || servers > k.max_servers()) {
    return absl::InvalidArgumentError(absl::StrCat("reshard: ", servers,
                                                   " servers; the job may run on 1 to ",
                                                   k.max_servers(), " (cluster.max_servers)"));
  }
  if (!checkpoints_on_) {
    return absl::FailedPreconditionError(
        "reshard: a move restores partitions from a cut, and checkpoints are off for this job "
        "(set checkpoint.dir in the job config)");
  }
  ASSIGN_OR_RETURN(const PartitionMove::Answer answer,
                   state_.WaitMove(state_.RequestMove(servers), servers, deadline));
  ReshardResponse response;
  response.set_clock(answer.clock);
  response.set_map_version(members_.MapVersion());
  response.set_partitions_moved(answer.moved);
  return response;
}

std::vector<uint64_t> JobCoordinator::Checkpoints() const { return state_.CheckpointsWritten(); }

absl::Status JobCoordinator::CheckCheckpointDir() {
  if (!checkpoints_on_) return absl::OkStatus();
  const std::string& root = config_.checkpoint().dir();
  absl::Status st = ProbeCheckpointDir(root);
  if (st.ok()) st = state_.LoadEvaluations();  // The persisted evaluations.
  if (st.ok()) return st;
  st = absl::Status(st.code(),
                    absl::StrCat("checkpoint.dir ", root, " is unusable: ", st.message()));
  state_.Fail(std::string(st.message()));
  return st;
}

void JobCoordinator::Sweep(absl::Time now) {
  const std::vector<Member> died = members_.Sweep(now, Ms(config_.cluster().dead_after_ms()));
  if (state_.MembersSwept(died, now)) state_.Notify();
}

absl::Status JobCoordinator::WaitDone(absl::Time deadline) { return state_.WaitEnded(deadline); }

void JobCoordinator::JobStatus(JobStatusResponse* response) const {
  const absl::Time now = absl::Now();
  const std::vector<uint64_t> clocks = clock_.Clocks();
  // Members of the map and spares alike (a spare has registered, so it has
  // a state and a heartbeat; it is a server, so it has no clock).
  auto fill = [&](const Member& m, MemberStatus* s) {
    s->set_role(m.role);
    s->set_index(m.index);
    s->set_address(m.address);
    s->set_state(m.state);
    s->set_reason(m.reason);
    s->set_restarts(m.registrations > 1 ? m.registrations - 1 : 0);
    if (m.role == WORKER) s->set_clock(clocks[m.index]);
    if (m.state != STATE_UNSPECIFIED) {
      s->set_last_heartbeat_age_sec(absl::ToDoubleSeconds(now - m.last_heartbeat));
    }
  };
  for (const Member& m : members_.Members()) fill(m, response->add_members());
  for (const Member& m : members_.Spares()) fill(m, response->add_spares());
  response->set_job_name(config_.name());
  response->set_min_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  response->set_max_clock(clock_.MaxClock());
  response->set_max_spread(clock_.MaxSpread());
  response->set_elapsed_sec(absl::ToDoubleSeconds(now - start_time_));
  response->set_map_version(members_.MapVersion());
  response->set_map_servers(members_.MapServers());
  state_.FillStatus(response);
}

absl::Status JobCoordinator::Register(const RegisterRequest& request, RegisterResponse* response) {
  if (request.has_rejoin() && !request.has_requested_index()) {
    return absl::InvalidArgumentError("rejoin: requested_index is required");
  }
  if (request.role() == WORKER && request.rejoin().has_last_report()) {
    // The report a rejoining worker carries is judged as a live one would be.
    const Rejoin& r = request.rejoin();
    uint64_t max_step = r.clock();
    if (r.has_granted_step() && r.granted_step() < UINT64_MAX) {
      max_step = std::max(max_step, r.granted_step() + 1);
    }
    RETURN_IF_ERROR(ValidateReport(r.last_report(), max_step));
  }
  const absl::Time now = absl::Now();
  if (request.role() == SERVER && request.rejoin().partition_owner_size() > 0) {
    RETURN_IF_ERROR(AdoptRejoinedMap(request));
  }
  auto reg = members_.Register(request, now);
  if (!reg.ok()) {
    LOG_EVERY_N(WARNING, 20) << "refused registration: " << reg.status();
    return reg.status();
  }
  const Member& m = reg->member;
  response->set_index(m.index);
  response->set_job_id(fingerprint_);
  if (auto map = members_.Map()) *response->mutable_map() = *map;
  if (request.role() == WORKER) {
    response->mutable_shard()->set_worker_rank(m.index);
    response->mutable_shard()->set_num_workers(config_.cluster().num_workers());
  }
  if (reg->repeat) return absl::OkStatus();
  if (reg->spare) {  // Outside the map: nothing waits for it, nothing recovers it.
    LOG(INFO) << "server " << m.index << " registered at " << m.address
              << " as a spare (cluster.max_servers): it owns no partitions until a move";
    state_.SpareRegistered(request, m.index);
    return absl::OkStatus();
  }
  if (state_.Admit(request, *reg, now)) state_.Notify();
  return absl::OkStatus();
}

absl::Status JobCoordinator::AdoptRejoinedMap(const RegisterRequest& request) {
  const Rejoin& r = request.rejoin();
  const std::vector<uint32_t> owner(r.partition_owner().begin(), r.partition_owner().end());
  absl::StatusOr<bool> adopted = state_.AdoptRejoinedOwners(r.owner_map_version(), owner);
  if (!adopted.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("rejoin of server ", request.requested_index(),
                                                   ": ", adopted.status().message()));
  }
  if (*adopted) {
    LOG(INFO) << "server " << request.requested_index() << " rejoined holding map version "
              << r.owner_map_version() << " on " << members_.MapServers()
              << " servers: the job goes on with its owners";
  }
  return absl::OkStatus();
}

absl::Status JobCoordinator::Heartbeat(const HeartbeatRequest& request,
                                       HeartbeatResponse* response) {
  if (request.job_id() != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "heartbeat: ", RoleName(request.role()), " ", request.index(), " names job ",
        absl::Hex(request.job_id(), absl::kZeroPad16), "; this scheduler runs job ",
        absl::Hex(fingerprint_, absl::kZeroPad16), " (RegisterResponse.job_id); refused"));
  }
  auto verdict =
      members_.Heartbeat(request.role(), request.index(), request.incarnation(), absl::Now());
  if (!verdict.ok()) return verdict.status();
  response->set_map_version(members_.MapVersion());
  state_.AnswerHeartbeat(response);
  if (*verdict == HeartbeatVerdict::kRejoin) response->set_rejoin(true);
  if (*verdict == HeartbeatVerdict::kReplaced) {
    return absl::FailedPreconditionError(
        absl::StrCat(RoleName(request.role()), " ", request.index(),
                     " was replaced by a newer process (another incarnation holds the slot)"));
  }
  return absl::OkStatus();
}

}  // namespace shardps
