// JobState: the transitions on the scheduler's job state (job_state.h).
#include "scheduler/job_state.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config.h"
#include "glog/logging.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

}  // namespace

JobState::JobState(const JobConfig& config, Membership* members, ClockService* clock,
                   ServerNotifier notifier, absl::Time start_time)
    : reported_final(config.cluster().num_workers(), false),
      loss(EffectiveOnWorkerLoss(config.cluster())),
      cuts(config),
      evals(EvalBook::Options{config.checkpoint().dir(), config.training().eval_every_steps(),
                              config.training().early_stopping().patience(),
                              config.training().early_stopping().min_delta()}),
      config_(config),
      members_(*members),
      clock_(*clock),
      notifier_(std::move(notifier)),
      start_time_(start_time),
      checkpoints_on_(!config.checkpoint().dir().empty()) {}

void JobState::Fail(const std::string& why) {
  if (Ended()) return;
  phase = Phase::kFailed;
  failure = why;
  LOG(ERROR) << "job failed: " << why;
  clock_.Abort(absl::StrCat("job failed: ", why));
  changed.SignalAll();
}

void JobState::Update() {
  if (Ended()) return;
  if (phase == Phase::kWaiting && formed && AllRegisteredOnce()) {
    LOG(INFO) << "every server and worker registered: job running";
    phase = Phase::kRunning;
  }
  if (!formed || !recovery.idle()) return;
  // A dead worker is over once its data is trained (it reported done), or
  // when the job may drop its share.
  const auto clock_states = clock_.States();
  bool any_final = false, all_over = true;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    const bool trained = clock_states[m.index] == ClockService::WorkerState::kFinished;
    if (reported_final[m.index])
      any_final = true;
    else if (m.state != DEAD || !(trained || loss.drops()))
      all_over = false;
  }
  // The job ends after the control thread took the final cut (servers exit
  // when it ends).
  if (all_over && any_final && (!checkpoints_on_ || cuts.final_done()) && !EvaluationsPending()) {
    phase = Phase::kDone;
    if (const uint64_t untrained = UntrainedSamples(); untrained > 0) {
      LOG(WARNING) << "the job ends without the shares of the workers it lost: about " << untrained
                   << " samples untrained (cluster.on_worker_loss DROP)";
    }
    LOG(INFO) << "job done\n" << Summary();
    clock_.Abort("job done");
  }
}

