// JobCoordinator: construction, failure detection, the job's state and its
// status. Registration is in job_members.cc, the workers' requests in
// job_workers.cc, the control thread (formation, cuts, recoveries) in
// job_control.cc.
#include "scheduler/job.h"

#include <algorithm>
#include <cstdint>
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

}  // namespace

JobCoordinator::JobCoordinator(JobConfig config, ServerNotifier notifier, ServerOps* ops)
    : config_(std::move(config)),
      fingerprint_(ConfigFingerprint(config_)),
      notifier_(std::move(notifier)),
      ops_(ops),
      start_time_(absl::Now()),
      checkpoints_on_(!config_.checkpoint().dir().empty()),
      loss_(EffectiveOnWorkerLoss(config_.cluster())),
      members_(config_, fingerprint_),
      clock_(config_.cluster().num_workers(), EffectiveStaleness(config_.cluster()) == UINT32_MAX
                                                  ? ClockService::kUnbounded
                                                  : EffectiveStaleness(config_.cluster())),
      final_(config_.cluster().num_workers(), false),
      cuts_(config_),
      evals_(EvalBook::Options{config_.checkpoint().dir(), config_.training().eval_every_steps(),
                               config_.training().early_stopping().patience(),
                               config_.training().early_stopping().min_delta()}) {
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
  cuts_.Request();
  changed_.SignalAll();
}

absl::StatusOr<uint64_t> JobCoordinator::CheckpointNow(absl::Time deadline) {
  MutexLock lock(&mu_);
  if (!checkpoints_on_) {
    return absl::FailedPreconditionError(
        "checkpoints are off for this job (set checkpoint.dir in the job config)");
  }
  const uint64_t mine = cuts_.Request();
  changed_.SignalAll();
  while (!cuts_.Served(mine)) {
    if (Ended() || control_over_) {
      return absl::FailedPreconditionError(
          "the job ended before the requested checkpoint could be taken");
    }
    if (!changed_.WaitUntil(&mu_, deadline) && !cuts_.Served(mine)) {
      return absl::DeadlineExceededError(
          "no checkpoint completed before the deadline (workers may be slow to "
          "reach the cut, or a recovery runs); it will still be taken");
    }
  }
  return cuts_.LastCut();
}

std::vector<uint64_t> JobCoordinator::Checkpoints() const {
  MutexLock lock(&mu_);
  return cuts_.written();
}

void JobCoordinator::FailLocked(const std::string& why) {
  if (Ended()) return;
  state_ = State::kFailed;
  failure_ = why;
  LOG(ERROR) << "job failed: " << why;
  clock_.Abort(absl::StrCat("job failed: ", why));
  changed_.SignalAll();
}

