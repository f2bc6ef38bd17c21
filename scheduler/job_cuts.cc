// JobControl: the checkpoint cuts and their faults (a failed cut, a
// corrupt checkpoint); job_control.h has the contract, checkpoint_guard.h
// the file-level checks.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "scheduler/checkpoint_guard.h"
#include "scheduler/job_control.h"

namespace shardps {
namespace {

// A cut that failed because a server is gone or unreachable: the recovery
// that follows handles it; not a checkpoint fault.
bool ServerGone(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) || absl::IsCancelled(st) ||
         absl::IsAborted(st) || st.message().find("stale generation") != absl::string_view::npos;
}

}  // namespace

void JobControl::TakeFinalCut(uint64_t serving) {
  // Every worker is finished or dead. When all finished training
  // (their last pushes acknowledged, servers still up for the
  // evaluation), the end is a consistent cut too: the job's final
  // checkpoint.
  bool need;
  uint64_t last;
  {
    MutexLock lock(&state_.mu);
    need = state_.cuts.FinalDue(absl::Now());
    last = state_.cuts.last_complete();
  }
  if (!need) return;
  const auto states = clock_.States();
  const auto finished = [](auto s) { return s == ClockService::WorkerState::kFinished; };
  const bool all_finished = std::all_of(states.begin(), states.end(), finished);
  // Dead workers with data left: their shares are still to be
  // trained (WAIT, REASSIGN), or, when none finished, the job waits
  // for one to come back; the cuts and the final one go on then.
  if (!all_finished &&
      (!state_.loss.drops() || std::none_of(states.begin(), states.end(), finished))) {
    return;
  }
  if (clock_.MaxClock() > last) {
    const uint64_t clock = clock_.MaxClock();
    // A failed final cut is taken again at the same clock (nothing
    // trains any more) before the job may end.
    if (AfterCut(clock, Cut(clock, 0, serving, /*final=*/true))) return;
  } else {
    clock_.Release();
  }
  MutexLock lock(&state_.mu);
  // The job's last state is evaluated too (when it was cut before).
  if (state_.cuts.last_complete() > 0)
    state_.evals.Enqueue(state_.cuts.last_complete(), /*final=*/true);
  state_.cuts.FinalDone();
  state_.Update();
  state_.changed.SignalAll();
}

absl::Status JobControl::Cut(uint64_t clock, uint64_t next, uint64_t serving, bool final,
                             bool delta_on_last) {
  Positions positions;
  uint64_t generation;
  std::vector<uint64_t> pinned;
  {
    MutexLock lock(&state_.mu);
    for (const auto& [rank, p] : state_.positions) positions[rank] = p.second;
    generation = state_.generation;
    pinned = state_.evals.Pinned();
  }
  ops_->PinCheckpoints(pinned);
  const std::optional<PartitionMapProto> map = members_.Map();
  const absl::Time start = absl::Now();
  absl::Status st = map ? ops_->CopyCut(*map, generation, clock, delta_on_last)
                        : absl::FailedPreconditionError("checkpoint: no partition map");
  const absl::Time copied = absl::Now();
  // The workers go on while the files are written.
  if (next > 0) {
    clock_.Hold(next);
  } else {
    clock_.Release();
  }
  if (st.ok()) st = ops_->FinishCut(*map, generation, clock, positions);
  const absl::Time written = absl::Now();
  if (st.ok()) {
    last_cut_ = LastCut{clock, generation, map->version(), start};
  }
  MutexLock lock(&state_.mu);
  state_.cuts.Completed(clock, st, serving, copied - start, written - copied, written);
  if (st.ok()) {
    LOG(INFO) << "checkpoint at clock " << clock << ": workers held "
              << absl::FormatDuration(copied - start) << " for the copy, files written in "
              << absl::FormatDuration(written - copied) << " behind them";
    state_.evals.Enqueue(clock, final);
  } else {
    LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << st;
  }
  state_.changed.SignalAll();
  return st;
}

