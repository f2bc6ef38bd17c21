// JobControl: formation and recoveries (job_control.h); the cuts are in
// job_cuts.cc.
#include "scheduler/job_control.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/config.h"
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
      checkpoints_on_(!config.checkpoint().dir().empty()),
      drops_(EffectiveOnWorkerLoss(config.cluster()) == ClusterConfig::DROP) {}

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
    uint64_t serving = 0;  // The cut requests when the current cut was placed.
    while (!stop_) {
      const JobState::ControlWork work = state_.WaitControlWork(&serving);
      if (work == JobState::ControlWork::kEnded) break;
      if (work == JobState::ControlWork::kRecover) {
        Recover();
        continue;
      }
      if (!checkpoints_on_) continue;
      if (!clock_.MinClock()) {
        // Nobody trains any more: nothing to move for.
        state_.EndMoves("every worker has finished: the job is ending");
        TakeFinalCut(serving);
        continue;
      }
      const std::optional<uint64_t> held = clock_.HeldClock();
      if (!held || !clock_.AllReachedHold()) continue;
      if (work == JobState::ControlWork::kMove) {
        Reshard(*held, serving);
        continue;
      }
      const JobState::NextCut cut = state_.CutsAfter(*held, absl::Now());
      // A base the servers know: else this cut is a checkpoint (the first
      // after a takeover).
      if (cut.version_only && ops_->CanCutVersion()) {
        CutVersion(*held, cut.next);
        continue;
      }
      AfterCut(*held, Cut(*held, cut.next, serving));
    }
  }
  FinalCollect();
  state_.ControlEnded();
}

bool JobControl::Form() {
  const ClusterConfig& k = config_.cluster();
  // Live processes of an earlier scheduler rejoin at their next heartbeat:
  // give them that long before deciding the job is new.
  const absl::Duration settle =
      std::min(Ms(k.dead_after_ms()), Ms(2 * uint64_t{k.heartbeat_ms()} + 500));
  std::optional<std::string> problem;
  if (!state_.WaitFormable(start_time_, settle, stop_, &problem)) return false;
  const bool takeover = problem.has_value();
  if (takeover && problem->empty()) {
    TakeOver();  // Every process came back with one state: the job goes on from it.
  } else {
    if (takeover) LOG(WARNING) << "taking the job over needs a rollback: " << *problem;
    RecoveryReport report;
    report.set_kind(takeover ? "rollback" : "resume");
    report.set_cause(takeover ? absl::StrCat("the scheduler restarted and ", *problem)
                              : "the job started");
    report.set_started_unix_sec(UnixSec(start_time_));
    if (!RollBack(&report, start_time_, /*record_initial=*/takeover)) return false;
  }
  state_.Notify();
  return true;
}

void JobControl::TakeOver() { state_.TakeOver(ops_->RestorePoints(), start_time_); }

bool JobControl::RollBack(RecoveryReport* report, absl::Time detected_at, bool record_initial) {
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    if (!state_.WaitForServers(stop_)) return false;
    const absl::Time back = absl::Now();
    const uint64_t generation = state_.BeginRollBack();
    auto points = ops_->RestorePoints();
    if (!points.ok()) {
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
    state_.Rewound(point, generation, report, record_initial || !point.initial, kept);
    state_.Notify();
    return true;
  }
}

void JobControl::Recover() {
  const std::optional<RecoveryBook::Pending> pending = state_.TakeUpRecovery();
  if (!pending) return;
  const RecoveryBook::Pending& p = *pending;
  RecoveryReport report;
  report.set_cause(p.cause);
  report.set_started_unix_sec(UnixSec(p.failed_at));
  report.set_detect_sec(Secs(p.detected_at - p.failed_at));
  if (!state_.WaitForServers(stop_)) return;
  if (state_.EndRejoin(p, &report)) return;
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

void JobControl::RecoverPartially(const RecoveryBook::Pending& p, const RestorePoint& point,
                                  RecoveryReport* report) {
  uint64_t generation;
  const std::set<uint32_t> lost = state_.BeginPartialRecovery(p, &generation);
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
  report->set_generation(generation);
  report->set_clock(point.clock);
  report->set_wait_sec(Secs(back - p.detected_at));
  report->set_restore_sec(Secs(absl::Now() - back));
  report->set_total_sec(report->detect_sec() + report->wait_sec() + report->restore_sec());
  report->set_rows(total.rows);
  report->set_bytes(total.bytes);
  report->set_complete(true);
  state_.EndPartialRecovery(*report);
}

void JobControl::FinalCollect() {
  const std::optional<std::vector<uint64_t>> pinned = state_.PinnedAtEnd();
  if (!pinned) return;
  ops_->PinCheckpoints(*pinned);
  ops_->CollectGarbage();
}

}  // namespace shardps
