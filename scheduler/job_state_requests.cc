// JobState: the request side's transitions and waits (job_state.h):
// registrations, heartbeats, failure detection, the workers' calls, the
// requests for cuts and moves, and the job's status.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/generation.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/job_state.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

}  // namespace

// ---- Registrations, heartbeats, failure detection ----

absl::StatusOr<bool> JobState::AdoptRejoinedOwners(uint64_t map_version,
                                                   const std::vector<uint32_t>& owner) {
  MutexLock lock(&mu_);       // Formation reads the map under it.
  if (formed_) return false;  // This scheduler's map holds.
  return members_.AdoptOwners(map_version, owner);
}

void JobState::SpareRegistered(const RegisterRequest& request, uint32_t index) {
  MutexLock lock(&mu_);
  if (formed_) return;
  if (request.has_rejoin()) {
    takeover_.Rejoined(SERVER, index, request.rejoin());
  } else {
    takeover_.Fresh(SERVER, index);
  }
}

bool JobState::Admit(const RegisterRequest& request, const Registration& reg, absl::Time now) {
  MutexLock lock(&mu_);
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
    } else {
      notify |= AdmitRejoinLocked(request, reg, who, now);
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
  UpdateLocked();
  changed_.SignalAll();
  return notify;
}

bool JobState::AdmitRejoinLocked(const RegisterRequest& request, const Registration& reg,
                                 const std::string& who, absl::Time now) {
  const Rejoin& r = request.rejoin();
  const uint32_t index = reg.member.index;
  if (request.role() == SERVER) {
    if (reg.new_process || r.generation() != generation_) {
      ServerFailedLocked(index, absl::StrCat(who, " came back with another state"),
                         reg.previous_heartbeat, now, /*lost=*/true);
    } else if (recovery_.pending() && recovery_.pending()->silent.erase(index) > 0) {
      LOG(INFO) << who << " was declared dead and came back with its state";
    }
    return false;
  }
  if (r.generation() == generation_) {  // A worker that was silent.
    ApplyRejoinLocked(request, index);
  } else {  // It rewinds itself (WaitStart) from its slot's clock.
    clock_.Revive(index, clock_.Clocks()[index]);
  }
  return true;
}

void JobState::ApplyRejoinLocked(const RegisterRequest& request, uint32_t index) {
  const Rejoin& r = request.rejoin();
  if (request.role() != WORKER) return;
  clock_.Revive(index, r.clock());
  if (r.has_granted_step()) clock_.NoteGranted(r.granted_step(), index);
  workers_.Rejoined(index, r);
  if (r.finished()) {
    members_.MarkFinished(index, absl::Now());
    clock_.MarkFinished(index);
  }
}

void JobState::AnswerHeartbeat(HeartbeatResponse* response) const {
  MutexLock lock(&mu_);
  response->set_generation(generation_);
  response->set_stop(EndedLocked());
  if (phase_ == Phase::kFailed) response->set_failure(failure_);
}

bool JobState::MembersSwept(const std::vector<Member>& died, absl::Time now) {
  const ClusterConfig& k = config_.cluster();
  bool workers_changed = false;
  MutexLock lock(&mu_);
  for (const Member& m : died) {
    if (m.role == WORKER) {
      LOG(WARNING) << "worker " << m.index << " missed heartbeats: declared dead; "
                   << (loss_.LeavesClock() ? "it leaves the clock minimum"
                                           : "the clocks wait for it")
                   << " (cluster.on_worker_loss " << loss_.policy_name() << ")";
      workers_changed |= WorkerLostLocked(m.index);
    } else if (formed_ && !EndedLocked()) {
      ServerFailedLocked(m.index,
                         absl::StrCat("server ", m.index, " (", m.address,
                                      ") missed heartbeats for ", k.dead_after_ms(), " ms"),
                         m.last_heartbeat, now, /*lost=*/false);
    }
  }
  if (takeover_.active() && now - start_time_ > Ms(k.dead_after_ms())) {
    // A worker that has not rejoined by now is gone (it may have finished
    // and exited while there was no scheduler): it counts as dead.
    for (uint32_t rank : members_.ExpireUnregistered(WORKER, now)) {
      LOG(WARNING) << "worker " << rank << " did not rejoin the restarted scheduler within "
                   << k.dead_after_ms() << " ms: declared dead";
      workers_changed |= WorkerLostLocked(rank);
    }
  }
  const std::vector<Member> members = members_.Members();
  CheckServerDeadlinesLocked(members, now);
  CheckWorkerDeadlinesLocked(members, now);
  workers_changed |= ResumeAfterRewindLocked(now);
  UpdateLocked();
  changed_.SignalAll();
  return workers_changed;
}

