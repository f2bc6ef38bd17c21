// JobCoordinator: requests, membership and the job's state. The control
// thread (formation, cuts, recoveries) is in job_control.cc.
#include "scheduler/job.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/generation.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

absl::Time DeadlineFromMs(uint32_t timeout_ms) {
  return absl::Now() + (timeout_ms == 0 ? absl::Seconds(30) : Ms(timeout_ms));
}

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

}  // namespace

JobCoordinator::JobCoordinator(JobConfig config, ServerNotifier notifier, ServerOps* ops)
    : config_(std::move(config)),
      fingerprint_(ConfigFingerprint(config_)),
      notifier_(std::move(notifier)),
      ops_(ops),
      start_time_(absl::Now()),
      checkpoints_on_(!config_.checkpoint().dir().empty()),
      members_(config_, fingerprint_),
      clock_(config_.cluster().num_workers(),
             EffectiveStaleness(config_.cluster()) == UINT32_MAX
                 ? ClockService::kUnbounded
                 : EffectiveStaleness(config_.cluster())),
      final_(config_.cluster().num_workers(), false) {
  // No step starts before the job has formed (Form unpauses).
  clock_.SetPaused(true);
}

JobCoordinator::~JobCoordinator() {
  stop_ = true;
  {
    MutexLock lock(&mu_);
    changed_.SignalAll();
  }
  clock_.Abort("the scheduler is shutting down");
  if (sweeper_.joinable()) sweeper_.join();
  if (control_.joinable()) control_.join();
}

void JobCoordinator::Start() {
  control_ = std::thread([this] { ControlLoop(); });
  sweeper_ = std::thread([this] {
    const absl::Duration period = Ms(std::max(1u, config_.cluster().heartbeat_ms() / 2));
    while (!stop_) {
      absl::SleepFor(period);
      Sweep(absl::Now());
    }
  });
}

uint64_t JobCoordinator::generation() const {
  MutexLock lock(&mu_);
  return generation_;
}

void JobCoordinator::RequestCheckpoint() {
  MutexLock lock(&mu_);
  ++requested_seq_;
  changed_.SignalAll();
}

absl::StatusOr<uint64_t> JobCoordinator::CheckpointNow(absl::Time deadline) {
  MutexLock lock(&mu_);
  if (!checkpoints_on_) {
    return absl::FailedPreconditionError(
        "checkpoints are off for this job (set checkpoint.dir in the job config)");
  }
  const uint64_t mine = ++requested_seq_;
  changed_.SignalAll();
  while (completed_seq_ < mine) {
    if (Ended() || control_over_) {
      return absl::FailedPreconditionError(
          "the job ended before the requested checkpoint could be taken");
    }
    if (!changed_.WaitUntil(&mu_, deadline) && completed_seq_ < mine) {
      return absl::DeadlineExceededError(
          "no checkpoint completed before the deadline (workers may be slow to "
          "reach the cut, or a recovery runs); it will still be taken");
    }
  }
  if (!last_cut_status_.ok()) return last_cut_status_;
  return last_cut_clock_;
}

std::vector<uint64_t> JobCoordinator::Checkpoints() const {
  MutexLock lock(&mu_);
  return checkpoints_;
}

void JobCoordinator::FailLocked(const std::string& why) {
  if (Ended()) return;
  state_ = State::kFailed;
  failure_ = why;
  LOG(ERROR) << "job failed: " << why;
  clock_.Abort(absl::StrCat("job failed: ", why));
  changed_.SignalAll();
}

void JobCoordinator::ApplyRejoinLocked(const RegisterRequest& request, uint32_t index) {
  const Rejoin& r = request.rejoin();
  if (request.role() != WORKER) return;
  clock_.Revive(index, r.clock());
  if (r.has_granted_step()) clock_.NoteGranted(r.granted_step());
  positions_[index] = {r.clock(), r.position()};
  if (r.has_last_report()) reports_[index] = r.last_report();
  if (r.finished()) {
    members_.MarkFinished(index, absl::Now());
    clock_.MarkFinished(index);
    final_[index] = r.has_last_report() && r.last_report().final();
  }
}

void JobCoordinator::ServerFailedLocked(uint32_t index, const std::string& cause,
                                        absl::Time failed_at, absl::Time now, bool lost) {
  if (!pending_) {
    pending_ = PendingRecovery{cause, failed_at, now, {}, {}};
    LOG(WARNING) << cause << ": clocks paused; recovering";
  } else if (pending_->cause.find(cause) == std::string::npos) {
    absl::StrAppend(&pending_->cause, "; ", cause);
  }
  (lost ? pending_->lost : pending_->silent).insert(index);
  if (lost) pending_->silent.erase(index);
  clock_.SetPaused(true);
  changed_.SignalAll();
}

