// JobState: what both sides share (job_state.h): the job's phase and its
// end, failures, deadlines, lost workers and the rewind after a rollback,
// evaluations. The request side's transitions are in
// job_state_requests.cc, the control thread's in job_state_control.cc.
#include "scheduler/job_state.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "glog/logging.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

}  // namespace

JobState::JobState(const JobConfig& config, Membership* members, ClockService* clock,
                   ServerNotifier notifier, absl::Time start_time)
    : config_(config),
      members_(*members),
      clock_(*clock),
      notifier_(std::move(notifier)),
      start_time_(start_time),
      checkpoints_on_(!config.checkpoint().dir().empty()),
      workers_(config.cluster().num_workers()),
      loss_(EffectiveOnWorkerLoss(config.cluster())),
      cuts_(config),
      evals_(EvalBook::Options{config.checkpoint().dir(), config.training().eval_every_steps(),
                               config.training().early_stopping().patience(),
                               config.training().early_stopping().min_delta()}),
      move_(config.cluster()) {}

// ---- Either side ----

JobState::Phase JobState::phase() const {
  MutexLock lock(&mu_);
  return phase_;
}

bool JobState::Ended() const {
  MutexLock lock(&mu_);
  return EndedLocked();
}

bool JobState::formed() const {
  MutexLock lock(&mu_);
  return formed_;
}

uint64_t JobState::generation() const {
  MutexLock lock(&mu_);
  return generation_;
}

void JobState::Fail(const std::string& why) {
  MutexLock lock(&mu_);
  FailLocked(why);
}

void JobState::WakeWaiters() {
  MutexLock lock(&mu_);
  changed_.SignalAll();
}

absl::Status JobState::WaitEnded(absl::Time deadline) {
  MutexLock lock(&mu_);
  while (!EndedLocked()) {
    if (!changed_.WaitUntil(&mu_, deadline) && !EndedLocked()) {
      return absl::DeadlineExceededError("job still running");
    }
  }
  if (phase_ == Phase::kFailed) return absl::AbortedError(absl::StrCat("job failed: ", failure_));
  return absl::OkStatus();
}

void JobState::Notify() {
  auto map = members_.Map();
  if (!map || !notifier_) return;
  const std::vector<uint32_t> active = clock_.LiveRanks();
  notifier_(*map, active);
}

void JobState::ServerFailed(uint32_t index, const std::string& cause, absl::Time failed_at,
                            absl::Time now, bool lost) {
  MutexLock lock(&mu_);
  ServerFailedLocked(index, cause, failed_at, now, lost);
}

void JobState::FailLocked(const std::string& why) {
  if (EndedLocked()) return;
  phase_ = Phase::kFailed;
  failure_ = why;
  LOG(ERROR) << "job failed: " << why;
  clock_.Abort(absl::StrCat("job failed: ", why));
  changed_.SignalAll();
}

void JobState::UpdateLocked() {
  if (EndedLocked()) return;
  if (phase_ == Phase::kWaiting && formed_ && AllRegisteredOnce()) {
    LOG(INFO) << "every server and worker registered: job running";
    phase_ = Phase::kRunning;
  }
  if (!formed_ || !recovery_.idle()) return;
  // A dead worker is over once its data is trained (it reported done), or
  // when the job may drop its share.
  const auto clock_states = clock_.States();
  bool any_final = false, all_over = true;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    const bool trained = clock_states[m.index] == ClockService::WorkerState::kFinished;
    if (workers_.reported_final(m.index))
      any_final = true;
    else if (m.state != DEAD || !(trained || loss_.drops()))
      all_over = false;
  }
  // The job ends after the control thread took the final cut (servers exit
  // when it ends).
  if (all_over && any_final && (!checkpoints_on_ || cuts_.final_done()) &&
      !EvaluationsPendingLocked()) {
    phase_ = Phase::kDone;
    if (const uint64_t untrained = UntrainedSamplesLocked(); untrained > 0) {
      LOG(WARNING) << "the job ends without the shares of the workers it lost: about " << untrained
                   << " samples untrained (cluster.on_worker_loss DROP)";
    }
    LOG(INFO) << "job done\n" << SummaryLocked();
    clock_.Abort("job done");
  }
}

std::string JobState::SummaryLocked() const {
  return workers_.Summary(members_.Members(), clock_.Clocks(), loss_.drops());
}

uint64_t JobState::UntrainedSamplesLocked() const {
  if (!loss_.drops()) return 0;
  std::vector<uint32_t> lost;
  for (const Member& m : members_.Members()) {
    if (m.role == WORKER && !workers_.reported_final(m.index) && m.state == DEAD) {
      lost.push_back(m.index);
    }
  }
  return loss_.UntrainedSamples(workers_.LongestFinished(), clock_.Clocks(), lost,
                                config_.training().batch_size());
}