// ---- The workers' calls ----

absl::Status JobState::WaitForMap(uint64_t min_version, absl::Time deadline) {
  MutexLock lock(&mu_);
  while (members_.MapVersion() < min_version || !formed_) {
    if (phase_ == Phase::kFailed) return absl::AbortedError(failure_);
    if (!changed_.WaitUntil(&mu_, deadline) && (members_.MapVersion() < min_version || !formed_)) {
      return absl::DeadlineExceededError(
          absl::StrCat("partition map version ", min_version, " not ready: waiting for servers"));
    }
  }
  return absl::OkStatus();
}

std::optional<uint32_t> JobState::LeaseOrphanLocked(uint32_t rank, absl::Time now) {
  if (!loss_.reassigns() || !formed_ || !recovery_.idle() || loss_.clocks_held() ||
      clock_.States()[rank] != ClockService::WorkerState::kFinished) {
    return std::nullopt;
  }
  const absl::Duration dead_after = Ms(config_.cluster().dead_after_ms());
  const auto states = clock_.States();
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER || m.index == rank || m.state != DEAD ||
        workers_.reported_final(m.index) || states[m.index] != ClockService::WorkerState::kDead ||
        now - m.state_since < dead_after) {
      continue;
    }
    if (!loss_.TakeLease(m.index, now, 2 * dead_after)) continue;
    LOG(INFO) << "worker " << rank << " finished its share and takes over worker " << m.index
              << "'s, unfinished at clock " << clock_.Clocks()[m.index] << " (" << m.reason << ")";
    return m.index;
  }
  return std::nullopt;
}

std::string JobState::StartWaitLocked() const {
  if (!formed_) {
    const std::vector<uint32_t> missing = MissingServers();
    if (!missing.empty()) {
      return absl::StrCat("servers [", absl::StrJoin(missing, ","), "] to register");
    }
    return takeover_.active() ? "every worker to rejoin the restarted scheduler"
                              : "the job to form (servers being set up)";
  }
  if (!recovery_.idle()) return recovery_.Waiting();
  return absl::StrCat("a rollback or the job's end (generation ", generation_,
                      " is still current)");
}

absl::Status JobState::WaitStart(uint32_t rank, std::optional<uint64_t> after_generation,
                                 absl::Time deadline, WaitStartResponse* response) {
  MutexLock lock(&mu_);
  while (true) {
    if (phase_ == Phase::kFailed) return absl::AbortedError(failure_);
    if (phase_ == Phase::kDone) {
      response->set_job_ended(true);
      return absl::OkStatus();
    }
    const bool newer = !after_generation || generation_ > *after_generation;
    if (formed_ && recovery_.idle() && newer) break;
    if (after_generation && *after_generation == generation_) {
      if (const std::optional<uint32_t> orphan = LeaseOrphanLocked(rank, absl::Now())) {
        response->set_generation(generation_);
        response->set_adopt_rank(*orphan);
        return absl::OkStatus();
      }
    }
    if (!changed_.WaitUntil(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("worker ", rank, " waits for ", StartWaitLocked()));
    }
  }
  const uint64_t clock = clock_.Clocks()[rank];
  response->set_generation(generation_);
  response->set_clock(clock);
  if (std::string position = workers_.PositionAt(rank, clock); !position.empty()) {
    response->set_position(std::move(position));
  }
  *response->mutable_map() = *members_.Map();
  WorkerStartedLocked(rank, absl::Now());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> JobState::Ticked(uint32_t rank, uint64_t clock, uint64_t generation,
                                          const std::string& position, uint64_t samples) {
  MutexLock lock(&mu_);
  auto min = clock_.Tick(rank, clock, generation);
  if (!min.ok()) return min.status();
  if (!position.empty()) workers_.RecordPosition(rank, clock, position);
  loss_.RecordTick(rank, samples);
  return *min;
}

absl::Status JobState::PendRollBack(const RollBackRequest& request) {
  MutexLock lock(&mu_);
  if (config_.cluster().mode() != BSP || loss_.LeavesClock()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RollBack from worker ", request.rank(),
        ": only a BSP job with "
        "cluster.on_worker_loss WAIT rolls back for a step a worker cannot redo; refused"));
  }
  if (request.generation() != generation_) {
    LOG(INFO) << "worker " << request.rank() << " asked for a rollback in generation "
              << request.generation() << "; the job is in " << generation_ << " already";
    return absl::OkStatus();
  }
  const std::string cause =
      absl::StrCat("worker ", request.rank(), " cannot redo step ", request.clock(), " exactly (",
                   request.cause().substr(0, 400), ")");
  const absl::Time now = absl::Now();
  PendLocked(cause, now, now).roll_back = true;
  return absl::OkStatus();
}