absl::Status JobCoordinator::Register(const RegisterRequest& request,
                                      RegisterResponse* response) {
  if (request.has_rejoin() && !request.has_requested_index()) {
    return absl::InvalidArgumentError("rejoin: requested_index is required");
  }
  const absl::Time now = absl::Now();
  auto reg = members_.Register(request, now);
  if (!reg.ok()) {
    LOG_EVERY_N(WARNING, 20) << "refused registration: " << reg.status();
    return reg.status();
  }
  const Member& m = reg->member;
  const MemberKey key{request.role(), m.index};
  response->set_index(m.index);
  response->set_job_id(fingerprint_);
  if (auto map = members_.Map()) *response->mutable_map() = *map;
  if (request.role() == WORKER) {
    response->mutable_shard()->set_worker_rank(m.index);
    response->mutable_shard()->set_num_workers(config_.cluster().num_workers());
  }
  if (reg->repeat) return absl::OkStatus();
  const std::string who = absl::StrCat(RoleName(request.role()), " ", m.index);
  bool notify = request.role() == SERVER;
  {
    MutexLock lock(&mu_);
    if (request.has_rejoin()) {
      const Rejoin& r = request.rejoin();
      members_.RaiseMapVersionAbove(r.map_version());
      LOG(INFO) << who << " rejoined (generation " << r.generation() << ", clock "
                << r.clock() << ", map version " << r.map_version() << ")";
      if (!formed_) {
        // A process of an earlier scheduler: this one takes its job over.
        takeover_ = true;
        rejoins_[key] = r;
        fresh_.erase(key);
        ApplyRejoinLocked(request, m.index);
      } else if (request.role() == SERVER) {
        if (reg->new_process || r.generation() != generation_) {
          ServerFailedLocked(m.index, absl::StrCat(who, " came back with another state"),
                             reg->previous_heartbeat, now, /*lost=*/true);
        } else if (pending_ && pending_->silent.erase(m.index) > 0) {
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
      fresh_.insert(key);
      LOG(INFO) << who << " registered" << (m.address.empty() ? "" : " at ") << m.address;
    } else if (request.role() == SERVER) {
      LOG(INFO) << who << " registered at " << m.address << " (a new process)";
      if (reg->previous_state != STATE_UNSPECIFIED) {
        ServerFailedLocked(m.index, absl::StrCat(who, " restarted (a new process at ",
                                                 m.address, ")"),
                           reg->previous_heartbeat, now, /*lost=*/true);
      }
    } else {
      // A restarted worker: it resumes at its last acknowledged clock from
      // the data position it recorded there (WaitStart).
      LOG(INFO) << who << " registered"
                << (reg->previous_state == STATE_UNSPECIFIED ? "" : " (restarted: takes its rank back)");
      clock_.Revive(m.index, clock_.Clocks()[m.index]);
      notify = true;
    }
    UpdateStateLocked();
    changed_.SignalAll();
  }
  if (notify) NotifyServers();
  return absl::OkStatus();
}

absl::Status JobCoordinator::Heartbeat(const HeartbeatRequest& request,
                                       HeartbeatResponse* response) {
  auto verdict = members_.Heartbeat(request.role(), request.index(), request.incarnation(),
                                    absl::Now());
  if (!verdict.ok()) return verdict.status();
  response->set_map_version(members_.MapVersion());
  MutexLock lock(&mu_);
  response->set_generation(generation_);
  response->set_stop(Ended());
  if (state_ == State::kFailed) response->set_failure(failure_);
  if (*verdict == HeartbeatVerdict::kRejoin) response->set_rejoin(true);
  if (*verdict == HeartbeatVerdict::kReplaced) {
    return absl::FailedPreconditionError(absl::StrCat(
        RoleName(request.role()), " ", request.index(),
        " was replaced by a newer process (another incarnation holds the slot)"));
  }
  return absl::OkStatus();
}

absl::Status JobCoordinator::GetPartitionMap(const GetPartitionMapRequest& request,
                                             PartitionMapProto* response) {
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  const uint64_t want = std::max<uint64_t>(1, request.min_version());
  MutexLock lock(&mu_);
  while (members_.MapVersion() < want || !formed_) {
    if (state_ == State::kFailed) return absl::AbortedError(failure_);
    if (!changed_.WaitUntil(&mu_, deadline) && (members_.MapVersion() < want || !formed_)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "partition map version ", want, " not ready: waiting for servers"));
    }
  }
  *response = *members_.Map();
  return absl::OkStatus();
}

