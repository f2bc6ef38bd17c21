// JobCoordinator: what workers ask while they train: where to start, the
// clock, barriers, metrics, the partition map and the checkpoints to
// evaluate (job.h).
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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
      const bool formed = state_.formed();
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
  RETURN_IF_ERROR(state_.WaitForMap(std::max<uint64_t>(1, request.min_version()), deadline));
  *response = *members_.Map();
  return absl::OkStatus();
}

absl::Status JobCoordinator::WaitStart(const WaitStartRequest& request,
                                       WaitStartResponse* response) {
  const uint32_t rank = request.rank();
  if (rank >= config_.cluster().num_workers() || !members_.Registered(WORKER, rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("WaitStart: worker ", rank, " has not registered with this scheduler"));
  }
  return state_.WaitStart(rank,
                          request.has_after_generation()
                              ? std::optional<uint64_t>(request.after_generation())
                              : std::nullopt,
                          DeadlineFromMs(request.timeout_ms()), response);
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
  auto min = state_.Ticked(request.rank(), request.clock(), request.generation(),
                           request.position(), request.samples());
  if (!min.ok()) return min.status();
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::RequestRollBack(const RollBackRequest& request) {
  RETURN_IF_ERROR(CheckWorker("RollBack", request.rank(), /*finished_ok=*/false));
  return state_.PendRollBack(request);
}

absl::Status JobCoordinator::Barrier(const BarrierRequest& request, BarrierResponse* response) {
  if (request.role() != WORKER || request.index() >= config_.cluster().num_workers()) {
    return absl::InvalidArgumentError("barrier: only workers with a valid rank");
  }
  RETURN_IF_ERROR(CheckWorker("Barrier", request.index(), /*finished_ok=*/true));
  return state_.EnterBarrier(request.index(), request.name(), request.generation(),
                             DeadlineFromMs(request.timeout_ms()), response);
}

absl::Status JobCoordinator::ReportMetrics(const MetricsReport& report) {
  const uint32_t rank = report.rank();
  if (rank >= config_.cluster().num_workers() || !members_.Registered(WORKER, rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("metrics: worker ", rank, " has not registered with this scheduler; refused"));
  }
  const absl::Time now = absl::Now();
  if (report.error().empty()) {
    RETURN_IF_ERROR(CheckWorker("metrics", rank, /*finished_ok=*/true));
    // A report of an older generation is refused as stale, not judged.
    RETURN_IF_ERROR(state_.CheckCurrent(report.generation()));
    RETURN_IF_ERROR(ValidateReport(report, clock_.MayTickTo(rank)));
  } else {
    const std::string why = absl::StrCat("failed: ", report.error());
    LOG(ERROR) << "worker " << rank << " " << why;
    members_.MarkDead(WORKER, rank, why, now);
    if (state_.WorkerFailed(rank)) state_.Notify();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(state_.Reported(report, now));
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
  return state_.Evaluation(rank, request, deadline, response);
}

}  // namespace shardps