void JobCoordinator::Sweep(absl::Time now) {
  const ClusterConfig& k = config_.cluster();
  const std::vector<Member> died = members_.Sweep(now, Ms(k.dead_after_ms()));
  bool workers_changed = false;
  {
    MutexLock lock(&mu_);
    for (const Member& m : died) {
      if (m.role == WORKER) {
        LOG(WARNING) << "worker " << m.index << " missed heartbeats: declared dead; "
                     << (loss_.LeavesClock() ? "it leaves the clock minimum"
                                             : "the clocks wait for it")
                     << " (cluster.on_worker_loss " << loss_.policy_name() << ")";
        workers_changed |= WorkerLostLocked(m.index);
      } else if (formed_ && !Ended()) {
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
      if (s.role == SERVER && s.state == DEAD && now - s.state_since > Ms(k.server_deadline_ms())) {
        FailLocked(absl::StrCat("server ", s.index, " (", s.address, ") dead for more than ",
                                k.server_deadline_ms(), " ms: no replacement registered"));
      }
    }
    CheckWorkerDeadlinesLocked(members, now);
    workers_changed |= ResumeAfterRewindLocked(now);
    UpdateStateLocked();
    changed_.SignalAll();
  }
  if (workers_changed) NotifyServers();
}

bool JobCoordinator::WorkerLostLocked(uint32_t rank) {
  if (!loss_.LeavesClock()) return false;
  clock_.MarkDead(rank);
  return true;
}

void JobCoordinator::CheckWorkerDeadlinesLocked(const std::vector<Member>& members,
                                                absl::Time now) {
  const ClusterConfig& k = config_.cluster();
  if (!formed_ || Ended()) return;
  const auto states = clock_.States();
  const auto unfinished = [&](const Member& m) {
    return m.role == WORKER && m.state == DEAD && !final_[m.index] &&
           states[m.index] != ClockService::WorkerState::kFinished;
  };
  if (!loss_.LeavesClock()) {
    // The clocks wait for every lost worker: it has to come back.
    for (const Member& m : members) {
      if (!unfinished(m) || now - m.state_since <= Ms(k.worker_deadline_ms())) continue;
      FailLocked(absl::StrCat("worker ", m.index, " dead for more than worker_deadline_ms (",
                              k.worker_deadline_ms(), " ms) with its data unfinished at clock ",
                              clock_.Clocks()[m.index], " (cluster.on_worker_loss WAIT; ", m.reason,
                              "):\n", SummaryLocked()));
      return;
    }
    return;
  }
  // REASSIGN and DROP: the job fails once no worker is left to train (with
  // REASSIGN: to take over a lost share, or to finish; with DROP: none has
  // finished) for worker_deadline_ms.
  bool gone = true, any_unfinished = false;
  for (const Member& m : members) {
    if (m.role != WORKER) continue;
    any_unfinished |= unfinished(m);
    const bool never =
        m.state == STATE_UNSPECIFIED && now - start_time_ > Ms(k.start_deadline_ms());
    const bool here = (m.state != DEAD && !never) || (loss_.drops() && final_[m.index]);
    if (here) gone = false;
  }
  if (loss_.reassigns() && !any_unfinished) gone = false;
  if (!gone) {
    workers_gone_since_.reset();
  } else if (!workers_gone_since_) {
    workers_gone_since_ = now;
    LOG(WARNING) << "every worker is dead; the job fails unless one is back within "
                 << k.worker_deadline_ms() << " ms";
  } else if (now - *workers_gone_since_ > Ms(k.worker_deadline_ms())) {
    FailLocked(absl::StrCat("every worker died and none came back within worker_deadline_ms (",
                            k.worker_deadline_ms(), " ms; cluster.on_worker_loss ",
                            loss_.policy_name(), "):\n", SummaryLocked()));
  }
}

bool JobCoordinator::ResumeAfterRewindLocked(absl::Time now) {
  if (!loss_.clocks_held() || Ended() || !recovery_.idle()) return false;
  const ClusterConfig& k = config_.cluster();
  // With REASSIGN and DROP, a worker lost for worker_deadline_ms is not
  // waited for any more (the others go on; with WAIT the job failed).
  if (loss_.LeavesClock()) {
    for (const Member& m : members_.Members()) {
      if (m.role == WORKER && m.state == DEAD && now - m.state_since > Ms(k.worker_deadline_ms())) {
        loss_.StopAwaiting(m.index);
      }
    }
  }
  const std::vector<uint32_t> missing = loss_.Awaited();
  const bool expired = loss_.HoldExpired(now, Ms(k.start_deadline_ms()));
  if (!missing.empty() && !expired) return false;
  loss_.ReleaseClocks(/*forget_awaited=*/true);
  bool changed = false;
  if (!missing.empty()) {
    LOG(WARNING) << "workers [" << absl::StrJoin(missing, ",")
                 << "] did not start within start_deadline_ms after the rollback; "
                 << (loss_.LeavesClock() ? "the clocks resume without them"
                                         : "the clocks keep waiting for them");
    for (uint32_t rank : missing) changed |= WorkerLostLocked(rank);
    recovery_.CompleteRewind(now);
  } else {
    LOG(INFO) << "every worker started after the rollback: the clocks resume";
  }
  clock_.SetPaused(false);
  return changed;
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
  if (!formed_ || !recovery_.idle()) return;
  // A dead worker is over once its data is trained (it reported done), or
  // when the job may drop its share.
  const auto clock_states = clock_.States();
  bool any_final = false, all_over = true;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    const bool trained = clock_states[m.index] == ClockService::WorkerState::kFinished;
    if (final_[m.index])
      any_final = true;
    else if (m.state != DEAD || !(trained || loss_.drops()))
      all_over = false;
  }
  // The job ends after the control thread took the final cut (servers exit
  // when it ends).
  if (all_over && any_final && (!checkpoints_on_ || cuts_.final_done()) &&
      !EvaluationsPendingLocked()) {
    state_ = State::kDone;
    if (const uint64_t untrained = UntrainedSamplesLocked(); untrained > 0) {
      LOG(WARNING) << "the job ends without the shares of the workers it lost: about " << untrained
                   << " samples untrained (cluster.on_worker_loss DROP)";
    }
    LOG(INFO) << "job done\n" << SummaryLocked();
    clock_.Abort("job done");
  }
}