std::string JobState::Summary() const {
  std::string out;
  const std::vector<uint64_t> clocks = clock_.Clocks();
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    // Steps acknowledged: the worker's clock (its reports may be older).
    auto it = reports.find(m.index);
    const uint64_t step = std::max(clocks[m.index], it == reports.end() ? 0 : it->second.step());
    const char* what = reported_final[m.index]        ? "finished"
                       : m.state == DEAD              ? "DEAD, data unfinished"
                       : m.state == STATE_UNSPECIFIED ? "not registered yet,"
                                                      : "training";
    absl::StrAppend(&out, "  worker ", m.index, ": ", what, " after ", step, " steps");
    if (!reported_final[m.index] && m.state == DEAD) {
      absl::StrAppend(
          &out, loss.drops() ? " (its shard from step " : " (waited for; its shard from step ",
          step, loss.drops() ? " on was not trained)" : " on is not trained yet)");
      if (!m.reason.empty()) absl::StrAppend(&out, ": ", m.reason);
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

uint64_t JobState::UntrainedSamples() const {
  if (!loss.drops()) return 0;
  uint64_t longest = 0;  // The most steps a finished worker trained.
  for (const auto& [rank, r] : reports) {
    if (reported_final[rank]) longest = std::max(longest, r.step());
  }
  std::vector<uint32_t> lost;
  for (const Member& m : members_.Members()) {
    if (m.role == WORKER && !reported_final[m.index] && m.state == DEAD) lost.push_back(m.index);
  }
  return loss.UntrainedSamples(longest, clock_.Clocks(), lost, config_.training().batch_size());
}

RecoveryBook::Pending& JobState::Pend(const std::string& cause, absl::Time failed_at,
                                      absl::Time now) {
  RecoveryBook::Pending& pending = recovery.Pend(cause, failed_at, now);
  clock_.SetPaused(true);
  changed.SignalAll();
  return pending;
}

void JobState::ServerFailed(uint32_t index, const std::string& cause, absl::Time failed_at,
                            absl::Time now, bool lost) {
  RecoveryBook::Pending& p = Pend(cause, failed_at, now);
  (lost ? p.lost : p.silent).insert(index);
  if (lost) p.silent.erase(index);
}

bool JobState::WorkerLost(uint32_t rank) {
  if (!loss.LeavesClock()) return false;
  clock_.MarkDead(rank);
  return true;
}

void JobState::CheckWorkerDeadlines(const std::vector<Member>& members, absl::Time now) {
  const ClusterConfig& k = config_.cluster();
  if (!formed || Ended()) return;
  const auto states = clock_.States();
  const auto unfinished = [&](const Member& m) {
    return m.role == WORKER && m.state == DEAD && !reported_final[m.index] &&
           states[m.index] != ClockService::WorkerState::kFinished;
  };
  if (!loss.LeavesClock()) {
    // The clocks wait for every lost worker: it has to come back.
    for (const Member& m : members) {
      if (!unfinished(m) || now - m.state_since <= Ms(k.worker_deadline_ms())) continue;
      Fail(absl::StrCat("worker ", m.index, " dead for more than worker_deadline_ms (",
                        k.worker_deadline_ms(), " ms) with its data unfinished at clock ",
                        clock_.Clocks()[m.index], " (cluster.on_worker_loss WAIT; ", m.reason,
                        "):\n", Summary()));
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
    const bool here = (m.state != DEAD && !never) || (loss.drops() && reported_final[m.index]);
    if (here) gone = false;
  }
  if (loss.reassigns() && !any_unfinished) gone = false;
  if (!gone) {
    workers_gone_since.reset();
  } else if (!workers_gone_since) {
    workers_gone_since = now;
    LOG(WARNING) << "every worker is dead; the job fails unless one is back within "
                 << k.worker_deadline_ms() << " ms";
  } else if (now - *workers_gone_since > Ms(k.worker_deadline_ms())) {
    Fail(absl::StrCat("every worker died and none came back within worker_deadline_ms (",
                      k.worker_deadline_ms(), " ms; cluster.on_worker_loss ", loss.policy_name(),
                      "):\n", Summary()));
  }
}

void JobState::WorkerStarted(uint32_t rank, absl::Time now) {
  if (!loss.Started(rank)) return;
  (void)ResumeAfterRewind(now);  // None is missing: no worker is lost.
  recovery.CompleteRewind(now);
}

bool JobState::ResumeAfterRewind(absl::Time now) {
  if (!loss.clocks_held() || Ended() || !recovery.idle()) return false;
  const ClusterConfig& k = config_.cluster();
  // With REASSIGN and DROP, a worker lost for worker_deadline_ms is not
  // waited for any more (the others go on; with WAIT the job failed).
  if (loss.LeavesClock()) {
    for (const Member& m : members_.Members()) {
      if (m.role == WORKER && m.state == DEAD && now - m.state_since > Ms(k.worker_deadline_ms())) {
        loss.StopAwaiting(m.index);
      }
    }
  }
  const std::vector<uint32_t> missing = loss.Awaited();
  const bool expired = loss.HoldExpired(now, Ms(k.start_deadline_ms()));
  if (!missing.empty() && !expired) return false;
  loss.ReleaseClocks(/*forget_awaited=*/true);
  bool changed = false;
  if (!missing.empty()) {
    LOG(WARNING) << "workers [" << absl::StrJoin(missing, ",")
                 << "] did not start within start_deadline_ms after the rollback; "
                 << (loss.LeavesClock() ? "the clocks resume without them"
                                        : "the clocks keep waiting for them");
    for (uint32_t rank : missing) changed |= WorkerLost(rank);
    recovery.CompleteRewind(now);
  } else {
    LOG(INFO) << "every worker started after the rollback: the clocks resume";
  }
  clock_.SetPaused(false);
  return changed;
}

void JobState::HoldFirstCut(uint64_t after) {
  if (!checkpoints_on_) return;
  // HoldFirstUnstarted keeps an earlier hold: the first of the two.
  for (uint64_t k : cuts.multiples()) clock_.HoldFirstUnstarted(k, after + 1);
}

void JobState::ResumeEvaluations(uint64_t clock, const std::vector<uint64_t>& points) {
  if (!evals.on()) return;
  if (absl::Status st = evals.DropAfter(clock); !st.ok()) LOG(WARNING) << st;
  for (uint64_t c : points) {
    if (c <= clock) evals.Enqueue(c, /*final=*/false);
  }
  if (evals.stopped_at() > 0) {
    clock_.StopAt(evals.stopped_at(), "early stopping (recorded before a restart)");
  }
  MaybeStop();
}

void JobState::MaybeStop() {
  if (!evals.on() || clock_.StopClock() || !evals.ShouldStop()) return;
  const EarlyStoppingConfig& es = config_.training().early_stopping();
  const std::string why = absl::StrCat("early stopping: ", es.patience(),
                                       " evaluations without an AUC gain of more "
                                       "than ",
                                       es.min_delta());
  const uint64_t at = clock_.StopAtFirstUnstarted(why);
  LOG(INFO) << why << "; training stops at clock " << at;
  if (absl::Status st = evals.SetStopped(at); !st.ok()) LOG(WARNING) << st;
  changed.SignalAll();
}

bool JobState::EvaluationsPending() const {
  if (!evals.Outstanding()) return false;
  for (const Member& m : members_.Members()) {
    if (m.role == WORKER && (m.state == ALIVE || m.state == FINISHED)) return true;
  }
  return false;  // Nobody left to evaluate them: the job does not wait.
}

void JobState::EvalStatus(JobStatusResponse* response) const {
  if (!evals.on()) return;
  for (const auto& [clock, e] : evals.evaluations()) *response->add_evaluations() = e;
  if (auto best = evals.Best()) {
    response->set_best_eval_clock(best->clock());
    response->set_best_eval_auc(best->auc());
  }
  response->set_early_stopped_at(evals.stopped_at());
  // The job's evaluation is its newest one (the final checkpoint's at the end).
  if (auto latest = evals.Latest()) {
    response->set_eval_auc(latest->auc());
    response->set_eval_loss(latest->logloss());
  }
}

void JobState::Notify() {
  auto map = members_.Map();
  if (!map || !notifier_) return;
  const std::vector<uint32_t> active = clock_.LiveRanks();
  notifier_(*map, active);
}

bool JobState::AllRegisteredOnce() const {
  for (const Member& m : members_.Members()) {
    if (m.state == STATE_UNSPECIFIED) return false;
  }
  return true;
}

}  // namespace shardps
