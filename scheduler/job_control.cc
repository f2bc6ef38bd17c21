// JobControl: formation and recoveries (job_control.h); the cuts are in
// job_cuts.cc.
#include "scheduler/job_control.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/generation.h"
#include "glog/logging.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }
double Secs(absl::Duration d) { return absl::ToDoubleSeconds(d); }
double UnixSec(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

// A restore that failed because a server is gone or unreachable (wait for
// the servers and restore again), rather than because of the checkpoint.
bool ServerTrouble(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) || absl::IsCancelled(st) ||
         absl::IsAborted(st);
}

std::string PointName(const RestorePoint& p) {
  return p.initial ? std::string("the initial values") : absl::StrCat("the checkpoint ", p.dir);
}

}  // namespace

JobControl::JobControl(const JobConfig& config, JobState* state, Membership* members,
                       ClockService* clock, ServerOps* ops, absl::Time start_time)
    : config_(config),
      state_(*state),
      members_(*members),
      clock_(*clock),
      ops_(ops),
      start_time_(start_time),
      checkpoints_on_(!config.checkpoint().dir().empty()) {}

JobControl::~JobControl() { Stop(); }

void JobControl::Start() {
  thread_ = std::thread([this] { Run(); });
}

void JobControl::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void JobControl::Run() {
  if (Form()) {
    uint64_t serving = 0;  // state_.cuts.requested() when the current cut was placed.
    while (!stop_) {
      bool recover, reshard = false;
      {
        MutexLock lock(&state_.mu);
        state_.changed.WaitUntil(&state_.mu, absl::Now() + absl::Milliseconds(10));
        if (state_.Ended()) break;
        recover = state_.recovery.pending() != nullptr;
        if (!recover && checkpoints_on_) {
          const absl::Time now = absl::Now();
          reshard = state_.reshard.requested > state_.reshard.served && ReshardReadyLocked(now);
          if (reshard) {  // A move: at the first unstarted clock (or a hold already set).
            clock_.HoldFirstUnstarted(1);
          } else if (state_.cuts.requested() > serving) {  // On demand: the first unstarted clock.
            clock_.HoldFirstUnstarted(1);
            serving = state_.cuts.requested();
          } else if ((state_.cuts.TimeDue(now) && !clock_.HeldClock()) ||
                     state_.cuts.RetryDue(now)) {
            // Due by time, or a failed cut tried again: the first unstarted
            // clock.
            clock_.HoldFirstUnstarted(1);
          }
        }
      }
      if (recover) {
        Recover();
        continue;
      }
      if (!checkpoints_on_) continue;
      if (!clock_.MinClock()) {
        {
          MutexLock lock(&state_.mu);
          if (state_.reshard.requested > state_.reshard.served) {
            // Nobody trains any more: nothing to move for.
            state_.reshard.error = "every worker has finished: the job is ending";
            state_.reshard.served = state_.reshard.requested;
            state_.reshard.retry_until.reset();
            state_.changed.SignalAll();
          }
        }
        TakeFinalCut(serving);
        continue;
      }
      const std::optional<uint64_t> held = clock_.HeldClock();
      if (!held || !clock_.AllReachedHold()) continue;
      if (reshard) {
        Reshard(*held, serving);
        continue;
      }
      uint64_t next;
      bool version_only;
      {
        MutexLock lock(&state_.mu);
        next = state_.cuts.NextAfter(*held);
        version_only = state_.cuts.VersionOnly(*held, absl::Now());
      }
      // A base the servers know: else this cut is a checkpoint (the first
      // after a takeover).
      version_only = version_only && ops_->CanCutVersion();
      if (version_only) {
        CutVersion(*held, next);
        continue;
      }
      AfterCut(*held, Cut(*held, next, serving));
    }
  }
  FinalCollect();
  MutexLock lock(&state_.mu);
  state_.control_over = true;
  state_.Update();
  state_.changed.SignalAll();
}