void JobCoordinator::WorkerStartedLocked(uint32_t rank, absl::Time now) {
  if (awaiting_rewind_.erase(rank) == 0 || !awaiting_rewind_.empty()) return;
  for (auto it = recoveries_.rbegin(); it != recoveries_.rend(); ++it) {
    if (it->complete()) continue;
    it->set_rewind_sec(absl::ToDoubleSeconds(now - rewind_started_));
    it->set_total_sec(it->detect_sec() + it->wait_sec() + it->restore_sec() + it->rewind_sec());
    it->set_complete(true);
    LOG(INFO) << "recovery complete: every live worker restarted at clock " << it->clock()
              << " in " << it->total_sec() << " s (detect " << it->detect_sec() << " s, wait "
              << it->wait_sec() << " s, restore " << it->restore_sec() << " s, rewind "
              << it->rewind_sec() << " s)";
    break;
  }
}

std::string JobCoordinator::StartWaitLocked() const {
  if (!formed_) {
    std::vector<uint32_t> missing;
    for (const Member& m : members_.Members()) {
      if (m.role == SERVER && m.state != ALIVE) missing.push_back(m.index);
    }
    if (!missing.empty()) {
      return absl::StrCat("servers [", absl::StrJoin(missing, ","), "] to register");
    }
    return takeover_ ? "every worker to rejoin the restarted scheduler"
                     : "the job to form (servers being set up)";
  }
  if (!recovering_.empty()) return absl::StrCat("the recovery: ", recovering_);
  if (pending_) return absl::StrCat("a recovery to start (", pending_->cause, ")");
  return absl::StrCat("a rollback or the job's end (generation ", generation_,
                      " is still current)");
}

absl::Status JobCoordinator::WaitStart(const WaitStartRequest& request,
                                       WaitStartResponse* response) {
  const uint32_t rank = request.rank();
  if (rank >= final_.size() || !members_.Registered(WORKER, rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("WaitStart: worker ", rank, " has not registered with this scheduler"));
  }
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  MutexLock lock(&mu_);
  while (true) {
    if (state_ == State::kFailed) return absl::AbortedError(failure_);
    if (state_ == State::kDone) {
      response->set_job_ended(true);
      return absl::OkStatus();
    }
    const bool newer =
        !request.has_after_generation() || generation_ > request.after_generation();
    if (formed_ && !pending_ && recovering_.empty() && newer) break;
    if (!changed_.WaitUntil(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("worker ", rank, " waits for ", StartWaitLocked()));
    }
  }
  const uint64_t clock = clock_.Clocks()[rank];
  response->set_generation(generation_);
  response->set_clock(clock);
  auto it = positions_.find(rank);
  if (it != positions_.end() && it->second.first == clock) {
    response->set_position(it->second.second);
  }
  *response->mutable_map() = *members_.Map();
  WorkerStartedLocked(rank, absl::Now());
  return absl::OkStatus();
}