void JobControl::CutVersion(uint64_t clock, uint64_t next) {
  uint64_t generation;
  {
    MutexLock lock(&state_.mu);
    generation = state_.generation;
  }
  const std::optional<PartitionMapProto> map = members_.Map();
  const absl::Time start = absl::Now();
  const absl::Status st = map ? ops_->VersionCut(*map, generation, clock)
                              : absl::FailedPreconditionError("version: no partition map");
  const absl::Duration hold = absl::Now() - start;
  if (next > 0) {
    clock_.Hold(next);
  } else {
    clock_.Release();
  }
  MutexLock lock(&state_.mu);
  state_.cuts.VersionCompleted(clock, st, hold);
  if (st.ok()) {
    LOG(INFO) << "version at clock " << clock << " (no files): workers held "
              << absl::FormatDuration(hold) << " for the copy";
  } else {
    LOG(WARNING) << "version at clock " << clock
                 << " failed; the replicas wait for the next cut: " << st;
  }
  state_.changed.SignalAll();
}

bool JobControl::AfterCut(uint64_t clock, const absl::Status& st) {
  if (st.ok()) return false;  // Cut reset the failures.
  // No orphan part files: a directory without MANIFEST is no checkpoint.
  // (Every server has answered, so none is still writing into it; a stalled
  // one that resumes finds it gone and its write fails.)
  if (absl::Status removed = RemoveIncompleteCheckpoint(config_.checkpoint().dir(), clock);
      !removed.ok()) {
    LOG(WARNING) << "cannot remove the failed checkpoint's files: " << removed;
  }
  MutexLock lock(&state_.mu);
  if (ServerGone(st) || state_.recovery.pending() != nullptr || state_.Ended())
    return false;  // A recovery takes over.
  const std::optional<absl::Duration> backoff = state_.cuts.CountFailure(absl::Now());
  if (!backoff) {
    state_.Fail(absl::StrCat("checkpoint at clock ", clock, " failed ", state_.cuts.failures(),
                             " times in a row (checkpoint.dir ", config_.checkpoint().dir(),
                             "): ", st.ToString()));
    return false;
  }
  LOG(ERROR) << "checkpoint at clock " << clock << ": attempt " << state_.cuts.failures() << " of "
             << CutBook::kAttempts << " failed; trying again in " << absl::FormatDuration(*backoff);
  return true;
}

bool JobControl::OnCorruptCheckpoint(const std::string& dir, const absl::Status& why) {
  if (config_.checkpoint().on_corrupt() != CheckpointConfig::FALL_BACK) {
    MutexLock lock(&state_.mu);
    state_.Fail(absl::StrCat(
        "checkpoint ", dir, " is corrupt: ", why.message(),
        "; refusing to fall back to an older one (repair or remove it, or set "
        "checkpoint.on_corrupt: FALL_BACK to restore the newest usable checkpoint with the "
        "corrupt ones set aside)"));
    return false;
  }
  auto aside = SetCheckpointAside(dir, absl::Now());
  if (!aside.ok()) {
    MutexLock lock(&state_.mu);
    state_.Fail(absl::StrCat("checkpoint ", dir, " is corrupt (", why.message(),
                             ") and cannot be set aside: ", aside.status().message()));
    return false;
  }
  LOG(WARNING) << "checkpoint " << dir << " is corrupt (" << why.message() << "): set aside as "
               << *aside << "; falling back to the checkpoint before it "
               << "(checkpoint.on_corrupt: FALL_BACK)";
  return true;
}

bool JobControl::CheckNewerCheckpoints(int64_t newest_usable) {
  if (!checkpoints_on_) return true;
  auto corrupt = FindCorruptCheckpoints(config_.checkpoint().dir(), newest_usable);
  if (!corrupt.ok()) {
    LOG(WARNING) << "cannot look for corrupt checkpoints: " << corrupt.status();
    return true;
  }
  for (const CorruptCheckpoint& c : *corrupt) {
    if (!OnCorruptCheckpoint(c.dir, c.why)) return false;
  }
  return true;
}

}  // namespace shardps