bool JobState::BarrierCompleteLocked(const std::string& name) const {
  const auto states = clock_.States();
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    // A worker that finished (reported done) no longer counts, nor one
    // that died after it, or (on_worker_loss DROP) before.
    const bool trained =
        m.state == FINISHED || states[m.index] == ClockService::WorkerState::kFinished;
    const bool dropped = m.state == DEAD && loss_.drops();
    if (!workers_.Entered(name, m.index) && !trained && !dropped) return false;
  }
  return true;
}

absl::Status JobState::EnterBarrier(uint32_t rank, const std::string& name, uint64_t generation,
                                    absl::Time deadline, BarrierResponse* response) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGeneration("the scheduler", generation, generation_));
  workers_.Enter(name, rank);
  changed_.SignalAll();
  while (true) {
    if (phase_ == Phase::kFailed) return absl::AbortedError(failure_);
    // A rollback (another generation) empties the barriers.
    RETURN_IF_ERROR(CheckGeneration("the scheduler", generation, generation_));
    if (BarrierCompleteLocked(name)) return absl::OkStatus();
    if (const std::optional<uint32_t> orphan = LeaseOrphanLocked(rank, absl::Now())) {
      response->set_adopt_rank(*orphan);
      return absl::OkStatus();
    }
    if (!changed_.WaitUntil(&mu_, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("barrier \"", name, "\" timed out"));
    }
  }
}

absl::Status JobState::CheckCurrent(uint64_t generation) const {
  MutexLock lock(&mu_);
  return CheckGeneration("the scheduler", generation, generation_);
}

bool JobState::WorkerFailed(uint32_t rank) {
  MutexLock lock(&mu_);
  const bool notify = WorkerLostLocked(rank);
  UpdateLocked();
  changed_.SignalAll();
  return notify;
}

absl::Status JobState::Reported(const MetricsReport& report, absl::Time now) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGeneration("the scheduler", report.generation(), generation_));
  if (report.done()) {
    members_.MarkFinished(report.rank(), now);
    clock_.MarkFinished(report.rank());
  }
  workers_.RecordReport(report);
  UpdateLocked();
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status JobState::Evaluation(uint32_t rank, const EvaluationRequest& request,
                                  absl::Time deadline, EvaluationResponse* response) {
  MutexLock lock(&mu_);
  if (!evals_.on()) {
    return absl::FailedPreconditionError(
        "Evaluation: periodic evaluation is off (training.eval_every_steps is 0)");
  }
  if (request.has_done()) {
    if (!request.error().empty()) {
      evals_.Failed(rank, request.done().clock(), request.error());
    } else if (absl::Status st = evals_.Record(rank, request.done()); !st.ok()) {
      if (absl::IsInvalidArgument(st) || absl::IsFailedPrecondition(st)) return st;
      LOG(WARNING) << st;  // Recorded, but not persisted.
    }
    MaybeStopLocked();
    UpdateLocked();
    changed_.SignalAll();
  }
  while (true) {
    if (EndedLocked()) {
      response->set_job_ended(true);
      return absl::OkStatus();
    }
    if (formed_ && recovery_.idle()) {
      // A dead worker's evaluation goes to another (a restarted process of
      // the same rank gets its own back from Take).
      for (const Member& m : members_.Members()) {
        if (m.role == WORKER && m.state == DEAD) evals_.Release(m.index);
      }
      evals_.ExpireLeases();
      if (std::optional<uint64_t> clock = evals_.Take(rank)) {
        response->set_clock(*clock);
        return absl::OkStatus();
      }
    }
    if (!changed_.WaitUntil(&mu_, deadline)) return absl::OkStatus();  // Nothing yet.
  }
}

