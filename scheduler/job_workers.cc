// JobCoordinator: what workers ask while they train: where to start, the
// clock, barriers, metrics, the partition map and the checkpoints to
// evaluate (job.h).
#include <algorithm>
#include <cmath>
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

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

absl::Time DeadlineFromMs(uint32_t timeout_ms) {
  return absl::Now() + (timeout_ms == 0 ? absl::Seconds(30) : Ms(timeout_ms));
}

}  // namespace
absl::Status JobCoordinator::CheckWorker(const char* what, uint32_t rank, bool finished_ok) const {
  const std::optional<Member> m = members_.Get(WORKER, rank);
  if (!m) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": worker rank ", rank, " out of range [0, ", config_.cluster().num_workers(), ")"));
  }
  switch (m->state) {
    case ALIVE:
      return absl::OkStatus();
    case FINISHED:
      if (finished_ok) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": worker ", rank, " already finished its data"));
    case DEAD:
      return absl::UnavailableError(
          absl::StrCat(what, ": worker ", rank, " was declared dead (", m->reason,
                       "); it rejoins with its next heartbeat, then a retry is accepted"));
    default: {
      bool formed;
      {
        MutexLock lock(&state_.mu);
        formed = state_.formed;
      }
      const std::string why =
          absl::StrCat(what, ": worker ", rank, " has not registered with this scheduler; refused");
      // Before the job formed, a live process of an earlier scheduler may
      // still be on its way to rejoin: it retries.
      return formed ? absl::FailedPreconditionError(why) : absl::UnavailableError(why);
    }
  }
}

absl::Status JobCoordinator::CheckSender(const char* what, Role role, uint32_t index,
                                         uint64_t incarnation) const {
  const std::optional<Member> m = members_.Get(role, index);
  if (!m || (m->state != ALIVE && m->state != FINISHED) || m->incarnation == incarnation) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", role == SERVER ? "server " : "worker ", index,
                   " is held by another process (the request ",
                   incarnation == 0 ? "names no incarnation" : "names another incarnation",
                   " than its registration); refused"));
}

absl::Status JobCoordinator::ValidateReport(const MetricsReport& r, uint64_t max_step) const {
  const auto bad = [&r](const char* field, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics of worker ", r.rank(), ": ", field, " ", what, "; report refused"));
  };
  const std::pair<const char*, double> amounts[] = {{"samples_per_sec", r.samples_per_sec()},
                                                    {"train_loss", r.train_loss()},
                                                    {"eval_loss", r.eval_loss()},
                                                    {"wait_sec", r.wait_sec()},
                                                    {"pull_sec", r.pull_sec()},
                                                    {"compute_sec", r.compute_sec()},
                                                    {"push_sec", r.push_sec()},
                                                    {"data_sec", r.data_sec()}};
  for (const auto& [field, v] : amounts) {
    if (!std::isfinite(v) || v < 0) {
      return bad(field, absl::StrCat("is ", v, " (must be finite and >= 0)"));
    }
  }
  for (const auto& [field, v] :
       {std::pair<const char*, double>{"eval_auc", r.eval_auc()}, {"train_auc", r.train_auc()}}) {
    if (!(v >= 0 && v <= 1)) return bad(field, absl::StrCat("is ", v, " (must be in [0, 1])"));
  }
  if (r.step() > max_step) {
    return bad("step", absl::StrCat("is ", r.step(), " but the worker was allowed to start ",
                                    "steps < ", max_step, " only"));
  }
  const uint64_t batch = std::max<uint64_t>(1, config_.training().batch_size());
  if (r.step() > UINT64_MAX / batch || r.samples() > r.step() * batch) {
    return bad("samples", absl::StrCat("is ", r.samples(), ": more than step (", r.step(),
                                       ") x training.batch_size (", batch, ")"));
  }
  return absl::OkStatus();
}