absl::Status JobCoordinator::WaitClock(const WaitClockRequest& request,
                                       WaitClockResponse* response) {
  // timeout_ms 0 asks without waiting (a worker deciding whether to prefetch).
  auto min = clock_.WaitToStart(request.rank(), request.step(),
                                absl::Now() + Ms(request.timeout_ms()), request.generation());
  if (!min.ok()) return min.status();
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::Tick(const TickRequest& request, TickResponse* response) {
  auto min = clock_.Tick(request.rank(), request.clock(), request.generation());
  if (!min.ok()) return min.status();
  if (!request.position().empty()) {
    MutexLock lock(&mu_);
    positions_[request.rank()] = {request.clock(), request.position()};
  }
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::Barrier(const BarrierRequest& request) {
  if (request.role() != WORKER || request.index() >= final_.size()) {
    return absl::InvalidArgumentError("barrier: only workers with a valid rank");
  }
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  MutexLock lock(&mu_);
  const uint64_t generation = request.generation();
  RETURN_IF_ERROR(CheckGeneration("the scheduler", generation, generation_));
  std::vector<bool>& entered = barriers_[request.name()];
  entered.resize(final_.size(), false);
  entered[request.index()] = true;
  changed_.SignalAll();
  while (true) {
    if (state_ == State::kFailed) return absl::AbortedError(failure_);
    // A rollback (another generation) empties the barriers.
    RETURN_IF_ERROR(CheckGeneration("the scheduler", generation, generation_));
    bool all = true;
    const std::vector<bool>& now_entered = barriers_[request.name()];
    for (const Member& m : members_.Members()) {
      // A worker that finished (reported done) or died no longer counts.
      if (m.role == WORKER && !now_entered[m.index] && m.state != DEAD &&
          m.state != FINISHED) {
        all = false;
      }
    }
    if (all) return absl::OkStatus();
    if (!changed_.WaitUntil(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("barrier \"", request.name(), "\" timed out"));
    }
  }
}

absl::Status JobCoordinator::ReportMetrics(const MetricsReport& report) {
  const uint32_t rank = report.rank();
  if (rank >= final_.size() || !members_.Registered(WORKER, rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("metrics: worker ", rank, " has not registered with this scheduler"));
  }
  const absl::Time now = absl::Now();
  if (!report.error().empty()) {
    const std::string why = absl::StrCat("failed: ", report.error());
    LOG(ERROR) << "worker " << rank << " " << why;
    members_.MarkDead(WORKER, rank, why, now);
    clock_.MarkDead(rank);
    {
      MutexLock lock(&mu_);
      awaiting_rewind_.erase(rank);
      UpdateStateLocked();
      changed_.SignalAll();
    }
    NotifyServers();
    return absl::OkStatus();
  }
  {
    MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckGeneration("the scheduler", report.generation(), generation_));
    if (report.done()) {
      members_.MarkFinished(rank, now);
      clock_.MarkFinished(rank);
    }
    reports_[rank] = report;
    if (report.final()) final_[rank] = true;
    UpdateStateLocked();
    changed_.SignalAll();
  }
  if (report.done()) NotifyServers();
  return absl::OkStatus();
}

void JobCoordinator::Sweep(absl::Time now) {
  const ClusterConfig& k = config_.cluster();
  const std::vector<Member> died = members_.Sweep(now, Ms(k.dead_after_ms()));
  bool workers_changed = false;
  {
  MutexLock lock(&mu_);
  for (const Member& m : died) {
    if (m.role == WORKER) {
      LOG(WARNING) << "worker " << m.index << " missed heartbeats: declared dead"
                   << "; it leaves the clock minimum";
      clock_.MarkDead(m.index);
      awaiting_rewind_.erase(m.index);
      workers_changed = true;
    } else if (formed_ && !Ended()) {
      ServerFailedLocked(m.index,
                         absl::StrCat("server ", m.index, " (", m.address,
                                      ") missed heartbeats for ", k.dead_after_ms(), " ms"),
                         m.last_heartbeat, now, /*lost=*/false);
    }
  }
  if (takeover_ && now - start_time_ > Ms(k.dead_after_ms())) {
    // A worker that has not rejoined by now is gone (it may have finished
    // and exited while there was no scheduler): it counts as dead.
    for (uint32_t rank : members_.ExpireUnregistered(WORKER, now)) {
      LOG(WARNING) << "worker " << rank << " did not rejoin the restarted scheduler within "
                   << k.dead_after_ms() << " ms: declared dead";
      clock_.MarkDead(rank);
      workers_changed = true;
    }
  }
  const std::vector<Member> members = members_.Members();
  if (!formed_ && now - start_time_ > Ms(k.start_deadline_ms())) {
    std::vector<uint32_t> missing;
    for (const Member& m : members) {
      if (m.role == SERVER && m.state != ALIVE) missing.push_back(m.index);
    }
    if (!missing.empty()) {
      FailLocked(absl::StrCat("servers [", absl::StrJoin(missing, ","),
                              "] did not register within start_deadline_ms (",
                              k.start_deadline_ms(), " ms)"));
    }
  }
  for (const Member& s : members) {
    if (s.role == SERVER && s.state == DEAD &&
        now - s.state_since > Ms(k.server_deadline_ms())) {
      FailLocked(absl::StrCat("server ", s.index, " (", s.address, ") dead for more than ",
                              k.server_deadline_ms(), " ms: no replacement registered"));
    }
  }
  // Every worker dead (none finished): the job fails unless one comes back.
  bool gone = formed_;
  for (const Member& m : members) {
    if (m.role != WORKER) continue;
    const bool never = m.state == STATE_UNSPECIFIED && now - start_time_ > Ms(k.start_deadline_ms());
    if ((m.state != DEAD && !never) || final_[m.index]) gone = false;
  }
  if (!gone || Ended()) {
    workers_gone_since_.reset();
  } else if (!workers_gone_since_) {
    workers_gone_since_ = now;
    LOG(WARNING) << "every worker is dead; the job fails unless one is back within "
                 << k.worker_deadline_ms() << " ms";
  } else if (now - *workers_gone_since_ > Ms(k.worker_deadline_ms())) {
    FailLocked(absl::StrCat("every worker died and none came back within ",
                            k.worker_deadline_ms(), " ms:\n", SummaryLocked()));
  }
  UpdateStateLocked();
  changed_.SignalAll();
  }
  if (workers_changed) NotifyServers();
}

void JobCoordinator::NotifyServers() {
  auto map = members_.Map();
  if (!map || !notifier_) return;
  std::vector<uint32_t> active;
  const auto states = clock_.States();
  for (uint32_t r = 0; r < states.size(); ++r) {
    if (states[r] == ClockService::WorkerState::kLive) active.push_back(r);
  }
  notifier_(*map, active);
}

bool JobCoordinator::AllRegisteredOnce() const {
  for (const Member& m : members_.Members()) {
    if (m.state == STATE_UNSPECIFIED) return false;
  }
  return true;
}

void JobCoordinator::UpdateStateLocked() {
  if (Ended()) return;
  if (state_ == State::kWaiting && formed_ && AllRegisteredOnce()) {
    LOG(INFO) << "every server and worker registered: job running";
    state_ = State::kRunning;
  }
  if (!formed_ || pending_ || !recovering_.empty()) return;
  bool any_final = false, all_over = true;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    if (final_[m.index]) any_final = true;
    else if (m.state != DEAD) all_over = false;
  }
  // The job ends after the control thread took the final cut (servers exit
  // when it ends).
  if (all_over && any_final && (!checkpoints_on_ || final_cut_done_)) {
    state_ = State::kDone;
    LOG(INFO) << "job done\n" << SummaryLocked();
    clock_.Abort("job done");
  }
}

