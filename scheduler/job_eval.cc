// JobCoordinator: periodic evaluation of checkpoints, keep-best and early
// stopping (job.h has the contract, eval_book.h the bookkeeping).
//
// Why checkpoints: an evaluation must see one consistent state, the same as
// a standalone evaluation at that clock (ps_score). A cut is that state
// already, and the workers wait only for its in-memory copy; a worker then
// evaluates the checkpoint's files in its own process (RestoreJob +
// Trainer::Evaluate, exactly ps_score's code) while training goes on. So an
// evaluation never holds the clocks, and keep-best is "do not GC that
// checkpoint".
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/job.h"

namespace shardps {

absl::Status JobCoordinator::LoadEvaluations() {
  MutexLock lock(&mu_);
  if (!evals_.on()) return absl::OkStatus();
  return evals_.Load();
}

void JobCoordinator::ResumeEvaluationsLocked(uint64_t clock, const std::vector<uint64_t>& points) {
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

void JobCoordinator::MaybeStopLocked() {
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

bool JobCoordinator::EvaluationsPendingLocked() const {
  if (!evals_.Outstanding()) return false;
  for (const Member& m : members_.Members()) {
    if (m.role == WORKER && (m.state == ALIVE || m.state == FINISHED)) return true;
  }
  return false;  // Nobody left to evaluate them: the job does not wait.
}

void JobCoordinator::EvalStatusLocked(JobStatusResponse* response) const {
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

void JobCoordinator::FinalCollect() {
  std::vector<uint64_t> pinned;
  {
    MutexLock lock(&mu_);
    if (!evals_.on() || state_ != State::kDone) return;
    pinned = evals_.Pinned();
  }
  ops_->PinCheckpoints(pinned);
  ops_->CollectGarbage();
}

absl::Status JobCoordinator::Evaluation(const EvaluationRequest& request,
                                        EvaluationResponse* response) {
  const uint32_t rank = request.rank();
  RETURN_IF_ERROR(CheckWorker("Evaluation", rank, /*finished_ok=*/true));
  const absl::Time deadline =
      absl::Now() + std::min(absl::Milliseconds(request.timeout_ms()), absl::Seconds(60));
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
    UpdateStateLocked();
    changed_.SignalAll();
  }
  while (true) {
    if (Ended()) {
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

}  // namespace shardps
