// JobCoordinator: registration, rejoins and heartbeats (job.h).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/generation.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/job.h"

namespace shardps {
namespace {

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

}  // namespace

void JobCoordinator::ApplyRejoinLocked(const RegisterRequest& request, uint32_t index) {
  const Rejoin& r = request.rejoin();
  if (request.role() != WORKER) return;
  clock_.Revive(index, r.clock());
  if (r.has_granted_step()) clock_.NoteGranted(r.granted_step(), index);
  positions_[index] = {r.clock(), r.position()};
  if (r.has_last_report()) reports_[index] = r.last_report();
  if (r.finished()) {
    members_.MarkFinished(index, absl::Now());
    clock_.MarkFinished(index);
    final_[index] = r.has_last_report() && r.last_report().final();
  }
}

RecoveryBook::Pending& JobCoordinator::PendLocked(const std::string& cause, absl::Time failed_at,
                                                  absl::Time now) {
  RecoveryBook::Pending& pending = recovery_.Pend(cause, failed_at, now);
  clock_.SetPaused(true);
  changed_.SignalAll();
  return pending;
}

void JobCoordinator::ServerFailedLocked(uint32_t index, const std::string& cause,
                                        absl::Time failed_at, absl::Time now, bool lost) {
  RecoveryBook::Pending& p = PendLocked(cause, failed_at, now);
  (lost ? p.lost : p.silent).insert(index);
  if (lost) p.silent.erase(index);
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
  bool notify;
  {
    MutexLock lock(&mu_);
    notify = AdmitLocked(request, *reg, now);
    UpdateStateLocked();
    changed_.SignalAll();
  }
  if (notify) NotifyServers();
  return absl::OkStatus();
}

bool JobCoordinator::AdmitLocked(const RegisterRequest& request, const Registration& reg,
                                 absl::Time now) {
  const Member& m = reg.member;
  const std::string who = absl::StrCat(RoleName(request.role()), " ", m.index);
  bool notify = request.role() == SERVER;
  if (request.has_rejoin()) {
    const Rejoin& r = request.rejoin();
    members_.RaiseMapVersionAbove(r.map_version());
    LOG(INFO) << who << " rejoined (generation " << r.generation() << ", clock " << r.clock()
              << ", map version " << r.map_version() << ")";
    if (!formed_) {
      // A process of an earlier scheduler: this one takes its job over.
      takeover_.Rejoined(request.role(), m.index, r);
      ApplyRejoinLocked(request, m.index);
    } else if (request.role() == SERVER) {
      if (reg.new_process || r.generation() != generation_) {
        ServerFailedLocked(m.index, absl::StrCat(who, " came back with another state"),
                           reg.previous_heartbeat, now, /*lost=*/true);
      } else if (recovery_.pending() && recovery_.pending()->silent.erase(m.index) > 0) {
        LOG(INFO) << who << " was declared dead and came back with its state";
      }
    } else if (r.generation() == generation_) {  // A worker that was silent.
      ApplyRejoinLocked(request, m.index);
      notify = true;
    } else {  // It rewinds itself (WaitStart) from its slot's clock.
      clock_.Revive(m.index, clock_.Clocks()[m.index]);
      notify = true;
    }
  } else if (!formed_) {
    takeover_.Fresh(request.role(), m.index);
    LOG(INFO) << who << " registered" << (m.address.empty() ? "" : " at ") << m.address;
  } else if (request.role() == SERVER) {
    LOG(INFO) << who << " registered at " << m.address << " (a new process)";
    if (reg.previous_state != STATE_UNSPECIFIED) {
      ServerFailedLocked(m.index,
                         absl::StrCat(who, " restarted (a new process at ", m.address, ")"),
                         reg.previous_heartbeat, now, /*lost=*/true);
    }
  } else {
    // A restarted worker: it resumes at its last acknowledged clock from
    // the data position it recorded there (WaitStart).
    LOG(INFO) << who << " registered"
              << (reg.previous_state == STATE_UNSPECIFIED ? ""
                                                          : " (restarted: takes its rank back)");
    clock_.Revive(m.index, clock_.Clocks()[m.index]);
    notify = true;
  }
  return notify;
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
  MutexLock lock(&mu_);
  response->set_generation(generation_);
  response->set_stop(Ended());
  if (state_ == State::kFailed) response->set_failure(failure_);
  if (*verdict == HeartbeatVerdict::kRejoin) response->set_rejoin(true);
  if (*verdict == HeartbeatVerdict::kReplaced) {
    return absl::FailedPreconditionError(
        absl::StrCat(RoleName(request.role()), " ", request.index(),
                     " was replaced by a newer process (another incarnation holds the slot)"));
  }
  return absl::OkStatus();
}

}  // namespace shardps