// ---- Cuts, moves, the job's status ----

uint64_t JobState::RequestCut() {
  MutexLock lock(&mu_);
  const uint64_t seq = cuts_.Request();
  changed_.SignalAll();
  return seq;
}

absl::StatusOr<uint64_t> JobState::WaitCut(uint64_t seq, absl::Time deadline) {
  MutexLock lock(&mu_);
  while (!cuts_.Served(seq)) {
    if (EndedLocked() || control_over_) {
      return absl::FailedPreconditionError(
          "the job ended before the requested checkpoint could be taken");
    }
    if (!changed_.WaitUntil(&mu_, deadline) && !cuts_.Served(seq)) {
      return absl::DeadlineExceededError(
          "no checkpoint completed before the deadline (workers may be slow to "
          "reach the cut, or a recovery runs); it will still be taken");
    }
  }
  return cuts_.LastCut();
}

std::vector<uint64_t> JobState::CheckpointsWritten() const {
  MutexLock lock(&mu_);
  return cuts_.written();
}

absl::Status JobState::LoadEvaluations() {
  MutexLock lock(&mu_);
  return evals_.on() ? evals_.Load() : absl::OkStatus();
}

uint64_t JobState::RequestMove(uint32_t servers) {
  MutexLock lock(&mu_);
  const uint64_t seq = move_.Request(servers);
  changed_.SignalAll();
  return seq;
}

absl::StatusOr<PartitionMove::Answer> JobState::WaitMove(uint64_t seq, uint32_t servers,
                                                         absl::Time deadline) {
  MutexLock lock(&mu_);
  while (!move_.Served(seq)) {
    if (EndedLocked() || control_over_) {
      return absl::FailedPreconditionError("reshard: the job ended before the move");
    }
    if (!changed_.WaitUntil(&mu_, deadline) && !move_.Served(seq)) {
      return absl::DeadlineExceededError(
          absl::StrCat("reshard to ", servers,
                       " servers: not done before the deadline (workers may be slow "
                       "to reach the clock boundary, or a recovery runs); it may still happen"));
    }
  }
  return move_.LastAnswer();
}

void JobState::FillStatus(JobStatusResponse* response) const {
  MutexLock lock(&mu_);
  switch (phase_) {
    case Phase::kWaiting:
      response->set_state("waiting");
      break;
    case Phase::kRunning:
      response->set_state(recovery_.idle() ? "running" : "recovering");
      break;
    case Phase::kDone:
      response->set_state("done");
      break;
    case Phase::kFailed:
      response->set_state("failed: " + failure_);
      break;
  }
  response->set_generation(generation_);
  move_.FillStatus(response);
  for (const RecoveryReport& r : recovery_.reports()) *response->add_recoveries() = r;
  response->set_last_checkpoint_hold_sec(cuts_.last_hold_sec());
  response->set_last_checkpoint_write_sec(cuts_.last_write_sec());
  response->set_versions(cuts_.versions());
  response->set_last_version(cuts_.last_version());
  response->set_last_version_hold_sec(cuts_.last_version_hold_sec());
  workers_.FillStatus(loss_.tick_samples(), response);
  EvalStatusLocked(response);
  response->set_summary(SummaryLocked());
  response->set_untrained_samples(UntrainedSamplesLocked());
}

void JobState::EvalStatusLocked(JobStatusResponse* response) const {
  if (!evals_.on()) return;
  for (const auto& [clock, e] : evals_.evaluations()) *response->add_evaluations() = e;
  if (auto best = evals_.Best()) {
    response->set_best_eval_clock(best->clock());
    response->set_best_eval_auc(best->auc());
  }
  response->set_early_stopped_at(evals_.stopped_at());
  // The job's evaluation is its newest one (the final checkpoint's at the end).
  if (auto latest = evals_.Latest()) {
    response->set_eval_auc(latest->auc());
    response->set_eval_loss(latest->logloss());
  }
}

}  // namespace shardps