std::string JobCoordinator::SummaryLocked() const {
  std::string out;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    auto it = reports_.find(m.index);
    const uint64_t step = it == reports_.end() ? 0 : it->second.step();
    absl::StrAppend(&out, "  worker ", m.index, ": ",
                    final_[m.index] ? "finished" : "DEAD, data unfinished",
                    " after ", step, " steps");
    if (!final_[m.index]) {
      absl::StrAppend(&out, " (its shard from step ", step, " on was not trained)");
      if (!m.reason.empty()) absl::StrAppend(&out, ": ", m.reason);
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::Status JobCoordinator::WaitDone(absl::Time deadline) {
  MutexLock lock(&mu_);
  while (!Ended()) {
    if (!changed_.WaitUntil(&mu_, deadline) && !Ended()) {
      return absl::DeadlineExceededError("job still running");
    }
  }
  if (state_ == State::kFailed) return absl::AbortedError(absl::StrCat("job failed: ", failure_));
  return absl::OkStatus();
}

void JobCoordinator::JobStatus(JobStatusResponse* response) const {
  const absl::Time now = absl::Now();
  const std::vector<uint64_t> clocks = clock_.Clocks();
  for (const Member& m : members_.Members()) {
    MemberStatus* s = response->add_members();
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
  }
  response->set_job_name(config_.name());
  response->set_min_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  response->set_max_clock(clock_.MaxClock());
  response->set_max_spread(clock_.MaxSpread());
  response->set_elapsed_sec(absl::ToDoubleSeconds(now - start_time_));
  MutexLock lock(&mu_);
  switch (state_) {
    case State::kWaiting: response->set_state("waiting"); break;
    case State::kRunning:
      response->set_state(recovering_.empty() && !pending_ ? "running" : "recovering");
      break;
    case State::kDone: response->set_state("done"); break;
    case State::kFailed: response->set_state("failed: " + failure_); break;
  }
  response->set_generation(generation_);
  for (const RecoveryReport& r : recoveries_) *response->add_recoveries() = r;
  response->set_last_checkpoint_hold_sec(last_hold_sec_);
  response->set_last_checkpoint_write_sec(last_write_sec_);
  double sps = 0, loss = 0, train_auc = 0;
  uint64_t samples = 0;
  int n = 0;
  for (const auto& [rank, r] : reports_) {
    if (!r.done()) sps += r.samples_per_sec();
    samples += r.samples();
    loss += r.train_loss();
    train_auc += r.train_auc();
    ++n;
    if (r.final() && r.eval_examples() > 0) {
      response->set_eval_auc(r.eval_auc());
      response->set_eval_loss(r.eval_loss());
    }
  }
  response->set_samples_per_sec(sps);
  response->set_total_samples(samples);
  if (n > 0) response->set_train_loss(loss / n);
  if (n > 0) response->set_train_auc(train_auc / n);
  response->set_summary(SummaryLocked());
}

}  // namespace shardps
