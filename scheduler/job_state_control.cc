// JobState: what the control thread does to the job's state
// (job_state.h): formation, rollbacks and recoveries, its loop, its cuts and
// its moves.
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/generation.h"
#include "glog/logging.h"
#include "scheduler/job_state.h"

namespace shardps {
namespace {

double Secs(absl::Duration d) { return absl::ToDoubleSeconds(d); }
double UnixSec(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

// ---- The control thread: formation and recoveries ----

bool JobState::WaitFormable(absl::Time start, absl::Duration settle, const std::atomic<bool>& stop,
                            std::optional<std::string>* takeover_problem) {
  MutexLock lock(&mu_);
  while (true) {
    if (stop || EndedLocked()) return false;
    const absl::Time now = absl::Now();
    bool workers = true;
    for (const Member& m : members_.Members()) {
      if (m.role == WORKER && m.state == STATE_UNSPECIFIED) workers = false;
    }
    if (MissingServers().empty() && now - start >= settle && (!takeover_.active() || workers)) {
      break;
    }
    recovery_.ClearDoing();
    changed_.WaitUntil(&mu_, now + absl::Milliseconds(50));
  }
  takeover_problem->reset();
  if (takeover_.active()) *takeover_problem = takeover_.Problem(members_.MapServers());
  return true;
}

void JobState::TakeOver(const absl::StatusOr<std::vector<RestorePoint>>& points, absl::Time start) {
  MutexLock lock(&mu_);
  generation_ = takeover_.generation();
  clock_.SetGeneration(generation_);
  cuts_.StartFrom(points.ok() && !points->empty() ? points->front().clock : 0);
  std::vector<uint64_t> kept;
  if (points.ok()) {
    for (const RestorePoint& p : *points) kept.push_back(p.clock);
  }
  ResumeEvaluationsLocked(UINT64_MAX, kept);  // Nothing rolled back.
  formed_ = true;
  RecoveryReport report;
  report.set_kind("takeover");
  report.set_cause("the scheduler restarted; every server and worker rejoined with its state");
  report.set_generation(generation_);
  report.set_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  report.set_started_unix_sec(UnixSec(start));
  report.set_wait_sec(Secs(absl::Now() - start));
  report.set_total_sec(report.wait_sec());
  report.set_complete(true);
  recovery_.Record(report);
  HoldFirstCutLocked(cuts_.last_complete());
  clock_.ResetMaxSpread();  // Spreads seen while processes rejoined are not real.
  clock_.SetPaused(false);
  UpdateLocked();
  changed_.SignalAll();
}

bool JobState::WaitForServers(const std::atomic<bool>& stop) {
  MutexLock lock(&mu_);
  while (true) {
    if (stop || EndedLocked()) return false;
    const std::vector<uint32_t> missing = MissingServers();
    if (missing.empty()) return true;
    recovery_.SetDoing(absl::StrCat("waiting for servers [", absl::StrJoin(missing, ","),
                                    "] to register again (at most server_deadline_ms, ",
                                    config_.cluster().server_deadline_ms(), " ms)"));
    changed_.WaitUntil(&mu_, absl::Now() + absl::Milliseconds(50));
  }
}

uint64_t JobState::BeginRollBack() {
  MutexLock lock(&mu_);
  recovery_.ClearPending();  // This rollback covers every failure so far.
  recovery_.SetDoing("restoring every server");
  return NextGeneration(takeover_.MaxGeneration(generation_));
}

void JobState::Rewound(const RestorePoint& point, uint64_t generation, RecoveryReport* report,
                       bool record, const std::vector<uint64_t>& kept) {
  MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  generation_ = generation;
  workers_.Rewind(point.clock, point.positions);
  // Every worker trains again from the point, the missing ones included:
  // after a failure (not at a new job's start) the clocks stay paused until
  // every worker has started in the new generation (WaitStart), those
  // restarted after the failure too, or start_deadline_ms passed
  // (ResumeAfterRewindLocked).
  const bool after_failure = formed_ || takeover_.active();
  std::vector<bool> live(workers_.num_workers(), true);
  std::vector<uint32_t> workers;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    if (m.state == FINISHED) members_.Reopen(m.index, now);
    workers.push_back(m.index);
  }
  loss_.BeginRewind(workers);
  clock_.Rewind(generation, point.clock, live);
  cuts_.StartFrom(point.initial ? 0 : point.clock);
  HoldFirstCutLocked(point.clock);
  ResumeEvaluationsLocked(point.clock, kept);
  clock_.ResetMaxSpread();
  formed_ = true;
  recovery_.ClearDoing();
  recovery_.RewindStarted(now);
  report->set_generation(generation);
  report->set_initial(point.initial);
  report->set_clock(point.clock);
  if (record) recovery_.Record(*report);
  if (after_failure) {
    loss_.HoldClocks(now);
    LOG(INFO) << "the clocks resume once every worker has started at clock " << point.clock
              << " (at most start_deadline_ms, " << config_.cluster().start_deadline_ms() << " ms)";
  } else {
    loss_.ReleaseClocks(/*forget_awaited=*/!record);
    clock_.SetPaused(false);
  }
  UpdateLocked();
  changed_.SignalAll();
}

std::optional<RecoveryBook::Pending> JobState::TakeUpRecovery() {
  MutexLock lock(&mu_);
  if (recovery_.pending() == nullptr) return std::nullopt;
  recovery_.SetDoing("waiting for the failed servers");
  return *recovery_.pending();
}

bool JobState::EndRejoin(const RecoveryBook::Pending& p, RecoveryReport* report) {
  MutexLock lock(&mu_);
  const RecoveryBook::Pending* now_pending = recovery_.pending();
  if (now_pending == nullptr || !now_pending->lost.empty() || !now_pending->silent.empty() ||
      now_pending->roll_back) {
    return false;
  }
  // Every server declared dead came back with its state (it was stalled,
  // not gone): nothing to restore.
  report->set_kind("rejoin");
  report->set_generation(generation_);
  report->set_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  report->set_wait_sec(Secs(absl::Now() - p.detected_at));
  report->set_total_sec(report->detect_sec() + report->wait_sec());
  report->set_complete(true);
  recovery_.Record(*report);
  recovery_.ClearPending();
  recovery_.ClearDoing();
  if (!loss_.clocks_held()) clock_.SetPaused(false);
  UpdateLocked();
  changed_.SignalAll();
  return true;
}

std::set<uint32_t> JobState::BeginPartialRecovery(const RecoveryBook::Pending& p,
                                                  uint64_t* generation) {
  MutexLock lock(&mu_);
  std::set<uint32_t> lost = recovery_.pending() != nullptr ? recovery_.pending()->lost : p.lost;
  *generation = generation_;
  recovery_.ClearPending();
  recovery_.SetDoing("restoring the replaced servers (partial recovery)");
  return lost;
}

void JobState::EndPartialRecovery(const RecoveryReport& report) {
  MutexLock lock(&mu_);
  recovery_.Record(report);
  recovery_.ClearDoing();
  if (!loss_.clocks_held()) clock_.SetPaused(false);
  UpdateLocked();
  changed_.SignalAll();
}

void JobState::Doing(std::string what) {
  MutexLock lock(&mu_);
  recovery_.SetDoing(std::move(what));
}

// ---- The control thread's loop ----

JobState::ControlWork JobState::WaitControlWork(uint64_t* serving) {
  MutexLock lock(&mu_);
  changed_.WaitUntil(&mu_, absl::Now() + absl::Milliseconds(10));
  if (EndedLocked()) return ControlWork::kEnded;
  if (recovery_.pending() != nullptr) return ControlWork::kRecover;
  if (!checkpoints_on_) return ControlWork::kCut;
  const absl::Time now = absl::Now();
  if (move_.Wanted() && MoveMayStartLocked(now)) {
    clock_.HoldFirstUnstarted(1);  // At the first unstarted clock (or a hold already set).
    return ControlWork::kMove;
  }
  if (cuts_.requested() > *serving) {  // On demand: the first unstarted clock.
    clock_.HoldFirstUnstarted(1);
    *serving = cuts_.requested();
  } else if ((cuts_.TimeDue(now) && !clock_.HeldClock()) || cuts_.RetryDue(now)) {
    // Due by time, or a failed cut tried again: the first unstarted clock.
    clock_.HoldFirstUnstarted(1);
  }
  return ControlWork::kCut;
}

void JobState::ControlEnded() {
  MutexLock lock(&mu_);
  control_over_ = true;
  UpdateLocked();
  changed_.SignalAll();
}

// ---- Cuts ----

JobState::CutInput JobState::BeginCut() const {
  MutexLock lock(&mu_);
  return CutInput{workers_.LatestPositions(), generation_, evals_.Pinned()};
}

JobState::NextCut JobState::CutsAfter(uint64_t held, absl::Time now) const {
  MutexLock lock(&mu_);
  return NextCut{cuts_.NextAfter(held), cuts_.VersionOnly(held, now)};
}

void JobState::CutEnded(uint64_t clock, const absl::Status& status, uint64_t serving,
                        absl::Duration hold, absl::Duration write, absl::Time end, bool final) {
  MutexLock lock(&mu_);
  cuts_.Completed(clock, status, serving, hold, write, end);
  if (status.ok()) evals_.Enqueue(clock, final);
  changed_.SignalAll();
}

void JobState::VersionEnded(uint64_t clock, const absl::Status& status, absl::Duration hold) {
  MutexLock lock(&mu_);
  cuts_.VersionCompleted(clock, status, hold);
  changed_.SignalAll();
}

std::optional<absl::Duration> JobState::CutFailed(uint64_t clock, const absl::Status& status,
                                                  bool server_gone, const std::string& dir) {
  MutexLock lock(&mu_);
  if (server_gone || recovery_.pending() != nullptr || EndedLocked()) {
    return std::nullopt;  // A recovery takes over.
  }
  const std::optional<absl::Duration> backoff = cuts_.CountFailure(absl::Now());
  if (!backoff) {
    FailLocked(absl::StrCat("checkpoint at clock ", clock, " failed ", cuts_.failures(),
                            " times in a row (checkpoint.dir ", dir, "): ", status.ToString()));
    return std::nullopt;
  }
  LOG(ERROR) << "checkpoint at clock " << clock << ": attempt " << cuts_.failures() << " of "
             << CutBook::kAttempts << " failed; trying again in " << absl::FormatDuration(*backoff);
  return backoff;
}

std::optional<uint64_t> JobState::FinalCutDue() const {
  MutexLock lock(&mu_);
  if (!cuts_.FinalDue(absl::Now())) return std::nullopt;
  return cuts_.last_complete();
}

void JobState::FinalCutTaken() {
  MutexLock lock(&mu_);
  // The job's last state is evaluated too (when it was cut before).
  if (cuts_.last_complete() > 0) evals_.Enqueue(cuts_.last_complete(), /*final=*/true);
  cuts_.FinalDone();
  UpdateLocked();
  changed_.SignalAll();
}

std::optional<std::vector<uint64_t>> JobState::PinnedAtEnd() const {
  MutexLock lock(&mu_);
  if (!evals_.on() || phase_ != Phase::kDone) return std::nullopt;
  return evals_.Pinned();
}

// ---- Moves ----

bool JobState::MoveMayStartLocked(absl::Time now) {
  std::vector<uint32_t> missing;
  if (move_.RetryWaiting()) {
    const uint32_t involved = move_.Involved(members_.MapServers());
    for (uint32_t i = 0; i < involved; ++i) {
      const std::optional<Member> m = members_.Get(SERVER, i);
      if (!m || m->state != ALIVE) missing.push_back(i);
    }
  }
  const bool may = move_.MayStart(now, missing);
  if (!may && !move_.Wanted()) changed_.SignalAll();  // Answered with the failure.
  return may;
}

JobState::MoveStep JobState::BeginMoveStep(uint64_t clock) const {
  MutexLock lock(&mu_);
  return MoveStep{move_.target(), move_.requested(), generation_, cuts_.NextAfter(clock),
                  move_.in_flight()};
}

void JobState::ForgetMove() {
  MutexLock lock(&mu_);
  move_.Forget();
}

void JobState::MovePrecopied(PartitionMove::InFlight move) {
  MutexLock lock(&mu_);
  move_.Precopied(std::move(move));
}

bool JobState::MoveStepEnded(const PartitionMove::Step& step, absl::Time now, uint64_t* next) {
  MutexLock lock(&mu_);
  recovery_.ClearDoing();
  *next = cuts_.NextAfter(step.clock);
  const bool retry = move_.StepEnded(step, now);
  changed_.SignalAll();
  return retry;
}

void JobState::EndMoves(const std::string& why) {
  MutexLock lock(&mu_);
  if (!move_.Wanted()) return;
  move_.AnswerAll(why);
  changed_.SignalAll();
}

}  // namespace shardps