absl::Status JobCoordinator::GetPartitionMap(const GetPartitionMapRequest& request,
                                             PartitionMapProto* response) {
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  const uint64_t want = std::max<uint64_t>(1, request.min_version());
  MutexLock lock(&state_.mu);
  while (members_.MapVersion() < want || !state_.formed) {
    if (state_.phase == JobState::Phase::kFailed) return absl::AbortedError(state_.failure);
    if (!state_.changed.WaitUntil(&state_.mu, deadline) &&
        (members_.MapVersion() < want || !state_.formed)) {
      return absl::DeadlineExceededError(
          absl::StrCat("partition map version ", want, " not ready: waiting for servers"));
    }
  }
  *response = *members_.Map();
  return absl::OkStatus();
}

std::optional<uint32_t> JobCoordinator::LeaseOrphanLocked(uint32_t rank, absl::Time now) {
  if (!state_.loss.reassigns() || !state_.formed || !state_.recovery.idle() ||
      state_.loss.clocks_held() || clock_.States()[rank] != ClockService::WorkerState::kFinished) {
    return std::nullopt;
  }
  const absl::Duration dead_after = Ms(config_.cluster().dead_after_ms());
  const auto states = clock_.States();
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER || m.index == rank || m.state != DEAD || state_.reported_final[m.index] ||
        states[m.index] != ClockService::WorkerState::kDead || now - m.state_since < dead_after) {
      continue;
    }
    if (!state_.loss.TakeLease(m.index, now, 2 * dead_after)) continue;
    LOG(INFO) << "worker " << rank << " finished its share and takes over worker " << m.index
              << "'s, unfinished at clock " << clock_.Clocks()[m.index] << " (" << m.reason << ")";
    return m.index;
  }
  return std::nullopt;
}

std::string JobCoordinator::StartWaitLocked() const {
  if (!state_.formed) {
    std::vector<uint32_t> missing;
    for (const Member& m : members_.Members()) {
      if (m.role == SERVER && m.state != ALIVE) missing.push_back(m.index);
    }
    if (!missing.empty()) {
      return absl::StrCat("servers [", absl::StrJoin(missing, ","), "] to register");
    }
    return state_.takeover.active() ? "every worker to rejoin the restarted scheduler"
                                    : "the job to form (servers being set up)";
  }
  if (!state_.recovery.idle()) return state_.recovery.Waiting();
  return absl::StrCat("a rollback or the job's end (generation ", state_.generation,
                      " is still current)");
}

absl::Status JobCoordinator::WaitStart(const WaitStartRequest& request,
                                       WaitStartResponse* response) {
  const uint32_t rank = request.rank();
  if (rank >= state_.reported_final.size() || !members_.Registered(WORKER, rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("WaitStart: worker ", rank, " has not registered with this scheduler"));
  }
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  MutexLock lock(&state_.mu);
  while (true) {
    if (state_.phase == JobState::Phase::kFailed) return absl::AbortedError(state_.failure);
    if (state_.phase == JobState::Phase::kDone) {
      response->set_job_ended(true);
      return absl::OkStatus();
    }
    const bool newer =
        !request.has_after_generation() || state_.generation > request.after_generation();
    if (state_.formed && state_.recovery.idle() && newer) break;
    if (request.has_after_generation() && request.after_generation() == state_.generation) {
      if (const std::optional<uint32_t> orphan = LeaseOrphanLocked(rank, absl::Now())) {
        response->set_generation(state_.generation);
        response->set_adopt_rank(*orphan);
        return absl::OkStatus();
      }
    }
    if (!state_.changed.WaitUntil(&state_.mu, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("worker ", rank, " waits for ", StartWaitLocked()));
    }
  }
  const uint64_t clock = clock_.Clocks()[rank];
  response->set_generation(state_.generation);
  response->set_clock(clock);
  auto it = state_.positions.find(rank);
  if (it != state_.positions.end() && it->second.first == clock) {
    response->set_position(it->second.second);
  }
  *response->mutable_map() = *members_.Map();
  state_.WorkerStarted(rank, absl::Now());
  return absl::OkStatus();
}