bool JobControl::Form() {
  const ClusterConfig& k = config_.cluster();
  // Live processes of an earlier scheduler rejoin at their next heartbeat:
  // give them that long before deciding the job is new.
  const absl::Duration settle =
      std::min(Ms(k.dead_after_ms()), Ms(2 * uint64_t{k.heartbeat_ms()} + 500));
  bool takeover;
  std::string problem;
  {
    MutexLock lock(&state_.mu);
    while (true) {
      if (stop_ || state_.Ended()) return false;
      const absl::Time now = absl::Now();
      bool servers = true, workers = true;
      for (const Member& m : members_.Members()) {
        if (m.role == SERVER && m.state != ALIVE) servers = false;
        if (m.role == WORKER && m.state == STATE_UNSPECIFIED) workers = false;
      }
      if (servers && now - start_time_ >= settle && (!state_.takeover.active() || workers)) break;
      state_.recovery.ClearDoing();
      state_.changed.WaitUntil(&state_.mu, now + absl::Milliseconds(50));
    }
    takeover = state_.takeover.active();
    if (takeover) problem = state_.takeover.Problem(members_.MapServers());
  }
  if (takeover && problem.empty()) {
    TakeOver();  // Every process came back with one state: the job goes on from it.
  } else {
    if (takeover) LOG(WARNING) << "taking the job over needs a rollback: " << problem;
    RecoveryReport report;
    report.set_kind(takeover ? "rollback" : "resume");
    report.set_cause(takeover ? absl::StrCat("the scheduler restarted and ", problem)
                              : "the job started");
    report.set_started_unix_sec(UnixSec(start_time_));
    if (!RollBack(&report, start_time_, /*record_initial=*/takeover)) return false;
  }
  state_.Notify();
  return true;
}

void JobControl::TakeOver() {
  auto points = ops_->RestorePoints();
  MutexLock lock(&state_.mu);
  state_.generation = state_.takeover.generation();
  clock_.SetGeneration(state_.generation);
  state_.cuts.StartFrom(points.ok() && !points->empty() ? points->front().clock : 0);
  std::vector<uint64_t> kept;
  if (points.ok()) {
    for (const RestorePoint& p : *points) kept.push_back(p.clock);
  }
  state_.ResumeEvaluations(UINT64_MAX, kept);  // Nothing rolled back.
  state_.formed = true;
  RecoveryReport report;
  report.set_kind("takeover");
  report.set_cause("the scheduler restarted; every server and worker rejoined with its state");
  report.set_generation(state_.generation);
  report.set_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  report.set_started_unix_sec(UnixSec(start_time_));
  report.set_wait_sec(Secs(absl::Now() - start_time_));
  report.set_total_sec(report.wait_sec());
  report.set_complete(true);
  state_.recovery.Record(report);
  state_.HoldFirstCut(state_.cuts.last_complete());
  clock_.ResetMaxSpread();  // Spreads seen while processes rejoined are not real.
  clock_.SetPaused(false);
  state_.Update();
  state_.changed.SignalAll();
}

bool JobControl::WaitForServers() {
  MutexLock lock(&state_.mu);
  while (true) {
    if (stop_ || state_.Ended()) return false;
    std::vector<uint32_t> missing;
    for (const Member& m : members_.Members()) {
      if (m.role == SERVER && m.state != ALIVE) missing.push_back(m.index);
    }
    if (missing.empty()) return true;
    state_.recovery.SetDoing(absl::StrCat("waiting for servers [", absl::StrJoin(missing, ","),
                                          "] to register again (at most server_deadline_ms, ",
                                          config_.cluster().server_deadline_ms(), " ms)"));
    state_.changed.WaitUntil(&state_.mu, absl::Now() + absl::Milliseconds(50));
  }
}