RecoveryBook::Pending& JobState::PendLocked(const std::string& cause, absl::Time failed_at,
                                            absl::Time now) {
  RecoveryBook::Pending& pending = recovery_.Pend(cause, failed_at, now);
  clock_.SetPaused(true);
  changed_.SignalAll();
  return pending;
}

void JobState::ServerFailedLocked(uint32_t index, const std::string& cause, absl::Time failed_at,
                                  absl::Time now, bool lost) {
  RecoveryBook::Pending& p = PendLocked(cause, failed_at, now);
  (lost ? p.lost : p.silent).insert(index);
  if (lost) p.silent.erase(index);
}

bool JobState::WorkerLostLocked(uint32_t rank) {
  if (!loss_.LeavesClock()) return false;
  clock_.MarkDead(rank);
  return true;
}

void JobState::CheckServerDeadlinesLocked(const std::vector<Member>& members, absl::Time now) {
  const ClusterConfig& k = config_.cluster();
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
}

void JobState::CheckWorkerDeadlinesLocked(const std::vector<Member>& members, absl::Time now) {
  const ClusterConfig& k = config_.cluster();
  if (!formed_ || EndedLocked()) return;
  const auto states = clock_.States();
  // Dead with its data unfinished, per worker rank.
  std::vector<bool> lost_share(workers_.num_workers(), false);
  for (const Member& m : members) {
    if (m.role != WORKER) continue;
    lost_share[m.index] = m.state == DEAD && !workers_.reported_final(m.index) &&
                          states[m.index] != ClockService::WorkerState::kFinished;
  }
  const auto unfinished = [&](const Member& m) { return m.role == WORKER && lost_share[m.index]; };
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
    const bool here =
        (m.state != DEAD && !never) || (loss_.drops() && workers_.reported_final(m.index));
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

void JobState::WorkerStartedLocked(uint32_t rank, absl::Time now) {
  if (!loss_.Started(rank)) return;
  (void)ResumeAfterRewindLocked(now);  // None is missing: no worker is lost.
  recovery_.CompleteRewind(now);
}

bool JobState::ResumeAfterRewindLocked(absl::Time now) {
  if (!loss_.clocks_held() || EndedLocked() || !recovery_.idle()) return false;
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

void JobState::HoldFirstCutLocked(uint64_t after) {
  if (!checkpoints_on_) return;
  // HoldFirstUnstarted keeps an earlier hold: the first of the two.
  for (uint64_t k : cuts_.multiples()) clock_.HoldFirstUnstarted(k, after + 1);
}

void JobState::ResumeEvaluationsLocked(uint64_t clock, const std::vector<uint64_t>& points) {
  if (!evals_.on()) return;
  if (absl::Status st = evals_.DropAfter(clock); !st.ok()) LOG(WARNING) << st;
  for (uint64_t c : points) {
    if (c <= clock) evals_.Enqueue(c, /*final=*/false);
  }
  if (evals_.stopped_at() > 0) {
    clock_.StopAt(evals_.stopped_at(), "early stopping (recorded before a restart)");
  }
  MaybeStopLocked();
}

void JobState::MaybeStopLocked() {
  if (!evals_.on() || clock_.StopClock() || !evals_.ShouldStop()) return;
  const EarlyStoppingConfig& es = config_.training().early_stopping();
  const std::string why = absl::StrCat("early stopping: ", es.patience(),
                                       " evaluations without an AUC gain of more "
                                       "than ",
                                       es.min_delta());
  const uint64_t at = clock_.StopAtFirstUnstarted(why);
  LOG(INFO) << why << "; training stops at clock " << at;
  if (absl::Status st = evals_.SetStopped(at); !st.ok()) LOG(WARNING) << st;
  changed_.SignalAll();
}

bool JobState::EvaluationsPendingLocked() const {
  if (!evals_.Outstanding()) return false;
  for (const Member& m : members_.Members()) {
    if (m.role == WORKER && (m.state == ALIVE || m.state == FINISHED)) return true;
  }
  return false;  // Nobody left to evaluate them: the job does not wait.
}

bool JobState::AllRegisteredOnce() const {
  for (const Member& m : members_.Members()) {
    if (m.state == STATE_UNSPECIFIED) return false;
  }
  return true;
}

std::vector<uint32_t> JobState::MissingServers() const {
  std::vector<uint32_t> missing;
  for (const Member& m : members_.Members()) {
    if (m.role == SERVER && m.state != ALIVE) missing.push_back(m.index);
  }
  return missing;
}

}  // namespace shardps