absl::Status JobCoordinator::WaitClock(const WaitClockRequest& request,
                                       WaitClockResponse* response) {
  // timeout_ms 0 asks without waiting (a worker deciding whether to prefetch).
  RETURN_IF_ERROR(CheckWorker("WaitClock", request.rank(), /*finished_ok=*/true));
  auto min = clock_.WaitToStart(request.rank(), request.step(),
                                absl::Now() + Ms(request.timeout_ms()), request.generation());
  if (!min.ok()) return min.status();
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::Tick(const TickRequest& request, TickResponse* response) {
  RETURN_IF_ERROR(CheckWorker("Tick", request.rank(), /*finished_ok=*/false));
  const uint64_t batch = std::max<uint64_t>(1, config_.training().batch_size());
  if (request.clock() > UINT64_MAX / batch || request.samples() > request.clock() * batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Tick: worker ", request.rank(), " claims ", request.samples(), " samples at clock ",
        request.clock(), ": more than clock x training.batch_size (", batch, "); refused"));
  }
  // The tick and its data position together: a cut placed once every worker
  // ticked its clock (AllReachedHold, then Cut under state_.mu) must find the
  // position of that clock, never the one before.
  MutexLock lock(&state_.mu);
  auto min = clock_.Tick(request.rank(), request.clock(), request.generation());
  if (!min.ok()) return min.status();
  if (!request.position().empty()) {
    state_.positions[request.rank()] = {request.clock(), request.position()};
  }
  state_.loss.RecordTick(request.rank(), request.samples());
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::RequestRollBack(const RollBackRequest& request) {
  RETURN_IF_ERROR(CheckWorker("RollBack", request.rank(), /*finished_ok=*/false));
  MutexLock lock(&state_.mu);
  if (config_.cluster().mode() != BSP || state_.loss.LeavesClock()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RollBack from worker ", request.rank(),
        ": only a BSP job with "
        "cluster.on_worker_loss WAIT rolls back for a step a worker cannot redo; refused"));
  }
  if (request.generation() != state_.generation) {
    LOG(INFO) << "worker " << request.rank() << " asked for a rollback in generation "
              << request.generation() << "; the job is in " << state_.generation << " already";
    return absl::OkStatus();
  }
  const std::string cause =
      absl::StrCat("worker ", request.rank(), " cannot redo step ", request.clock(), " exactly (",
                   request.cause().substr(0, 400), ")");
  const absl::Time now = absl::Now();
  state_.Pend(cause, now, now).roll_back = true;
  return absl::OkStatus();
}

absl::Status JobCoordinator::Barrier(const BarrierRequest& request, BarrierResponse* response) {
  if (request.role() != WORKER || request.index() >= state_.reported_final.size()) {
    return absl::InvalidArgumentError("barrier: only workers with a valid rank");
  }
  RETURN_IF_ERROR(CheckWorker("Barrier", request.index(), /*finished_ok=*/true));
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  MutexLock lock(&state_.mu);
  const uint64_t generation = request.generation();
  RETURN_IF_ERROR(CheckGeneration("the scheduler", generation, state_.generation));
  std::vector<bool>& entered = state_.barriers[request.name()];
  entered.resize(state_.reported_final.size(), false);
  entered[request.index()] = true;
  state_.changed.SignalAll();
  while (true) {
    if (state_.phase == JobState::Phase::kFailed) return absl::AbortedError(state_.failure);
    // A rollback (another generation) empties the barriers.
    RETURN_IF_ERROR(CheckGeneration("the scheduler", generation, state_.generation));
    bool all = true;
    const std::vector<bool>& now_entered = state_.barriers[request.name()];
    const auto states = clock_.States();
    for (const Member& m : members_.Members()) {
      if (m.role != WORKER) continue;
      // A worker that finished (reported done) no longer counts, nor one
      // that died after it, or (on_worker_loss DROP) before.
      const bool trained =
          m.state == FINISHED || states[m.index] == ClockService::WorkerState::kFinished;
      const bool dropped = m.state == DEAD && state_.loss.drops();
      if (!now_entered[m.index] && !trained && !dropped) all = false;
    }
    if (all) return absl::OkStatus();
    if (const std::optional<uint32_t> orphan = LeaseOrphanLocked(request.index(), absl::Now())) {
      response->set_adopt_rank(*orphan);
      return absl::OkStatus();
    }
    if (!state_.changed.WaitUntil(&state_.mu, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("barrier \"", request.name(), "\" timed out"));
    }
  }
}