bool JobControl::RollBack(RecoveryReport* report, absl::Time detected_at, bool record_initial) {
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    if (!WaitForServers()) return false;
    const absl::Time back = absl::Now();
    uint64_t generation;
    {
      MutexLock lock(&state_.mu);
      state_.recovery.ClearPending();  // This rollback covers every failure so far.
      state_.recovery.SetDoing("restoring every server");
      generation = NextGeneration(state_.takeover.MaxGeneration(state_.generation));
    }
    auto points = ops_->RestorePoints();
    if (!points.ok()) {
      MutexLock lock(&state_.mu);
      state_.Fail(absl::StrCat("cannot read the job's checkpoints: ", points.status().message()));
      return false;
    }
    std::vector<RestorePoint> candidates = *std::move(points);
    // Corrupt checkpoints newer than the newest usable one are never
    // skipped quietly (checkpoint.on_corrupt).
    if (!CheckNewerCheckpoints(candidates.empty() ? -1
                                                  : static_cast<int64_t>(candidates[0].clock))) {
      return false;
    }
    if (candidates.empty()) candidates.emplace_back();  // The initial values.
    const std::optional<PartitionMapProto> map = members_.Map();
    absl::Status last;
    std::optional<size_t> chosen;
    RestoreStats stats;
    for (size_t i = 0; i < candidates.size() && map; ++i) {
      auto st = ops_->Restore(*map, std::nullopt, candidates[i], generation);
      if (st.ok()) {
        chosen = i;
        stats = *st;
        break;
      }
      last = st.status();
      if (ServerTrouble(last)) break;
      // A server refused the checkpoint's files (a CRC or size mismatch, a
      // file missing): corrupt.
      if (!candidates[i].initial && !OnCorruptCheckpoint(candidates[i].dir, last)) return false;
      LOG(ERROR) << "cannot restore " << PointName(candidates[i]) << ": " << last
                 << (i + 1 < candidates.size() ? "; trying the checkpoint before it" : "");
    }
    if (!chosen && (!map || ServerTrouble(last))) {
      LOG(WARNING) << "restore interrupted (" << last
                   << "); waiting for every server and restoring again";
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(2));
      continue;
    }
    if (!chosen) {
      MutexLock lock(&state_.mu);
      state_.Fail(absl::StrCat("no usable checkpoint to roll back to: ", last.message()));
      return false;
    }
    const RestorePoint& point = candidates[*chosen];
    report->set_detect_sec(report->detect_sec());
    report->set_wait_sec(Secs(back - detected_at));
    report->set_restore_sec(Secs(absl::Now() - back));
    report->set_rows(stats.rows);
    report->set_bytes(stats.bytes);
    LOG(INFO) << "every server restored " << PointName(point) << " (" << stats.rows << " rows, "
              << stats.bytes << " bytes) in " << absl::FormatDuration(absl::Now() - back)
              << "; job generation " << generation << ", workers restart at clock " << point.clock;
    std::vector<uint64_t> kept;
    for (size_t i = *chosen; i < candidates.size(); ++i) {
      if (!candidates[i].initial) kept.push_back(candidates[i].clock);
    }
    Rewind(point, generation, report, record_initial || !point.initial, kept);
    state_.Notify();
    return true;
  }
}

void JobControl::Rewind(const RestorePoint& point, uint64_t generation, RecoveryReport* report,
                        bool record, const std::vector<uint64_t>& kept) {
  MutexLock lock(&state_.mu);
  const absl::Time now = absl::Now();
  state_.generation = generation;
  state_.positions.clear();
  for (const auto& [rank, position] : point.positions) {
    state_.positions[rank] = {point.clock, position};
  }
  // Every worker trains again from the point, the missing ones included:
  // after a failure (not at a new job's start) the clocks stay paused until
  // every worker has started in the new generation (WaitStart), those
  // restarted after the failure too, or start_deadline_ms passed
  // (JobState::ResumeAfterRewind).
  const bool after_failure = state_.formed || state_.takeover.active();
  std::vector<bool> live(state_.reported_final.size(), true);
  std::vector<uint32_t> workers;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    if (m.state == FINISHED) members_.Reopen(m.index, now);
    workers.push_back(m.index);
  }
  state_.loss.BeginRewind(workers);
  std::fill(state_.reported_final.begin(), state_.reported_final.end(), false);
  state_.reports.clear();
  state_.barriers.clear();
  clock_.Rewind(generation, point.clock, live);
  state_.cuts.StartFrom(point.initial ? 0 : point.clock);
  state_.HoldFirstCut(point.clock);
  state_.ResumeEvaluations(point.clock, kept);
  clock_.ResetMaxSpread();
  state_.formed = true;
  state_.recovery.ClearDoing();
  state_.recovery.RewindStarted(now);
  report->set_generation(generation);
  report->set_initial(point.initial);
  report->set_clock(point.clock);
  if (record) state_.recovery.Record(*report);
  if (after_failure) {
    state_.loss.HoldClocks(now);
    LOG(INFO) << "the clocks resume once every worker has started at clock " << point.clock
              << " (at most start_deadline_ms, " << config_.cluster().start_deadline_ms() << " ms)";
  } else {
    state_.loss.ReleaseClocks(/*forget_awaited=*/!record);
    clock_.SetPaused(false);
  }
  state_.Update();
  state_.changed.SignalAll();
}