std::string JobCoordinator::SummaryLocked() const {
  std::string out;
  const std::vector<uint64_t> clocks = clock_.Clocks();
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    // Steps acknowledged: the worker's clock (its reports may be older).
    auto it = reports_.find(m.index);
    const uint64_t step = std::max(clocks[m.index], it == reports_.end() ? 0 : it->second.step());
    const char* what = final_[m.index]                ? "finished"
                       : m.state == DEAD              ? "DEAD, data unfinished"
                       : m.state == STATE_UNSPECIFIED ? "not registered yet,"
                                                      : "training";
    absl::StrAppend(&out, "  worker ", m.index, ": ", what, " after ", step, " steps");
    if (!final_[m.index] && m.state == DEAD) {
      absl::StrAppend(
          &out, loss_.drops() ? " (its shard from step " : " (waited for; its shard from step ",
          step, loss_.drops() ? " on was not trained)" : " on is not trained yet)");
      if (!m.reason.empty()) absl::StrAppend(&out, ": ", m.reason);
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

uint64_t JobCoordinator::UntrainedSamplesLocked() const {
  if (!loss_.drops()) return 0;
  uint64_t longest = 0;  // The most steps a finished worker trained.
  for (const auto& [rank, r] : reports_) {
    if (final_[rank]) longest = std::max(longest, r.step());
  }
  std::vector<uint32_t> lost;
  for (const Member& m : members_.Members()) {
    if (m.role == WORKER && !final_[m.index] && m.state == DEAD) lost.push_back(m.index);
  }
  return loss_.UntrainedSamples(longest, clock_.Clocks(), lost, config_.training().batch_size());
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
    case State::kWaiting:
      response->set_state("waiting");
      break;
    case State::kRunning:
      response->set_state(recovery_.idle() ? "running" : "recovering");
      break;
    case State::kDone:
      response->set_state("done");
      break;
    case State::kFailed:
      response->set_state("failed: " + failure_);
      break;
  }
  response->set_generation(generation_);
  for (const RecoveryReport& r : recovery_.reports()) *response->add_recoveries() = r;
  response->set_last_checkpoint_hold_sec(cuts_.last_hold_sec());
  response->set_last_checkpoint_write_sec(cuts_.last_write_sec());
  double sps = 0, loss = 0, train_auc = 0;
  uint64_t samples = 0;
  // Per worker the larger of its latest report and its latest tick.
  std::map<uint32_t, uint64_t> share = loss_.tick_samples();
  for (const auto& [rank, r] : reports_) share[rank] = std::max(share[rank], r.samples());
  for (const auto& [rank, s] : share) {
    // Saturating: reports are validated, the sum must not wrap either.
    samples = s > UINT64_MAX - samples ? UINT64_MAX : samples + s;
  }
  int n = 0;
  for (const auto& [rank, r] : reports_) {
    if (!r.done()) sps += r.samples_per_sec();
    loss += r.train_loss();
    train_auc += r.train_auc();
    ++n;
    if (r.final() && r.eval_examples() > 0) {
      response->set_eval_auc(r.eval_auc());
      response->set_eval_loss(r.eval_loss());
    }
  }
  EvalStatusLocked(response);
  response->set_samples_per_sec(sps);
  response->set_total_samples(samples);
  if (n > 0) response->set_train_loss(loss / n);
  if (n > 0) response->set_train_auc(train_auc / n);
  response->set_summary(SummaryLocked());
  response->set_untrained_samples(UntrainedSamplesLocked());
}

}  // namespace shardps