absl::Status JobCoordinator::ReportMetrics(const MetricsReport& report) {
  const uint32_t rank = report.rank();
  if (rank >= state_.reported_final.size() || !members_.Registered(WORKER, rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("metrics: worker ", rank, " has not registered with this scheduler; refused"));
  }
  const absl::Time now = absl::Now();
  if (report.error().empty()) {
    RETURN_IF_ERROR(CheckWorker("metrics", rank, /*finished_ok=*/true));
    {
      // A report of an older generation is refused as stale, not judged.
      MutexLock lock(&state_.mu);
      RETURN_IF_ERROR(CheckGeneration("the scheduler", report.generation(), state_.generation));
    }
    RETURN_IF_ERROR(ValidateReport(report, clock_.MayTickTo(rank)));
  } else {
    const std::string why = absl::StrCat("failed: ", report.error());
    LOG(ERROR) << "worker " << rank << " " << why;
    members_.MarkDead(WORKER, rank, why, now);
    bool notify;
    {
      MutexLock lock(&state_.mu);
      notify = state_.WorkerLost(rank);
      state_.Update();
      state_.changed.SignalAll();
    }
    if (notify) state_.Notify();
    return absl::OkStatus();
  }
  {
    MutexLock lock(&state_.mu);
    RETURN_IF_ERROR(CheckGeneration("the scheduler", report.generation(), state_.generation));
    if (report.done()) {
      members_.MarkFinished(rank, now);
      clock_.MarkFinished(rank);
    }
    state_.reports[rank] = report;
    if (report.final()) state_.reported_final[rank] = true;
    state_.Update();
    state_.changed.SignalAll();
  }
  if (report.done()) state_.Notify();
  return absl::OkStatus();
}

// Periodic evaluation. Why checkpoints: an evaluation must see one consistent state, the same as
// a standalone evaluation at that clock (ps_score). A cut is that state
// already, and the workers wait only for its in-memory copy; a worker then
// evaluates the checkpoint's files in its own process (RestoreJob +
// Trainer::Evaluate, exactly ps_score's code) while training goes on. So an
// evaluation never holds the clocks, and keep-best is "do not GC that
// checkpoint".
absl::Status JobCoordinator::Evaluation(const EvaluationRequest& request,
                                        EvaluationResponse* response) {
  const uint32_t rank = request.rank();
  RETURN_IF_ERROR(CheckWorker("Evaluation", rank, /*finished_ok=*/true));
  const absl::Time deadline =
      absl::Now() + std::min(absl::Milliseconds(request.timeout_ms()), absl::Seconds(60));
  MutexLock lock(&state_.mu);
  if (!state_.evals.on()) {
    return absl::FailedPreconditionError(
        "Evaluation: periodic evaluation is off (training.eval_every_steps is 0)");
  }
  if (request.has_done()) {
    if (!request.error().empty()) {
      state_.evals.Failed(rank, request.done().clock(), request.error());
    } else if (absl::Status st = state_.evals.Record(rank, request.done()); !st.ok()) {
      if (absl::IsInvalidArgument(st) || absl::IsFailedPrecondition(st)) return st;
      LOG(WARNING) << st;  // Recorded, but not persisted.
    }
    state_.MaybeStop();
    state_.Update();
    state_.changed.SignalAll();
  }
  while (true) {
    if (state_.Ended()) {
      response->set_job_ended(true);
      return absl::OkStatus();
    }
    if (state_.formed && state_.recovery.idle()) {
      // A dead worker's evaluation goes to another (a restarted process of
      // the same rank gets its own back from Take).
      for (const Member& m : members_.Members()) {
        if (m.role == WORKER && m.state == DEAD) state_.evals.Release(m.index);
      }
      state_.evals.ExpireLeases();
      if (std::optional<uint64_t> clock = state_.evals.Take(rank)) {
        response->set_clock(*clock);
        return absl::OkStatus();
      }
    }
    if (!state_.changed.WaitUntil(&state_.mu, deadline)) return absl::OkStatus();  // Nothing yet.
  }
}

}  // namespace shardps