void JobControl::Recover() {
  RecoveryBook::Pending p;
  {
    MutexLock lock(&state_.mu);
    if (state_.recovery.pending() == nullptr) return;
    p = *state_.recovery.pending();
    state_.recovery.SetDoing("waiting for the failed servers");
  }
  RecoveryReport report;
  report.set_cause(p.cause);
  report.set_started_unix_sec(UnixSec(p.failed_at));
  report.set_detect_sec(Secs(p.detected_at - p.failed_at));
  if (!WaitForServers()) return;
  {
    MutexLock lock(&state_.mu);
    if (EndRejoinLocked(p, &report)) return;
  }
  const bool partial = config_.checkpoint().recovery() == CheckpointConfig::PARTIAL &&
                       config_.cluster().mode() != BSP && !p.roll_back;
  if (partial) {
    auto points = ops_->RestorePoints();
    if (points.ok() && !points->empty()) {
      RecoverPartially(p, points->front(), &report);
      return;
    }
    LOG(WARNING) << "partial recovery without a complete checkpoint: the whole job rolls "
                    "back instead (a server's partitions are never served empty)";
  }
  report.set_kind("rollback");
  RollBack(&report, p.detected_at, /*record_initial=*/true);
}

bool JobControl::EndRejoinLocked(const RecoveryBook::Pending& p, RecoveryReport* report) {
  const RecoveryBook::Pending* now_pending = state_.recovery.pending();
  if (now_pending == nullptr || !now_pending->lost.empty() || !now_pending->silent.empty() ||
      now_pending->roll_back) {
    return false;
  }
  // Every server declared dead came back with its state (it was stalled,
  // not gone): nothing to restore.
  report->set_kind("rejoin");
  report->set_generation(state_.generation);
  report->set_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  report->set_wait_sec(Secs(absl::Now() - p.detected_at));
  report->set_total_sec(report->detect_sec() + report->wait_sec());
  report->set_complete(true);
  state_.recovery.Record(*report);
  state_.recovery.ClearPending();
  state_.recovery.ClearDoing();
  if (!state_.loss.clocks_held()) clock_.SetPaused(false);
  state_.Update();
  state_.changed.SignalAll();
  return true;
}

void JobControl::RecoverPartially(const RecoveryBook::Pending& p, const RestorePoint& point,
                                  RecoveryReport* report) {
  std::set<uint32_t> lost;
  uint64_t generation;
  {
    MutexLock lock(&state_.mu);
    lost = state_.recovery.pending() != nullptr ? state_.recovery.pending()->lost : p.lost;
    generation = state_.generation;
    state_.recovery.ClearPending();
    state_.recovery.SetDoing("restoring the replaced servers (partial recovery)");
  }
  const absl::Time back = absl::Now();
  const std::optional<PartitionMapProto> map = members_.Map();
  RestoreStats total;
  absl::Status st;
  for (uint32_t index : lost) {
    auto r = ops_->Restore(*map, index, point, generation);
    if (!r.ok()) {
      st = r.status();
      break;
    }
    total.rows += r->rows;
    total.bytes += r->bytes;
  }
  MutexLock lock(&state_.mu);
  if (!st.ok()) {
    if (!ServerTrouble(st)) {
      state_.Fail(absl::StrCat("partial recovery failed: ", st.message()));
      return;
    }
    // A server went away again: recover anew.
    LOG(WARNING) << "partial recovery interrupted: " << st;
    for (uint32_t index : lost) {
      state_.ServerFailed(index, p.cause, p.failed_at, p.detected_at, /*lost=*/true);
    }
    return;
  }
  LOG(INFO) << "partial recovery: servers [" << absl::StrJoin(lost, ",") << "] restored "
            << total.rows << " rows of their partitions from " << point.dir
            << "; the other servers and the workers went on";
  report->set_kind("partial");
  report->set_generation(state_.generation);
  report->set_clock(point.clock);
  report->set_wait_sec(Secs(back - p.detected_at));
  report->set_restore_sec(Secs(absl::Now() - back));
  report->set_total_sec(report->detect_sec() + report->wait_sec() + report->restore_sec());
  report->set_rows(total.rows);
  report->set_bytes(total.bytes);
  report->set_complete(true);
  state_.recovery.Record(*report);
  state_.recovery.ClearDoing();
  if (!state_.loss.clocks_held()) clock_.SetPaused(false);
  state_.Update();
  state_.changed.SignalAll();
}

void JobControl::FinalCollect() {
  std::vector<uint64_t> pinned;
  {
    MutexLock lock(&state_.mu);
    if (!state_.evals.on() || state_.phase != JobState::Phase::kDone) return;
    pinned = state_.evals.Pinned();
  }
  ops_->PinCheckpoints(pinned);
  ops_->CollectGarbage();
}

}  // namespace shardps
